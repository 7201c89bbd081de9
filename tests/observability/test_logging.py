"""The `sagacity` logger: one INFO line per saga end, WARNINGs for what needs a human."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from sagacity import (
    ApprovalHashMismatchError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
)


@pytest.fixture
def memory() -> Iterator[Sagacity]:
    sagacity = Sagacity.from_url("memory://")
    yield sagacity
    sagacity.close()


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "sagacity"]


class Shop:
    def __init__(self, *, refund_fails: bool = False, ship_error: BaseException) -> None:
        self.refund_fails = refund_fails
        self.ship_error = ship_error

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        return f"res-{sku}"

    @compensation
    def release(self) -> None:
        pass

    @compensable(by="refund")
    def charge(self, amount: int) -> str:
        return f"ch-{amount}"

    @compensation
    def refund(self) -> None:
        if self.refund_fails:
            raise RuntimeError("the payment provider is down")

    @compensable(by="release")
    def ship(self, address: str) -> str:
        raise self.ship_error


def run(sagacity: Sagacity, shop: Shop, saga_id: str) -> SagaOutcome:
    tools = {tool.name: tool for tool in sagacity.wrap(shop)}

    def work() -> None:
        tools["reserve"](sku="A")
        tools["charge"](amount=5)
        tools["ship"](address="1 Main St")

    return sagacity.saga(saga_id, work).outcome


class TestSagaEnd:
    def test_one_info_line_per_saga_and_none_per_call(
        self, memory: Sagacity, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Three calls and two compensations log exactly one INFO line: the saga's end."""
        caplog.set_level(logging.DEBUG, logger="sagacity")
        outcome = run(memory, Shop(ship_error=ValueError("no such street")), "order-1")
        assert outcome is SagaOutcome.COMPENSATED
        assert records(caplog) == [
            (
                logging.INFO,
                "saga 'order-1' ended COMPENSATED: 11 entries, 3 calls, 2 compensated, "
                "0 compensations failed, 0 in doubt",
            )
        ]


class TestWarnings:
    def test_a_failed_compensation(
        self, memory: Sagacity, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The compensation that raised is named with its saga, call, tool, seq and error."""
        caplog.set_level(logging.INFO, logger="sagacity")
        outcome = run(memory, Shop(refund_fails=True, ship_error=ValueError("x")), "order-2")
        assert outcome is SagaOutcome.COMPENSATION_FAILED
        warnings = [m for level, m in records(caplog) if level == logging.WARNING]
        assert warnings == [
            "saga 'order-2': the compensation of call 'charge#1' (tool 'charge', seq 4) failed: "
            "RuntimeError: the payment provider is down"
        ]

    def test_a_call_in_doubt(self, memory: Sagacity, caplog: pytest.LogCaptureFixture) -> None:
        """A call that timed out may have acted: warned when it fails, and at the saga's end."""
        caplog.set_level(logging.INFO, logger="sagacity")
        outcome = run(memory, Shop(ship_error=TimeoutError("carrier silent")), "order-3")
        assert outcome is SagaOutcome.NEEDS_ATTENTION
        warnings = [m for level, m in records(caplog) if level == logging.WARNING]
        assert warnings == [
            "saga 'order-3': call 'ship#1' of tool 'ship' is in doubt (TimeoutError): its "
            "effect may exist",
            "saga 'order-3' ended NEEDS_ATTENTION with 1 call(s) in doubt: ship#1; resolve "
            "them (sagacity doubts)",
        ]

    def test_a_refused_approval(self, memory: Sagacity, caplog: pytest.LogCaptureFixture) -> None:
        """An approved call whose input changed is refused, and the refusal is a WARNING."""
        caplog.set_level(logging.INFO, logger="sagacity")

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(amount: str) -> str:
            return "wt-1"

        (tool,) = memory.wrap(wire)
        memory.saga("w-1", lambda: tool(amount="10"))
        memory.approve("w-1", approver="alice")
        with pytest.raises(ApprovalHashMismatchError):
            memory.resume_saga("w-1", lambda: tool(amount="9999"))
        warnings = [m for level, m in records(caplog) if level == logging.WARNING]
        assert len(warnings) == 1
        assert warnings[0].startswith("saga 'w-1': tool 'wire' refused (input_mismatch): ")
