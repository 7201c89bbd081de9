"""What the workflow process tests run: `python -m tests.workflows._child ACTION URL DIR RUN`.

ACTION is `start` (start run RUN of the refund workflow), `start-receipt` (start run
RUN of the receipt workflow), `resume`, `approve` (approve the wire's gate as `carol`)
or `reject` (reject it as `dave`). DIR holds the ledger; a
file `low-budget` in it makes the budget check fail. With a fifth argument the process is
stopped there, to be killed: `after:<PHASE>:<call id>` once that journal entry is
committed, `inside:<stage>` inside the stage once its effect is in the ledger. Either way
it prints the kill point and sleeps. Otherwise it prints the run's status and exits.
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from sagacity import JournalEntry, Phase, Sagacity, SqliteApprovalStore, SqliteJournal
from sagacity.workflows import WorkflowRuntime
from tests.workflows._receipt import ReceiptWorkflow
from tests.workflows._refund import REQUEST, Ledger, RefundRequest, RefundWorkflow, Reservation


def _stop(point: str) -> None:
    print(point, flush=True)
    time.sleep(120)
    raise SystemExit(f"the process was meant to be killed at {point}")


class StoppingJournal(SqliteJournal):
    """A SQLite journal that stops the process once a chosen entry is committed."""

    def __init__(self, path: str, point: str | None) -> None:
        super().__init__(path)
        self.point = point

    def append(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        entry = super().append(saga_id, phase, **fields)
        if self.point == f"after:{entry.phase.name}:{entry.call_id}":
            _stop(self.point)
        return entry


class StoppingRefund(RefundWorkflow):
    """The refund workflow, stopped inside a stage once its effect is recorded."""

    def __init__(self, ledger: Ledger, point: str | None) -> None:
        low = (ledger.path.parent / "low-budget").exists()
        super().__init__(ledger, budget=Decimal("1") if low else Decimal("500"))
        self.point = point

    def reserve_funds(self, request: RefundRequest) -> Reservation:
        reservation = super().reserve_funds(request)
        if self.point == "inside:reserve_funds":
            _stop(self.point)
        return reservation

    def wire(self, reservation: Reservation) -> str:
        wired = super().wire(reservation)
        if self.point == "inside:wire":
            _stop(self.point)
        return wired


# The overrides are stages of the same workflow: their declarations are the parent's.
for _name in ("reserve_funds", "wire"):
    getattr(StoppingRefund, _name).__dict__.update(getattr(RefundWorkflow, _name).__dict__)


def main(action: str, url: str, folder: str, run_id: str, point: str | None = None) -> None:
    path = url[len("sqlite:///") :]
    # A short lease: the process that goes on after the kill waits for it to expire.
    sagacity = Sagacity(StoppingJournal(path, point), SqliteApprovalStore(path), lease_ttl=1.0)
    ledger = Ledger(Path(folder) / "ledger.txt")
    runtime = WorkflowRuntime(sagacity, [StoppingRefund(ledger, point), ReceiptWorkflow(ledger)])
    if action == "start":
        handle = runtime.start("refund-request", REQUEST, run_id=run_id)
    elif action == "start-receipt":
        handle = runtime.start("receipt", "R-1", run_id=run_id)
    elif action == "resume":
        handle = runtime.resume(run_id)
    elif action == "reject":
        handle = runtime.reject_gate(run_id, "wire", "dave", "not this one")
    elif action == "approve":
        gate = runtime.get(run_id).gate
        assert gate is not None
        handle = runtime.approve_gate(run_id, "wire", "carol", sha256=gate.input_sha256)
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(handle.status.value, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
