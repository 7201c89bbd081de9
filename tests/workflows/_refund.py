"""The refund workflow the tests run: reserve → check budget → gate → wire → notify.

Every effect and every undo is a line in a ledger file, so that a test (or another
process) can read what really happened, in order. A stage fails on cue when the ledger's
folder holds a file named `fail-<stage>`.
"""

from __future__ import annotations

import dataclasses
import os
from decimal import Decimal
from pathlib import Path

from sagacity import CompensationContext, Reversibility, compensable, compensation
from sagacity.workflows import CheckContext, CheckResult, StageCheck, check, gate, stage, workflow


@dataclasses.dataclass(frozen=True)
class RefundRequest:
    """What a run is started with."""

    order_id: str
    amount: Decimal
    iban: str


@dataclasses.dataclass(frozen=True)
class Reservation:
    """What the first stage hands to the wire."""

    reservation_id: str
    order_id: str
    amount: Decimal
    iban: str


class Ledger:
    """Effects as lines of a file, each flushed to disk before the stage returns."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def lines(self) -> list[str]:
        if not self.path.exists():
            return []
        return self.path.read_text(encoding="utf-8").splitlines()

    def fails(self, stage_name: str) -> bool:
        return (self.path.parent / f"fail-{stage_name}").exists()


class BudgetCheck(StageCheck):
    """The refund fits the remaining budget of the workflow's services."""

    def check(self, ctx: CheckContext) -> CheckResult:
        reservation: Reservation = ctx.value
        budget: Decimal = ctx.workflow.budget
        if reservation.amount > budget:
            return CheckResult.fail(f"refund {reservation.amount} exceeds the budget {budget}")
        return CheckResult.ok()


@workflow("refund-request", description="Refund an order by wire transfer")
class RefundWorkflow:
    """The seed's refund example."""

    def __init__(self, ledger: Ledger, budget: Decimal = Decimal("500")) -> None:
        self.ledger = ledger
        self.budget = budget

    @stage(order=1)
    @compensable(by="release_funds")
    def reserve_funds(self, request: RefundRequest) -> Reservation:
        """Hold the refund's amount."""
        if self.ledger.fails("reserve_funds"):
            raise RuntimeError("treasury unavailable")
        self.ledger.record(f"reserve {request.order_id} {request.amount}")
        return Reservation(
            reservation_id=f"res-{request.order_id}",
            order_id=request.order_id,
            amount=request.amount,
            iban=request.iban,
        )

    @compensation
    def release_funds(self, ctx: CompensationContext) -> None:
        self.ledger.record(f"release {ctx.result['reservation_id']}")

    @stage(order=2)
    @check(BudgetCheck)
    @gate(reason="A wire transfer cannot be undone", timeout_seconds=3600)
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, reservation: Reservation) -> str:
        """Send the money."""
        if self.ledger.fails("wire"):
            raise RuntimeError("bank rejected the transfer")
        self.ledger.record(f"wire {reservation.amount} to {reservation.iban}")
        return f"wire-{reservation.order_id}"

    @stage(order=3)
    @compensable(by="retract_notice")
    def notify(self, wire_id: str) -> str:
        """Tell the customer."""
        if self.ledger.fails("notify"):
            raise RuntimeError("mail server down")
        self.ledger.record(f"notify {wire_id}")
        return f"notice-{wire_id}"

    @compensation
    def retract_notice(self, ctx: CompensationContext) -> None:
        self.ledger.record(f"retract {ctx.result}")


REQUEST = RefundRequest(order_id="A-17", amount=Decimal("120.00"), iban="DE89370400440532013000")
