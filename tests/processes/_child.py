"""What the process tests run in child processes: `python -m tests.processes._child …`.

crash URL LEDGER         run saga `order-1`: reserve, charge, then ship, which prints
`inside ship` and waits to be killed
crash-refund URL LEDGER  run saga `order-1`: reserve, charge, then a shipment that fails; the
walk starts with the refund, which prints `inside refund` (its COMPENSATING is committed by
then) and waits to be killed
append DB SAGA N WORKER  append N entries to SAGA, tagged with WORKER
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Literal

from sagacity import CompensationContext, Phase, Sagacity, compensable, compensation
from sagacity.journal import SqliteJournal


class Warehouse:
    """Tools whose effects and undos are lines in a ledger file, shared by the processes.

    `hang` names the tool that prints `inside <hang>` and waits to be killed; otherwise `ship`
    fails. `refund_card` is not declared idempotent: a walk that finds it in doubt leaves it so.
    """

    def __init__(self, ledger: Path, *, hang: Literal["ship", "refund"] | None = None) -> None:
        self.ledger = ledger
        self.hang = hang

    def record(self, line: str) -> None:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def wait_to_be_killed(self, point: str) -> None:
        if self.hang == point:
            print(f"inside {point}", flush=True)
            time.sleep(120)

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
        self.record(f"refund start {ctx.result} key={ctx.call_id}")
        self.wait_to_be_killed("refund")  # between COMPENSATING and its outcome
        self.record(f"refund done {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship(self, to: str) -> str:
        self.wait_to_be_killed("ship")  # between INTENT and EXECUTED
        raise RuntimeError("courier down")

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.record(f"cancel {ctx.result}")


class IdempotentWarehouse(Warehouse):
    """The same tools, with the refund declared safe to run again under its call id."""

    @compensable(by="refund_card", compensation_idempotent=True)
    def charge_card(self, amount: str) -> str:
        return super().charge_card(amount)


def crash(url: str, ledger: str, hang: Literal["ship", "refund"]) -> None:
    # A short lease: the process that takes the saga over after the kill waits for it to expire.
    sagacity = Sagacity.from_url(url, lease_ttl=1.0)
    tools = {tool.name: tool for tool in sagacity.wrap(Warehouse(Path(ledger), hang=hang))}

    def work() -> None:
        tools["reserve_inventory"]("SKU-42", 2)
        tools["charge_card"]("19.99")
        tools["ship"]("Berlin")

    sagacity.saga("order-1", work)
    raise SystemExit(f"the saga was meant to be killed inside {hang}")


def append(database: str, saga_id: str, count: int, worker: int) -> None:
    journal = SqliteJournal(database)
    for n in range(count):
        journal.append(saga_id, Phase.INTENT, tool_name="t", payload={"worker": worker, "n": n})
    journal.close()


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "crash":
        crash(arguments[0], arguments[1], "ship")
    elif command == "crash-refund":
        crash(arguments[0], arguments[1], "refund")
    elif command == "append":
        append(arguments[0], arguments[1], int(arguments[2]), int(arguments[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")
