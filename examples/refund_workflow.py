"""A refund workflow: reserve the funds, check the budget, wait at a gate, wire, notify.

Three runs of one workflow on one SQLite file:

- refund-1 pauses at the gate before the wire. The process that started it could exit
  here: a second `Sagacity` on the same file (another process, in real life) approves
  the exact value the wire will receive and resumes the run, which completes.
- refund-2 is rejected at the gate: the reserved funds are released.
- refund-3 asks for more than the budget: the check refuses the wire before anyone is
  asked, and the funds are released.

Run: .venv/bin/python examples/refund_workflow.py     (no network)
"""

from __future__ import annotations

import dataclasses
import tempfile
from decimal import Decimal
from pathlib import Path

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.workflows import (
    CheckContext,
    CheckResult,
    StageCheck,
    WorkflowHandle,
    WorkflowRuntime,
    check,
    gate,
    stage,
    workflow,
)


@dataclasses.dataclass(frozen=True)
class RefundRequest:
    order_id: str
    amount: Decimal
    iban: str


@dataclasses.dataclass(frozen=True)
class Reservation:
    reservation_id: str
    amount: Decimal
    iban: str


class Treasury:
    """The services the workflow uses: here, lines printed as they happen."""

    budget = Decimal("500")

    def act(self, line: str) -> None:
        print(f"  {line}")


class BudgetCheck(StageCheck):
    """The refund must fit the treasury's remaining budget."""

    def check(self, ctx: CheckContext) -> CheckResult:
        reservation: Reservation = ctx.value
        budget = ctx.workflow.treasury.budget
        if reservation.amount > budget:
            return CheckResult.fail(f"{reservation.amount} exceeds the budget of {budget}")
        return CheckResult.ok()


@workflow("refund-request", description="Refund an order by wire transfer")
class RefundWorkflow:
    def __init__(self, treasury: Treasury) -> None:
        self.treasury = treasury

    @stage(order=1)
    @compensable(by="release_funds")
    def reserve_funds(self, request: RefundRequest) -> Reservation:
        """Hold the refund's amount."""
        self.treasury.act(f"reserved {request.amount} for {request.order_id}")
        return Reservation(
            reservation_id=f"res-{request.order_id}", amount=request.amount, iban=request.iban
        )

    @compensation
    def release_funds(self, ctx: CompensationContext) -> None:
        self.treasury.act(f"undo: released {ctx.result['reservation_id']}")

    @stage(order=2)
    @check(BudgetCheck)
    @gate(reason="A wire transfer cannot be undone", timeout_seconds=24 * 3600)
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, reservation: Reservation) -> str:
        """Send the money."""
        self.treasury.act(f"wired {reservation.amount} to {reservation.iban}")
        return f"wire-{reservation.reservation_id}"

    @stage(order=3)
    def notify(self, wire_id: str) -> str:
        """Tell the customer (no effect to undo)."""
        self.treasury.act(f"notified the customer of {wire_id}")
        return f"notice-{wire_id}"


def show(title: str, handle: WorkflowHandle) -> None:
    stages = ", ".join(f"{s.name}={s.status.value}" for s in handle.stages)
    at = f" at {handle.current_stage}" if handle.current_stage else ""
    print(f"{title}: {handle.status.value}{at} [{stages}]")


def main(folder: Path) -> None:
    url = f"sqlite:///{folder / 'refunds.db'}"
    requests = {
        "refund-1": RefundRequest("A-17", Decimal("120.00"), "DE89370400440532013000"),
        "refund-2": RefundRequest("A-18", Decimal("80.00"), "DE89370400440532013000"),
        "refund-3": RefundRequest("A-19", Decimal("900.00"), "DE89370400440532013000"),
    }

    # The process that takes refund requests.
    front = Sagacity.from_url(url)
    runtime = WorkflowRuntime(front, workflows=[RefundWorkflow(Treasury())])
    for run_id, request in requests.items():
        print(f"{run_id}:")
        show(f"{run_id} started", runtime.start("refund-request", request, run_id=run_id))
    front.close()

    # Another process: the approver's, with the same workflow registered.
    back = Sagacity.from_url(url)
    approvals = WorkflowRuntime(back, workflows=[RefundWorkflow(Treasury())])
    for waiting in approvals.pending_gates():
        print(
            f"gate of {waiting.run_id} before {waiting.stage_name}: {waiting.reason}; "
            f"value {waiting.value['amount']} to {waiting.value['iban']}, "
            f"sha256 {waiting.input_sha256[:12]}…"
        )
    gate_1 = approvals.get("refund-1").gate
    assert gate_1 is not None
    approvals.approve_gate("refund-1", "wire", "alice", sha256=gate_1.input_sha256)
    print("refund-1 resumed:")
    show("refund-1", approvals.resume("refund-1"))
    print("refund-2 rejected:")
    show("refund-2", approvals.reject_gate("refund-2", "wire", "bob", "already refunded"))
    print(f"refund-1 result: {approvals.get('refund-1').result}")
    print("journal of refund-1:")
    for entry in back.history("refund-1"):
        print(f"  {entry.seq:2} {entry.phase.name:18} {entry.call_id or ''}".rstrip())
    back.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(Path(folder))
