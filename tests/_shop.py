"""Sample tools for the saga core's tests: an order shop whose calls and undos are logged."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from sagacity import (
    CompensationContext,
    JournalEntry,
    Phase,
    Reversibility,
    Sagacity,
    SagaTool,
    compensable,
    compensation,
)
from sagacity.testing import FailOn


class Shop:
    """Reserve stock, charge a card, ship, wire money; every call and undo is logged."""

    def __init__(
        self,
        *,
        ship_fails: bool = False,
        wire_fails: bool = False,
        refund_fails: FailOn | None = None,
    ) -> None:
        self.log: list[str] = []
        self.calls: collections.Counter[str] = collections.Counter()
        self.contexts: list[CompensationContext] = []
        self.ship_fails = ship_fails
        self.wire_fails = wire_fails
        self.refund_fails = refund_fails or FailOn()

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        """Reserve stock for an order."""
        self.calls["reserve_inventory"] += 1
        self.log.append(f"reserve {sku}")
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.contexts.append(ctx)
        self.log.append(f"release {ctx.result}")

    @compensable(by="refund")
    def charge_card(self, amount: str, card: str) -> str:
        """Charge the customer's card."""
        self.calls["charge_card"] += 1
        self.log.append(f"charge {amount}")
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.refund_fails()
        self.contexts.append(ctx)
        self.log.append(f"refund {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship(self, order_id: str) -> str:
        """Hand the parcel to the courier."""
        self.calls["ship"] += 1
        if self.ship_fails:
            raise RuntimeError("courier down")
        self.log.append(f"ship {order_id}")
        return f"sh-{order_id}"

    @compensation
    def cancel_shipment(self) -> None:
        self.log.append("cancel shipment")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Wire money to another bank.

        Once sent it cannot be recalled.
        """
        self.calls["send_wire_transfer"] += 1
        if self.wire_fails:
            raise RuntimeError("bank offline")
        self.log.append(f"wire {amount} to {to}")
        return f"wire-{amount}-{to}"


def tools_of(sagacity: Sagacity, *sources: object) -> dict[str, SagaTool]:
    """Wrap `sources` and index the tools by name."""
    return {tool.name: tool for tool in sagacity.wrap(*sources)}


def phases(entries: list[JournalEntry]) -> list[tuple[str, str | None, int | None]]:
    """(phase, tool_name, ref_seq) of each entry: what tests compare the journal to."""
    return [(entry.phase.value, entry.tool_name, entry.ref_seq) for entry in entries]


def order_then_wire(tools: dict[str, SagaTool], **wire: Any) -> Callable[[], Any]:
    """Work that reserves stock, then wires money (which waits for approval)."""

    def work() -> Any:
        tools["reserve_inventory"]("SKU-1", 2)
        return tools["send_wire_transfer"](**(wire or {"amount": "900.00", "to": "ACME"}))

    return work


def journal_intent(
    sagacity: Sagacity,
    saga_id: str,
    call_id: str,
    *,
    tool_name: str = "reserve_inventory",
    tool_input: dict[str, Any] | None = None,
) -> JournalEntry:
    """Append an INTENT as a run that stopped during the call would have left it."""
    return sagacity.journal.append(
        saga_id,
        Phase.INTENT,
        tool_name=tool_name,
        call_id=call_id,
        payload={
            "input": {"sku": "SKU-1", "qty": 1} if tool_input is None else tool_input,
            "reversibility": "COMPENSATABLE",
        },
    )


def journal_failure(sagacity: Sagacity, intent: JournalEntry) -> JournalEntry:
    """Append the FAILED (kind failure) that answers `intent`."""
    return sagacity.journal.append(
        intent.saga_id,
        Phase.FAILED,
        tool_name=intent.tool_name,
        call_id=intent.call_id,
        ref_seq=intent.seq,
        payload={"kind": "failure", "error": {"type": "RuntimeError", "message": "x"}},
    )
