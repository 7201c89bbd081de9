"""A walk in a process that lacks some compensations: it leaves them, journaling nothing."""

from __future__ import annotations

import asyncio

import pytest

from sagacity import CompensationContext, Sagacity, SagaOutcome, compensable, compensation
from tests._shop import phases


class Seats:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    @compensable(by="release")
    def hold(self, seat: str) -> str:
        return f"hold-{seat}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")


class Cards:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    @compensable(by="refund")
    def charge(self, amount: str) -> str:
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.log.append(f"refund {ctx.result}")


class Crash(BaseException):
    """The process dies before any walk."""


def crashed(sagacity: Sagacity) -> None:
    """Saga `s`: hold (seq 1-2), charge (seq 3-4), then the process dies."""
    tools = {tool.name: tool for tool in sagacity.wrap(Seats([]), Cards([]))}

    def work() -> None:
        tools["hold"]("A1")
        tools["charge"]("40")
        raise Crash

    with pytest.raises(Crash):
        sagacity.saga("s", work)


def elsewhere(sagacity: Sagacity, *sources: object) -> Sagacity:
    other = Sagacity(sagacity.journal, sagacity.approvals)
    other.wrap(*sources)
    return other


class TestTheWalkStopsBeforeWhatItLacks:
    def test_the_first_compensation_missing_leaves_all(self, sagacity: Sagacity) -> None:
        """The refund comes first and is not here: nothing runs, nothing is journaled."""
        crashed(sagacity)
        log: list[str] = []
        result = elsewhere(sagacity, Seats(log)).compensate("s")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        report = result.compensation
        assert report is not None
        assert [(r.tool_name, r.error) for r in report.waiting] == [
            ("charge", "no compensation for tool 'charge' is registered in this process"),
            ("hold", "waits for the compensation of call 'charge#1' (tool 'charge'), which runs "
             "before it"),
        ]  # fmt: skip
        assert (report.compensated, report.failed, report.in_doubt) == ([], [], [])
        assert not report.clean
        assert log == []
        ended = sagacity.history("s")[-1]
        assert phases(sagacity.history("s"))[4:] == [("ENDED", None, None)]
        assert ended.payload == {
            "outcome": "NEEDS_ATTENTION",
            "compensated": [],
            "compensation_failed": [],
            "in_doubt": [],
            "compensation_waiting": ["charge#1", "hold#1"],
        }

    def test_what_comes_before_the_missing_one_runs(self, sagacity: Sagacity) -> None:
        """The refund is here and runs; the release is not, and waits."""
        crashed(sagacity)
        log: list[str] = []
        result = elsewhere(sagacity, Cards(log)).compensate("s")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [r.call_id for r in result.compensation.compensated] == ["charge#1"]
        assert [r.call_id for r in result.compensation.waiting] == ["hold#1"]
        assert log == ["refund ch-40"]
        assert phases(sagacity.history("s"))[4:] == [
            ("COMPENSATING", "charge", 4),
            ("COMPENSATED", "charge", 4),
            ("ENDED", None, None),
        ]

    def test_a_process_with_the_tools_finishes_in_order(self, sagacity: Sagacity) -> None:
        """After a walk that left everything, one with the tools runs both, in reverse."""
        crashed(sagacity)
        elsewhere(sagacity).compensate("s")
        log: list[str] = []
        result = elsewhere(sagacity, Seats(log), Cards(log)).compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.compensation is not None
        assert result.compensation.waiting == []
        assert log == ["refund ch-40", "release hold-A1"]
        assert sagacity.history("s")[-1].payload == {
            "outcome": "COMPENSATED",
            "compensated": ["charge#1", "hold#1"],
            "compensation_failed": [],
            "in_doubt": [],
        }

    def test_the_async_walk_leaves_them_too(self, sagacity: Sagacity) -> None:
        """The async walk stops before the missing compensation as the sync one does."""
        crashed(sagacity)
        log: list[str] = []
        result = asyncio.run(elsewhere(sagacity, Cards(log)).acompensate("s"))
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [r.call_id for r in result.compensation.waiting] == ["hold#1"]
        assert log == ["refund ch-40"]
