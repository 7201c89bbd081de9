"""What the process tests run in child processes: `python -m tests.processes._child …`.

crash DB LEDGER          run saga `order-1`: reserve, charge, then ship, which prints
`inside ship` and waits to be killed
append DB SAGA N WORKER  append N entries to SAGA, tagged with WORKER
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sagacity import CompensationContext, Phase, Sagacity, compensable, compensation
from sagacity.journal import SqliteJournal


class Warehouse:
    """Tools whose effects and undos are lines in a ledger file, shared by the processes."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    def record(self, line: str) -> None:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        self.record(f"reserve {sku} {qty}")
        return f"res-{sku}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.record(f"release {ctx.result}")

    @compensable(by="refund_card")
    def charge_card(self, amount: str) -> str:
        self.record(f"charge {amount}")
        return "ch-1"

    @compensation
    def refund_card(self, ctx: CompensationContext) -> None:
        self.record(f"refund {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship(self, to: str) -> str:
        print("inside ship", flush=True)
        time.sleep(120)  # killed here, between INTENT and EXECUTED
        return "shp-never"

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.record(f"cancel {ctx.result}")


def crash(database: str, ledger: str) -> None:
    # A short lease, so that the process reopening the journal takes the saga over soon.
    sagacity = Sagacity.from_url(f"sqlite:///{database}", lease_ttl=1.0)
    tools = {tool.name: tool for tool in sagacity.wrap(Warehouse(Path(ledger)))}

    def work() -> None:
        tools["reserve_inventory"]("SKU-42", 2)
        tools["charge_card"]("19.99")
        tools["ship"]("Berlin")

    sagacity.saga("order-1", work)
    raise SystemExit("the saga was meant to be killed inside ship")


def append(database: str, saga_id: str, count: int, worker: int) -> None:
    journal = SqliteJournal(database)
    for n in range(count):
        journal.append(saga_id, Phase.INTENT, tool_name="t", payload={"worker": worker, "n": n})
    journal.close()


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "crash":
        crash(*arguments)
    elif command == "append":
        append(arguments[0], arguments[1], int(arguments[2]), int(arguments[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")
