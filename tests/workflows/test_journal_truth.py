"""What a run journals is what happened: refusals with any text, and the stages it runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sagacity import (
    CompensationContext,
    Phase,
    Sagacity,
    compensable,
    compensation,
    verify,
)
from sagacity.workflows import (
    CheckContext,
    CheckResult,
    StageCheck,
    WorkflowRuntime,
    WorkflowStatus,
    check,
    stage,
    workflow,
)


@pytest.fixture
def sagacity(store_url: str) -> Iterator[Sagacity]:
    """A Sagacity on each backend (memory, SQLite, PostgreSQL)."""
    instance = Sagacity.from_url(store_url)
    yield instance
    instance.close()


class SaysNo(StageCheck):
    """Fails with a reason that holds a lone surrogate."""

    def check(self, ctx: CheckContext) -> CheckResult:
        return CheckResult.fail(f"{ctx.value} is over \ud800 the limit")


class Breaks(StageCheck):
    """Raises with a message that holds a lone surrogate."""

    def check(self, ctx: CheckContext) -> CheckResult:
        raise ValueError("limit table \udfff unreadable")


def _ledger_workflow(refusal: type[StageCheck]) -> tuple[object, list[str]]:
    log: list[str] = []

    @workflow("lone-surrogate")
    class Payout:
        @stage(order=1)
        @compensable(by="unhold")
        def hold(self, amount: int) -> int:
            log.append(f"hold {amount}")
            return amount

        @compensation
        def unhold(self, ctx: CompensationContext) -> None:
            log.append(f"unhold {ctx.result}")

        @stage(order=2)
        @check(refusal)
        def pay(self, amount: int) -> str:
            log.append(f"pay {amount}")
            return f"pay-{amount}"

    return Payout(), log


class TestRefusalText:
    @pytest.mark.parametrize(
        ("refusal", "detail"),
        [
            (SaysNo, "7 is over \\ud800 the limit"),
            (Breaks, "Breaks.check raised ValueError: limit table \\udfff unreadable"),
        ],
    )
    def test_a_lone_surrogate_is_journaled_escaped(
        self, sagacity: Sagacity, refusal: type[StageCheck], detail: str
    ) -> None:
        """The REFUSED entry is journaled with the surrogate escaped; the stage is CHECK_FAILED."""
        message = (
            f"run 'ls-1': check {refusal.__qualname__} refused stage 'pay': {detail}; the stage "
            "was not run and the run compensates"
        )
        payout, log = _ledger_workflow(refusal)
        handle = WorkflowRuntime(sagacity, [payout]).start("lone-surrogate", 7, run_id="ls-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert [(s.name, s.status.value, s.reason) for s in handle.stages] == [
            ("hold", "COMPENSATED", None),
            ("pay", "CHECK_FAILED", detail),
        ]
        assert handle.error == detail
        assert log == ["hold 7", "unhold 7"]
        (refused,) = [e for e in sagacity.history("ls-1") if e.phase is Phase.REFUSED]
        assert (refused.call_id, refused.payload) == (
            "pay",
            {
                "reason": "check_failed",
                "check": refusal.__qualname__,
                "detail": detail,
                "error": message,
            },
        )
        (ended,) = [e for e in sagacity.history("ls-1") if e.phase is Phase.ENDED]
        assert ended.payload["error"] == {"type": "CheckFailedError", "message": message}
        assert verify(sagacity.journal, "ls-1").ok

    def test_other_text_is_kept_as_it_is(self, sagacity: Sagacity) -> None:
        """Only lone surrogates are escaped: other non-ASCII text is journaled unchanged."""

        class Accented(StageCheck):
            def check(self, ctx: CheckContext) -> CheckResult:
                return CheckResult.fail("dépasse la limite de 5 € 🙂")

        payout, _ = _ledger_workflow(Accented)
        handle = WorkflowRuntime(sagacity, [payout]).start("lone-surrogate", 7, run_id="ls-2")
        assert handle.stages[1].reason == "dépasse la limite de 5 € 🙂"
