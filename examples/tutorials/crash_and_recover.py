"""Tutorial 2: kill a worker mid-saga, find the call in doubt, resolve it, compensate.

Run it with `python examples/tutorials/crash_and_recover.py`. It starts this same file as
a worker process, which reserves stock, charges a card and starts booking a courier; the
program kills the worker with SIGKILL while the courier call is running. Then, as the
operator would in a new process, it reopens the SQLite journal: the two finished calls
are undone, the courier call is *in doubt* (its INTENT is journaled, its outcome is not)
and is never undone blindly. The operator checks with the courier, records what they
found with `Sagacity.resolve`, and the next compensation walk cancels the booking.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sagacity import CompensationContext, Sagacity, compensable, compensation, verify


class Shop:
    """Tools whose effects are lines in a ledger file that every process shares."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    def record(self, line: str) -> None:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        self.record(f"reserved {qty} x {sku}")
        return f"res-{sku}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.record(f"released {ctx.result}")

    @compensable(by="refund_card")
    def charge_card(self, amount: str) -> str:
        self.record(f"charged {amount}")
        return "ch-1"

    @compensation
    def refund_card(self, ctx: CompensationContext) -> None:
        self.record(f"refunded {ctx.result}")

    @compensable(by="cancel_courier")
    def book_courier(self, address: str) -> str:
        print("booking the courier", flush=True)  # the parent kills us after this line
        time.sleep(60)
        return "never returned"

    @compensation
    def cancel_courier(self, ctx: CompensationContext) -> None:
        self.record(f"cancelled courier {ctx.result}")


def worker(database: str, ledger: str) -> None:
    """The agent's process: it dies inside `book_courier`, between INTENT and EXECUTED."""
    # A short lease, so that the operator can take the saga over a second after the crash.
    sagacity = Sagacity.from_url(f"sqlite:///{database}", lease_ttl=1.0)
    tools = {tool.name: tool for tool in sagacity.wrap(Shop(Path(ledger)))}

    def agent() -> None:
        tools["reserve_inventory"]("SKU-42", 2)
        tools["charge_card"]("19.99")
        tools["book_courier"]("1 Main St")

    sagacity.saga("order-7", agent)


def kill_the_worker(database: Path, ledger: Path) -> None:
    with subprocess.Popen(
        [sys.executable, __file__, "worker", str(database), str(ledger)],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        print(f"worker: {child.stdout.readline().strip()}")
        os.kill(child.pid, signal.SIGKILL)
        print(f"worker: killed (exit status {child.wait()})")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        database, ledger = Path(folder, "sagacity.db"), Path(folder, "ledger.txt")
        kill_the_worker(database, ledger)

        # The operator's process. The tools must be wrapped here too: compensations run here.
        # lease_wait: wait up to 15 s for the dead worker's lease to run out.
        sagacity = Sagacity.from_url(f"sqlite:///{database}", lease_wait=15)
        sagacity.wrap(Shop(ledger))
        print("journal verifies:", verify(sagacity.journal).ok)
        for entry in sagacity.history("order-7"):
            print(f"  {entry.seq} {entry.phase.name:<9} {entry.call_id}")

        result = sagacity.compensate("order-7")
        assert result.compensation is not None
        print(f"compensate: {result.outcome.name}")
        print("  undone:", [ref.call_id for ref in result.compensation.compensated])
        print("  in doubt:", [ref.call_id for ref in result.compensation.in_doubt])

        # The operator asks the courier: the booking went through, as "crr-551".
        sagacity.resolve("order-7", "book_courier#1", executed=True, result="crr-551", by="ops")
        again = sagacity.compensate("order-7")
        print(f"after resolving: {again.outcome.name}")
        print("ledger:")
        for line in ledger.read_text(encoding="utf-8").splitlines():
            print(f"  {line}")
        print("journal verifies:", verify(sagacity.journal).ok)
        sagacity.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(*sys.argv[2:])
    else:
        main()
