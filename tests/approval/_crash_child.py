"""What the killed-approval tests run: `python -m tests.approval._crash_child ACTION URL LEDGER`.

resume  resume saga `wire-1` without work: its approved `wire` prints `inside wire` once its
        INTENT is committed, before it acts, and waits to be killed
gate    resume run `refund-9` of the refund workflow: its approved `wire` stage does the same
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.workflows import WorkflowRuntime
from tests.workflows._refund import Ledger, RefundWorkflow, Reservation

SAGA = "wire-1"
RUN = "refund-9"


def wait_to_be_killed() -> None:
    print("inside wire", flush=True)
    time.sleep(120)
    raise SystemExit("the process was meant to be killed inside wire")


class Bank:
    """Reserve funds, then wire them (IRREVERSIBLE); effects and undos are ledger lines."""

    def __init__(self, ledger: Path, *, hang: bool = False) -> None:
        self.ledger = ledger
        self.hang = hang

    def record(self, line: str) -> None:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        self.record(f"reserve {sku}")
        return f"res-{sku}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.record(f"release {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: str, to: str) -> str:
        """Wire money to another bank."""
        if self.hang:
            wait_to_be_killed()  # between INTENT and any effect
        self.record(f"wire {amount} to {to}")
        return f"wire-{amount}-{to}"


class HangingRefund(RefundWorkflow):
    """The refund workflow, whose wire stage waits to be killed before it acts."""

    def wire(self, reservation: Reservation) -> str:
        wait_to_be_killed()
        return super().wire(reservation)


# The override is a stage of the same workflow: its declarations are the parent's.
HangingRefund.wire.__dict__.update(RefundWorkflow.wire.__dict__)


def main(action: str, url: str, ledger: str) -> None:
    # A short lease: the process that goes on after the kill waits for it to expire.
    sagacity = Sagacity.from_url(url, lease_ttl=1.0)
    if action == "resume":
        sagacity.wrap(Bank(Path(ledger), hang=True))
        sagacity.resume_saga(SAGA)
    elif action == "gate":
        runtime = WorkflowRuntime(sagacity, [HangingRefund(Ledger(Path(ledger)))])
        runtime.resume(RUN)
    else:
        raise SystemExit(f"unknown action {action!r}")
    raise SystemExit(f"{action}: the process was meant to be killed inside wire")


if __name__ == "__main__":
    main(*sys.argv[1:])
