"""Tools, scripted models and journal views shared by the OpenAI Agents SDK tests."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from agents import Agent, Tool
from agents.items import TResponseOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity import (
    CompensationContext,
    CurrentCall,
    JournalEntry,
    Reversibility,
    compensable,
    compensation,
    current_call,
)


class Orders:
    """An order desk with sync and async tools; every call and undo is logged."""

    def __init__(self, *, ship_fails: bool = False, courier_delay: float = 0.0) -> None:
        self.courier_booking = threading.Event()
        """Set once `book_courier` has started: a failing `ship` waits for it."""
        self.log: list[str] = []
        self.calls: collections.Counter[str] = collections.Counter()
        self.seen: dict[str, CurrentCall | None] = {}
        self.errors: list[BaseException] = []
        self.ship_fails = ship_fails
        self.courier_delay = courier_delay

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        """Reserve stock for an order.

        Args:
            sku: The stock-keeping unit.
            qty: How many to reserve.
        """
        self._called("reserve_inventory", sku)
        self.log.append(f"reserve {sku} x{qty}")
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(by="refund")
    async def charge_card(self, amount: str, card: str) -> str:
        """Charge the customer's card."""
        await asyncio.sleep(0)
        self._called("charge_card", amount)
        self.log.append(f"charge {amount}")
        return f"ch-{amount}"

    @compensation
    async def refund(self, ctx: CompensationContext) -> None:
        await asyncio.sleep(0)
        self.log.append(f"refund {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship(self, order_id: str) -> str:
        """Hand the parcel to the courier."""
        self._called("ship", order_id)
        if self.ship_fails:
            if self.courier_delay:
                self.courier_booking.wait(timeout=10)  # fail while the booking is in flight
            error = RuntimeError("courier down")
            self.errors.append(error)
            raise error
        self.log.append(f"ship {order_id}")
        return f"sh-{order_id}"

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.log.append(f"cancel {ctx.result}")

    @compensable(by="cancel_courier")
    async def book_courier(self, slot: str) -> str:
        """Book a courier for a pick-up slot."""
        self._called("book_courier", slot)
        self.courier_booking.set()
        try:
            await asyncio.sleep(self.courier_delay)
        except asyncio.CancelledError:
            self.log.append(f"courier {slot} cancelled")
            raise
        self.log.append(f"courier {slot}")
        return f"courier-{slot}"

    @compensation
    def cancel_courier(self, ctx: CompensationContext) -> None:
        self.log.append(f"cancel {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: Decimal, to: str) -> str:
        """Wire money to another bank.

        Args:
            amount: How much, in euros.
            to: The beneficiary.
        """
        self._called("send_wire_transfer", f"{amount}")
        self.log.append(f"wire {amount} to {to}")
        return f"wire-{amount}-{to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def delete_account(self, account: str) -> str:
        """Close a customer's account for good."""
        await asyncio.sleep(0)
        self._called("delete_account", account)
        self.log.append(f"delete {account}")
        return f"deleted-{account}"

    def _called(self, tool: str, key: str) -> None:
        self.calls[tool] += 1
        self.seen[f"{tool} {key}"] = current_call()


def call(name: str, call_id: str, **arguments: Any) -> TResponseOutputItem:
    """One function call the scripted model makes."""
    return function_call(name, arguments, call_id=call_id)


def scripted(*turns: list[TResponseOutputItem], final: str = "done") -> ScriptedModel:
    """A model that makes these tool calls, one list per turn, then answers `final`."""
    return ScriptedModel([*turns, [assistant_message(final)]])


def agent_with(model: ScriptedModel, tools: Sequence[Tool]) -> Agent[Any]:
    """An agent that runs `tools` for `model`."""
    return Agent(name="orders", instructions="Handle the order.", model=model, tools=list(tools))


def phases(entries: list[JournalEntry]) -> list[tuple[str, str | None, str | None]]:
    """(phase, tool name, call id) of each entry: what the tests compare journals to."""
    return [(entry.phase.value, entry.tool_name, entry.call_id) for entry in entries]


def tool_outputs(model: ScriptedModel) -> dict[str, Any]:
    """Every tool output in the input of the model's last turn, by call id."""
    last = model.calls[-1].input
    assert isinstance(last, list)
    return {
        item["call_id"]: item["output"]
        for item in last
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
