"""Sample tools and a scripted PydanticAI model for the adapter's end-to-end tests."""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RunContext,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import AbstractToolset

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    compensable,
    compensation,
    current_call,
)

Turn = str | Sequence[ToolCallPart]
"""One scripted model turn: a final text, or the tool calls of one response."""


class ScriptedModel:
    """A `FunctionModel` that plays turns in order and records what it was sent."""

    def __init__(self, *turns: Turn) -> None:
        self.turns = list(turns)
        self.requests: list[ModelRequest] = []
        """The last request of each model call: what the model was told."""
        self.tool_definitions: list[list[Any]] = []
        """The function tools of each model call, as sent to the model."""
        self.model = FunctionModel(self._respond)

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        self.requests.append(last)
        self.tool_definitions.append(list(info.function_tools))
        if not self.turns:
            raise AssertionError("the scripted model was called more often than scripted")
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(parts=list(turn))

    def tool_returns(self) -> list[tuple[str, str, Any]]:
        """(call id, outcome, content) of every tool result the model was given."""
        return [
            (part.tool_call_id, part.outcome, part.content)
            for request in self.requests
            for part in request.parts
            if isinstance(part, ToolReturnPart)
        ]


def call(tool: str, call_id: str, **args: Any) -> ToolCallPart:
    """A tool call part as a model would send it."""
    return ToolCallPart(tool, args, tool_call_id=call_id)


def agent_with(
    model: ScriptedModel,
    *toolsets: AbstractToolset[Any],
    capabilities: Sequence[Any] = (),
    deferred: bool = False,
) -> Agent[None, Any]:
    """An agent on the scripted model; `deferred` lets runs end with DeferredToolRequests."""
    output_type: Any = [str, DeferredToolRequests] if deferred else str
    return Agent(
        model.model,
        toolsets=list(toolsets),
        capabilities=list(capabilities),
        output_type=output_type,
    )


def journal_of(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None, str | None]]:
    """(phase, tool, call id) of every entry of the saga."""
    return [(e.phase.name, e.tool_name, e.call_id) for e in sagacity.history(saga_id)]


class OrderTools:
    """Reserve stock (sync), charge a card (async), ship (takes RunContext), wire money.

    `ship_error` is what `ship_order` raises; every call and undo is logged.
    """

    def __init__(self, *, ship_error: BaseException | None = None) -> None:
        self.ship_error = ship_error or ToolFailed("the carrier is not answering")
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.undone: list[tuple[str, Any]] = []
        self.seen: list[Any] = []
        """What `current_call()` returned inside each tool."""
        self.threads: list[int] = []
        """The thread each tool ran in."""

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        """Reserve stock for an order.

        Args:
            sku: The stock-keeping unit.
            qty: How many to reserve.
        """
        self.seen.append(current_call())
        self.threads.append(threading.get_ident())
        self.calls.append(("reserve_inventory", {"sku": sku, "qty": qty}))
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.undone.append(("release_inventory", ctx.result))

    @compensable(by="refund_card")
    async def charge_card(self, amount_cents: int) -> str:
        """Charge the customer's card."""
        self.seen.append(current_call())
        self.threads.append(threading.get_ident())
        self.calls.append(("charge_card", {"amount_cents": amount_cents}))
        return f"ch-{amount_cents}"

    @compensation
    async def refund_card(self, ctx: CompensationContext) -> None:
        self.undone.append(("refund_card", ctx.result))

    @compensable(by="cancel_shipment")
    def ship_order(self, ctx: RunContext[None], address: str) -> str:
        """Ship the order to an address."""
        self.seen.append(current_call())
        self.calls.append(("ship_order", {"address": address}))
        raise self.ship_error

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.undone.append(("cancel_shipment", ctx.result))

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, amount: str, to: str) -> str:
        """Send a wire transfer: money that cannot be called back."""
        self.seen.append(current_call())
        self.calls.append(("send_wire", {"amount": amount, "to": to}))
        return f"wire-{amount}-{to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def delete_account(self, ctx: RunContext[None], account: str) -> str:
        """Delete a customer account for good."""
        self.seen.append(current_call())
        self.calls.append(("delete_account", {"account": account}))
        return f"deleted-{account}"


def counts(tools: OrderTools) -> collections.Counter[str]:
    """How often each tool ran."""
    return collections.Counter(name for name, _ in tools.calls)
