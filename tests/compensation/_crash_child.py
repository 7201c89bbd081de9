"""What the crash tests of compensations run in a child process.

`python -m tests.compensation._crash_child URL LEDGER` runs saga `order-1`: reserve, charge,
then a shipment that fails. The walk starts with the refund, which prints
`inside refund` (its COMPENSATING is committed by then) and waits to be killed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sagacity import CompensationContext, Sagacity, compensable, compensation


class Depot:
    """Tools whose effects and undos are lines in a ledger file, shared by the processes.

    `refund_card` is not declared idempotent: a walk that finds it in doubt leaves it so.
    """

    def __init__(self, ledger: Path, *, hang: bool = False) -> None:
        self.ledger = ledger
        self.hang = hang

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
        self.record(f"refund start {ctx.result} key={ctx.call_id}")
        if self.hang:
            print("inside refund", flush=True)
            time.sleep(120)  # killed here, between COMPENSATING and its outcome
        self.record(f"refund done {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship(self, to: str) -> str:
        raise RuntimeError("courier down")

    @compensation
    def cancel_shipment(self) -> None:
        self.record("cancel shipment")


class IdempotentDepot(Depot):
    """The same tools, with the refund declared safe to run again under its call id."""

    @compensable(by="refund_card", compensation_idempotent=True)
    def charge_card(self, amount: str) -> str:
        return super().charge_card(amount)


def crash(url: str, ledger: str) -> None:
    # A short lease: the process that walks after the kill waits for it to expire.
    sagacity = Sagacity.from_url(url, lease_ttl=1.0)
    tools = {tool.name: tool for tool in sagacity.wrap(Depot(Path(ledger), hang=True))}

    def work() -> None:
        tools["reserve_inventory"]("SKU-42", 2)
        tools["charge_card"]("19.99")
        tools["ship"]("Berlin")

    sagacity.saga("order-1", work)
    raise SystemExit("the saga was meant to be killed inside refund_card")


if __name__ == "__main__":
    crash(*sys.argv[1:])
