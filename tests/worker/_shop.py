"""The tools the worker's tests pause and resume: hold funds (compensable), wire (IRREVERSIBLE)."""

from __future__ import annotations

import threading

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation


class Shop:
    """Hold funds, release them, wire money; every effect is logged in order."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.wired = threading.Event()

    @compensable(by="release")
    def hold(self, amount: int) -> str:
        """Hold funds."""
        self.log.append(f"hold {amount}")
        return f"hold-{amount}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: int, to: str) -> str:
        """Wire money."""
        self.log.append(f"wire {amount} to {to}")
        self.wired.set()
        return f"tx-{amount}"


def pause(sagacity: Sagacity, saga_id: str, amount: int = 100) -> None:
    """Run a saga that holds funds and then waits for approval of the wire.

    A `Shop` must be wrapped by `sagacity` already.
    """
    hold, wire = sagacity.tool("hold"), sagacity.tool("wire")

    def work() -> str:
        hold(amount=amount)
        return wire(amount=amount, to="acme")

    result = sagacity.saga(saga_id, work)
    assert result.outcome.value == "AWAITING_APPROVAL", result
