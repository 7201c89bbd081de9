"""The agents the LangChain tests run: scripted models, order tools, LangGraph graphs."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import rfc8785
from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain.tools import ToolRuntime
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Interrupt

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    SagaResult,
    compensable,
    compensation,
)
from sagacity.testing import FailOn


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering with the scripted messages in order.

    `create_agent` binds the tools to the model; the script ignores them.
    """

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self


def scripted(*turns: AIMessage | str) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(turns))


def tool_call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def calls(*tool_calls: dict[str, Any]) -> AIMessage:
    """One model turn asking for these tool calls (in parallel when more than one)."""
    return AIMessage(content="", tool_calls=list(tool_calls))


class OrderTools:
    """Sync tools with side effects, recording what ran and what was undone."""

    def __init__(
        self, *, ship_error: Exception | None = None, reserve_fails: FailOn | None = None
    ) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.undone: list[tuple[str, Any]] = []
        self.ship_error = ship_error or RuntimeError("carrier rejected the address")
        self.reserve_fails = reserve_fails or FailOn()

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock of an item for the order."""
        self.reserve_fails()
        self.ran.append(("reserve_inventory", (sku, qty)))
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.undone.append(("release_inventory", ctx.result))

    @compensable(by="refund_card")
    def charge_card(self, amount_cents: int) -> str:
        """Charge the customer's card."""
        self.ran.append(("charge_card", amount_cents))
        return f"ch-{amount_cents}"

    @compensation
    def refund_card(self, ctx: CompensationContext) -> None:
        self.undone.append(("refund_card", ctx.result))

    @compensable(by="cancel_shipment")
    def ship_order(self, address: str) -> str:
        """Book the shipment with the carrier."""
        self.ran.append(("ship_order", address))
        raise self.ship_error

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.undone.append(("cancel_shipment", ctx.result))

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire transfer; it cannot be recalled."""
        self.ran.append(("send_wire_transfer", (amount, to)))
        return f"wire-{amount}-{to}"


class AsyncOrderTools:
    """The same tools, async."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.undone: list[tuple[str, Any]] = []

    @compensable(by="release_inventory")
    async def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock of an item for the order."""
        await asyncio.sleep(0)
        self.ran.append(("reserve_inventory", (sku, qty)))
        return f"res-{sku}-{qty}"

    @compensation
    async def release_inventory(self, ctx: CompensationContext) -> None:
        self.undone.append(("release_inventory", ctx.result))

    @compensable(by="refund_card")
    async def charge_card(self, amount_cents: int) -> str:
        """Charge the customer's card."""
        await asyncio.sleep(0)
        self.ran.append(("charge_card", amount_cents))
        return f"ch-{amount_cents}"

    @compensation
    async def refund_card(self, ctx: CompensationContext) -> None:
        self.undone.append(("refund_card", ctx.result))

    @compensable(by="cancel_shipment")
    async def ship_order(self, address: str) -> str:
        """Book the shipment with the carrier."""
        await asyncio.sleep(0)
        self.ran.append(("ship_order", address))
        raise RuntimeError("carrier rejected the address")

    @compensation
    async def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.undone.append(("cancel_shipment", ctx.result))

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire transfer; it cannot be recalled."""
        await asyncio.sleep(0)
        self.ran.append(("send_wire_transfer", (amount, to)))
        return f"wire-{amount}-{to}"


class RuntimeTools:
    """A tool that LangGraph hands its runtime; only `amount` and `to` are the model's."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay_invoice(self, amount: str, to: str, runtime: ToolRuntime) -> str:
        """Pay an invoice."""
        self.ran.append(("pay_invoice", (amount, to, runtime.tool_call_id)))
        return f"paid-{amount}-{to}"


def tool_node_graph(
    model: ScriptedChatModel,
    tools: Sequence[BaseTool],
    *,
    handle_tool_errors: Any = True,
    checkpointer: InMemorySaver | None = None,
) -> Any:
    """A hand-built agent: a model node and a `ToolNode`, looping until no tool call."""

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=handle_tool_errors))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def prebuilt_agent(
    model: ScriptedChatModel,
    tools: Sequence[BaseTool],
    *,
    swallow: bool = True,
    checkpointer: InMemorySaver | None = None,
) -> Any:
    """LangChain's `create_agent`; `swallow` adds middleware that turns errors into messages."""
    middleware = [ToolErrorMiddleware(on_error=lambda error, request: f"failed: {error}")]
    return create_agent(
        model, tools, middleware=middleware if swallow else (), checkpointer=checkpointer
    )


def tool_messages(state: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(tool_call_id, status, content) of every ToolMessage in a graph's final state."""
    return [
        (m.tool_call_id, m.status, str(m.content))
        for m in state["messages"]
        if isinstance(m, ToolMessage)
    ]


class GraphRun:
    """One graph run against a saga: started, then resumed natively, sync or async.

    `max_concurrency` is LangGraph's own config key: with 1, the calls of a hand-built
    sync `ToolNode` and the tasks of a sync `create_agent` run one after the other.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        graph: Any,
        *,
        is_async: bool,
        thread_id: str = "thread-1",
        max_concurrency: int | None = None,
    ) -> None:
        self.sagacity = sagacity
        self.graph = graph
        self.is_async = is_async
        self.config: Any = {"configurable": {"thread_id": thread_id}}
        if max_concurrency is not None:
            self.config["max_concurrency"] = max_concurrency

    async def start(self, saga_id: str, request: Any) -> SagaResult:
        """Run the graph on `request` as saga `saga_id`."""
        if self.is_async:
            return await self.sagacity.asaga(
                saga_id, lambda: self.graph.ainvoke(request, self.config)
            )
        return self.sagacity.saga(saga_id, lambda: self.graph.invoke(request, self.config))

    async def run_in(self, saga_id: str, request: Any) -> SagaResult:
        """Run the graph on `request` inside the open saga `saga_id` (its native resume)."""
        if self.is_async:
            return await self.sagacity.aresume_saga(
                saga_id, lambda: self.graph.ainvoke(request, self.config)
            )
        return self.sagacity.resume_saga(saga_id, lambda: self.graph.invoke(request, self.config))

    async def resume(self, saga_id: str, value: Any) -> SagaResult:
        """Resume the graph with LangGraph's own `Command(resume=value)` inside the saga."""
        return await self.run_in(saga_id, Command(resume=value))

    def interrupts(self) -> list[Interrupt]:
        """The interrupts the graph waits on."""
        return list(self.graph.get_state(self.config).interrupts)

    def interrupt_of(self, call_id: str) -> Interrupt:
        """The interrupt a call waits on."""
        (found,) = [i for i in self.interrupts() if i.value["call_id"] == call_id]
        return found

    def state(self) -> dict[str, Any]:
        """The graph's current state."""
        values: dict[str, Any] = self.graph.get_state(self.config).values
        return values


def build_graph(
    graph_kind: str, model: ScriptedChatModel, tools: Sequence[BaseTool], **options: Any
) -> Any:
    """A hand-built `ToolNode` graph or a `create_agent` agent, with a checkpointer."""
    build = tool_node_graph if graph_kind == "tool_node" else prebuilt_agent
    return build(model, tools, checkpointer=InMemorySaver(), **options)


def journal_of(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None, str | None]]:
    """(phase, tool, call id) of every entry of the saga, in order."""
    return [(e.phase.name, e.tool_name, e.call_id) for e in sagacity.history(saga_id)]


def phases_by_call(sagacity: Sagacity, saga_id: str) -> dict[str | None, list[str]]:
    """The phases of each call id, in order (calls that ran side by side interleave)."""
    found: dict[str | None, list[str]] = {}
    for entry in sagacity.history(saga_id):
        found.setdefault(entry.call_id, []).append(entry.phase.name)
    return found


def input_sha256(value: dict[str, Any]) -> str:
    """`sha256(JCS(input))`, as the journal records it."""
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()
