"""Replayed results in a re-executed `ToolNode`: in the shape LangChain expects, or refused."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from sagacity import (
    CompensationContext,
    ReplayMismatchError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
)
from sagacity.integrations.langchain import langchain_tools
from tests.integrations.langchain._agents import calls, scripted, tool_call, tool_node_graph

REQUEST = {"messages": [HumanMessage("Quote SKU-1, then pay ACME.")]}
CONFIG: Any = {"configurable": {"thread_id": "thread-1"}}
WIRE = tool_call("send_wire_transfer", "call-9", amount="250.00", to="ACME")


class QuoteTools:
    """A sync tool with an artifact, and an IRREVERSIBLE wire transfer."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    @compensable(by="withdraw_quote")
    def quote(self, sku: str) -> tuple[str, dict[str, Any]]:
        """Quote a price for an item."""
        self.ran.append(f"quote {sku}")
        return f"SKU {sku} costs 19.99", {"sku": sku, "cents": 1999}

    @compensation
    def withdraw_quote(self, ctx: CompensationContext) -> None:
        self.ran.append(f"withdraw {ctx.input['sku']}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire transfer."""
        self.ran.append(f"wire {amount} {to}")
        return f"wire-{amount}-{to}"


class AsyncQuoteTools:
    """The same tools, async."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    @compensable(by="withdraw_quote")
    async def quote(self, sku: str) -> tuple[str, dict[str, Any]]:
        """Quote a price for an item."""
        await asyncio.sleep(0)
        self.ran.append(f"quote {sku}")
        return f"SKU {sku} costs 19.99", {"sku": sku, "cents": 1999}

    @compensation
    async def withdraw_quote(self, ctx: CompensationContext) -> None:
        self.ran.append(f"withdraw {ctx.input['sku']}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire transfer."""
        await asyncio.sleep(0)
        self.ran.append(f"wire {amount} {to}")
        return f"wire-{amount}-{to}"


class NoteTools:
    """Tools that update the graph state themselves, and the IRREVERSIBLE wire transfer."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    @compensable(by="erase_note")
    def note_by_command(
        self, text: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command[Any]:
        """Add a note to the conversation."""
        self.ran.append(f"note {text}")
        return Command(
            update={"messages": [ToolMessage(f"noted: {text}", tool_call_id=tool_call_id)]}
        )

    @compensable(by="erase_note")
    def note_by_message(
        self, text: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> ToolMessage:
        """Add a note to the conversation."""
        self.ran.append(f"note {text}")
        return ToolMessage(f"noted: {text}", tool_call_id=tool_call_id, artifact={"text": text})

    @compensation
    def erase_note(self) -> None:
        self.ran.append("erase")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire transfer."""
        self.ran.append(f"wire {amount} {to}")
        return f"wire-{amount}-{to}"


@compensable(by="forget_list")
def listed(sku: str) -> list[str]:
    """Return a list where a tuple is due."""
    return [sku, sku]


@compensation
def forget_list() -> None:
    pass


def tool_messages_by_id(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


class TestContentAndArtifact:
    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    async def test_a_replayed_call_gives_langchain_its_content_and_artifact(
        self, is_async: bool
    ) -> None:
        """The re-executed node replays the quote as `(content, artifact)`, not as an error.

        The quote ran next to the paused wire transfer in one `ToolNode`; resuming runs
        the node again, and the replayed result is the journaled JSON: the list becomes
        the tuple LangChain's `content_and_artifact` expects, and the tool runs once.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = AsyncQuoteTools() if is_async else QuoteTools()
        quote, wire = sorted(sagacity.wrap(shop), key=lambda tool: tool.name != "quote")
        tools = [
            *langchain_tools(sagacity, quote, response_format="content_and_artifact"),
            *langchain_tools(sagacity, wire),
        ]
        both = calls(tool_call("quote", "call-1", sku="SKU-1"), WIRE)
        graph = tool_node_graph(
            scripted(both, "Quoted and paid."), tools, checkpointer=InMemorySaver()
        )

        if is_async:
            paused = await sagacity.asaga("order-1", lambda: graph.ainvoke(REQUEST, CONFIG))
            sagacity.approve("order-1", approver="alice")
            result = await sagacity.aresume_saga(
                "order-1", lambda: graph.ainvoke(Command(resume=True), CONFIG)
            )
        else:
            paused = sagacity.saga("order-1", lambda: graph.invoke(REQUEST, CONFIG))
            sagacity.approve("order-1", approver="alice")
            result = sagacity.resume_saga(
                "order-1", lambda: graph.invoke(Command(resume=True), CONFIG)
            )

        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == ["quote SKU-1", "wire 250.00 ACME"]
        quoted = tool_messages_by_id(result.value)["call-1"]
        assert (quoted.status, quoted.content, quoted.artifact) == (
            "success",
            "SKU SKU-1 costs 19.99",
            {"sku": "SKU-1", "cents": 1999},
        )

    def test_waiting_without_a_checkpointer_gives_content_and_no_artifact(self) -> None:
        """Where nothing can pause, a `content_and_artifact` tool tells the model it waits.

        The `[AWAITING_APPROVAL]` text comes as `(text, None)`, so LangChain makes a
        successful ToolMessage of it rather than an error.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = QuoteTools()
        (wire,) = [t for t in sagacity.wrap(shop) if t.name == "send_wire_transfer"]
        (tool,) = langchain_tools(sagacity, wire, response_format="content_and_artifact")
        graph = tool_node_graph(scripted(calls(WIRE), "Waiting."), [tool])

        result = sagacity.saga("wire-1", lambda: graph.invoke(REQUEST))

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        waiting = tool_messages_by_id(result.value)["call-9"]
        assert waiting.status == "success"
        assert str(waiting.content).startswith("[AWAITING_APPROVAL] send_wire_transfer")
        assert waiting.artifact is None
        assert shop.ran == []

    def test_a_list_the_tool_itself_returns_is_not_made_a_tuple(self) -> None:
        """Only a replayed result is reshaped: a list the tool returns fails as unwrapped."""
        sagacity = Sagacity.from_url("memory://")
        (tool,) = langchain_tools(sagacity, listed, response_format="content_and_artifact")

        def work() -> None:
            with pytest.raises(ValueError, match="two-tuple"):
                tool.invoke(tool_call("listed", "call-1", sku="A"))

        sagacity.saga("list-1", work)


class TestStateUpdates:
    def test_a_command_that_ran_reaches_langgraph_as_returned(self) -> None:
        """A tool's own Command is handed to LangGraph unchanged: its update is applied."""
        sagacity = Sagacity.from_url("memory://")
        shop = NoteTools()
        model = scripted(calls(tool_call("note_by_command", "call-1", text="fragile")), "Noted.")
        graph = tool_node_graph(model, langchain_tools(sagacity, shop))

        result = sagacity.saga("note-1", lambda: graph.invoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPLETED
        note = tool_messages_by_id(result.value)["call-1"]
        assert (note.status, note.content) == ("success", "noted: fragile")

    @pytest.mark.parametrize(
        ("tool", "kind"),
        [("note_by_command", "Command"), ("note_by_message", "ToolMessage")],
    )
    def test_a_replayed_command_or_tool_message_is_refused(self, tool: str, kind: str) -> None:
        """A Command or ToolMessage result is not replayed as JSON: the replay is refused.

        Its JSON would reach the graph as message text and the state update would be
        lost. The re-executed node refuses the replay, the tool does not run again, and
        `resume_saga` raises ReplayMismatchError although `ToolNode` handed the refusal
        to the model; the saga stays open, and `compensate` undoes it.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = NoteTools()
        both = calls(tool_call(tool, "call-1", text="fragile"), WIRE)
        graph = tool_node_graph(
            scripted(both, "Noted and paid."),
            langchain_tools(sagacity, shop),
            checkpointer=InMemorySaver(),
        )
        paused = sagacity.saga("order-1", lambda: graph.invoke(REQUEST, CONFIG))
        sagacity.approve("order-1", approver="alice")

        with pytest.raises(ReplayMismatchError, match=f"returned a {kind}") as refused:
            sagacity.resume_saga("order-1", lambda: graph.invoke(Command(resume=True), CONFIG))

        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        assert "saga 'order-1': call 'call-1' of tool" in str(refused.value)
        assert shop.ran == ["note fragile", "wire 250.00 ACME"]
        note = tool_messages_by_id(graph.get_state(CONFIG).values)["call-1"]
        assert note.status == "error"
        assert "ReplayMismatchError" in str(note.content)
        assert "ENDED" not in [entry.phase.name for entry in sagacity.history("order-1")]
        undone = sagacity.compensate("order-1")
        assert undone.outcome is SagaOutcome.COMPENSATED
        assert shop.ran[-1] == "erase"
