"""Scenario 2: an IRREVERSIBLE tool pauses the graph with `interrupt()` until sagacity approves."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from sagacity import (
    ApprovalHashMismatchError,
    ApprovalMissingError,
    Sagacity,
    SagaOutcome,
    SagaResult,
)
from sagacity.audit import verify
from sagacity.integrations.langchain import APPROVAL_INTERRUPT, langchain_tools
from tests._threads import noting_this_thread
from tests.integrations.langchain._agents import (
    AsyncOrderTools,
    OrderTools,
    RuntimeTools,
    calls,
    prebuilt_agent,
    scripted,
    tool_call,
    tool_messages,
    tool_node_graph,
)

WIRE_INPUT = {"amount": "250.00", "to": "ACME"}
WIRE_SHA256 = hashlib.sha256(rfc8785.dumps(WIRE_INPUT)).hexdigest()
REQUEST = {"messages": [HumanMessage("Pay ACME 250.00 by wire.")]}


def journal_of(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None, str | None]]:
    return [(e.phase.name, e.tool_name, e.call_id) for e in sagacity.history(saga_id)]


def phases_by_call(sagacity: Sagacity, saga_id: str) -> dict[str | None, list[str]]:
    found: dict[str | None, list[str]] = {}
    for entry in sagacity.history(saga_id):
        found.setdefault(entry.call_id, []).append(entry.phase.name)
    return found


class Agent:
    """One agent run against a saga: started, then resumed natively, sync or async."""

    def __init__(self, sagacity: Sagacity, graph: Any, *, is_async: bool) -> None:
        self.sagacity = sagacity
        self.graph = graph
        self.is_async = is_async
        self.config: Any = {"configurable": {"thread_id": "thread-1"}}

    async def start(self, saga_id: str) -> SagaResult:
        if self.is_async:
            return await self.sagacity.asaga(
                saga_id, lambda: self.graph.ainvoke(REQUEST, self.config)
            )
        return self.sagacity.saga(saga_id, lambda: self.graph.invoke(REQUEST, self.config))

    async def resume(self, saga_id: str, value: Any) -> SagaResult:
        """Resume the graph with LangGraph's own `Command(resume=value)` inside the saga."""
        command = Command(resume=value)
        if self.is_async:
            return await self.sagacity.aresume_saga(
                saga_id, lambda: self.graph.ainvoke(command, self.config)
            )
        return self.sagacity.resume_saga(saga_id, lambda: self.graph.invoke(command, self.config))

    def interrupts(self) -> list[Any]:
        return [i.value for i in self.graph.get_state(self.config).interrupts]


def make_agent(
    sagacity: Sagacity, flavour: tuple[str, bool], *turns: AIMessage | str
) -> tuple[Agent, OrderTools | AsyncOrderTools]:
    graph_kind, is_async = flavour
    shop = AsyncOrderTools() if is_async else OrderTools()
    tools = langchain_tools(sagacity, shop)
    build = tool_node_graph if graph_kind == "tool_node" else prebuilt_agent
    graph = build(scripted(*turns), tools, checkpointer=InMemorySaver())
    return Agent(sagacity, graph, is_async=is_async), shop


WIRE_TURN = calls(tool_call("send_wire_transfer", "call-9", **WIRE_INPUT))


class TestApprovalPause:
    async def test_the_run_pauses_with_an_interrupt_carrying_the_request(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """The graph pauses before the tool runs; the interrupt names tool, input, hash, request."""
        sagacity, _ = stores
        agent, shop = make_agent(sagacity, flavour, WIRE_TURN, "Sent.")

        result = await agent.start("wire-1")

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        (request,) = result.pending
        assert agent.interrupts() == [
            {
                "kind": APPROVAL_INTERRUPT,
                "request_id": request.request_id,
                "saga_id": "wire-1",
                "seq": 1,
                "call_id": "call-9",
                "tool_name": "send_wire_transfer",
                "input": WIRE_INPUT,
                "input_sha256": WIRE_SHA256,
                "reason": request.reason,
                "requested_at": request.requested_at.isoformat(),
                "expires_at": None,
                "started_by": None,
                "approvers_required": 1,
                "edited_by": None,
                "state": "waiting",
                "approvals": [],
                "problem": None,
                "refused": None,
            }
        ]
        assert agent.interrupts()[0] == {
            "kind": APPROVAL_INTERRUPT,
            **request.to_json(),
            "refused": None,
        }
        assert [i.id for i in result.value["__interrupt__"]] == [
            i.id for i in agent.graph.get_state(agent.config).interrupts
        ]
        assert request.input_sha256 == WIRE_SHA256
        assert shop.ran == []
        assert journal_of(sagacity, "wire-1") == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-9")
        ]

    async def test_approved_resume_runs_the_tool_once_with_the_approved_input(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """Approved through Sagacity.approve, the native resume runs the call exactly once."""
        sagacity, approver = stores
        agent, shop = make_agent(sagacity, flavour, WIRE_TURN, "Sent.")
        await agent.start("wire-1")
        (request,) = approver.pending("wire-1")

        approver.approve("wire-1", approver="alice", expected_sha256=WIRE_SHA256)
        result = await agent.resume("wire-1", {"approved": True})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        assert tool_messages(result.value) == [("call-9", "success", "wire-250.00-ACME")]
        assert result.value["messages"][-1].content == "Sent."
        assert journal_of(sagacity, "wire-1") == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-9"),
            ("APPROVED", "send_wire_transfer", "call-9"),
            ("INTENT", "send_wire_transfer", "call-9"),
            ("EXECUTED", "send_wire_transfer", "call-9"),
            ("ENDED", None, None),
        ]
        intent = sagacity.history("wire-1")[2]
        assert intent.payload == {
            "input": WIRE_INPUT,
            "reversibility": "IRREVERSIBLE",
            "request_id": request.request_id,
        }
        assert verify(sagacity.journal, "wire-1").ok

    async def test_a_framework_approval_without_a_sagacity_approval_is_refused(
        self,
        stores: tuple[Sagacity, Sagacity],
        flavour: tuple[str, bool],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Command(resume=approved) alone runs nothing; the graph pauses again, still approvable.

        An async tool reads the stored request it pauses on from a worker thread.
        """
        sagacity, approver = stores
        agent, shop = make_agent(sagacity, flavour, WIRE_TURN, "Sent.")
        await agent.start("wire-1")
        read_on_the_loop: list[bool] = []
        monkeypatch.setattr(
            sagacity, "pending", noting_this_thread(sagacity.pending, read_on_the_loop)
        )

        with pytest.raises(ApprovalMissingError, match="no approval is journaled"):
            await agent.resume("wire-1", {"approved": True})

        if flavour[1]:  # async tools
            assert read_on_the_loop == [False]
        assert shop.ran == []
        assert journal_of(sagacity, "wire-1") == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-9")
        ]
        (paused,) = agent.interrupts()
        assert paused["refused"].startswith("ApprovalMissingError: ")
        assert paused["input_sha256"] == WIRE_SHA256

        approver.approve("wire-1", approver="alice")
        result = await agent.resume("wire-1", {"approved": True})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]

    async def test_a_changed_input_is_refused(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """The paused call's arguments edited in the graph state no longer match: refused."""
        sagacity, approver = stores
        agent, shop = make_agent(sagacity, flavour, WIRE_TURN, "Sent.")
        first = await agent.start("wire-1")
        approver.approve("wire-1", approver="alice", expected_sha256=WIRE_SHA256)
        (asked,) = [m for m in first.value["messages"] if isinstance(m, AIMessage) and m.tool_calls]
        edited = AIMessage(
            content="",
            id=asked.id,
            tool_calls=[tool_call("send_wire_transfer", "call-9", amount="9999.00", to="MALLORY")],
        )
        agent.graph.update_state(agent.config, {"messages": [edited]})

        with pytest.raises(ApprovalHashMismatchError, match="the input now hashes to"):
            await agent.resume("wire-1", {"approved": True})

        assert shop.ran == []
        assert [phase for phase, _, _ in journal_of(sagacity, "wire-1")] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "REFUSED",
        ]
        rejected = approver.reject("wire-1", approver="alice", reason="the input was changed")
        assert rejected.outcome is SagaOutcome.COMPENSATED
        assert shop.ran == []


class TestReplayOnResume:
    async def test_a_call_that_ran_before_the_pause_is_not_run_again(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """Resuming re-runs the tools node; the call that EXECUTED returns its journaled result."""
        sagacity, approver = stores
        both = calls(
            tool_call("reserve_inventory", "call-1", sku="SKU-1", qty=2),
            tool_call("send_wire_transfer", "call-9", **WIRE_INPUT),
        )
        agent, shop = make_agent(sagacity, flavour, both, "Reserved and paid.")
        await agent.start("order-1")
        assert shop.ran == [("reserve_inventory", ("SKU-1", 2))]

        approver.approve("order-1", approver="alice")
        result = await agent.resume("order-1", True)

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [
            ("reserve_inventory", ("SKU-1", 2)),
            ("send_wire_transfer", ("250.00", "ACME")),
        ]
        assert sorted(tool_messages(result.value)) == [
            ("call-1", "success", "res-SKU-1-2"),
            ("call-9", "success", "wire-250.00-ACME"),
        ]
        # The two calls ran side by side: their entries may interleave, each in order.
        assert phases_by_call(sagacity, "order-1") == {
            "call-1": ["INTENT", "EXECUTED"],
            "call-9": ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"],
            None: ["ENDED"],
        }


class TestInjectedArguments:
    def test_the_runtime_is_not_part_of_the_approved_input(self, tmp_path: Path) -> None:
        """A tool taking `runtime: ToolRuntime` is approved for its model arguments alone."""
        sagacity = Sagacity.from_url(f"sqlite:///{tmp_path / 'runtime.db'}")
        tools = RuntimeTools()
        model = scripted(
            calls(tool_call("pay_invoice", "call-5", amount="10.00", to="ACME")), "Paid."
        )
        agent = prebuilt_agent(
            model, langchain_tools(sagacity, tools), checkpointer=InMemorySaver()
        )
        config: Any = {"configurable": {"thread_id": "t"}}

        paused = sagacity.saga("pay-1", lambda: agent.invoke(REQUEST, config))
        (request,) = paused.pending
        sagacity.approve("pay-1", approver="alice")
        result = sagacity.resume_saga("pay-1", lambda: agent.invoke(Command(resume=True), config))
        sagacity.close()

        assert request.input == {"amount": "10.00", "to": "ACME"}
        assert result.outcome is SagaOutcome.COMPLETED
        assert tools.ran == [("pay_invoice", ("10.00", "ACME", "call-5"))]


class TestWithoutCheckpointer:
    def test_the_model_is_told_and_resume_runs_the_stored_input(self) -> None:
        """Without a checkpointer nothing can pause: the model gets the [AWAITING_APPROVAL] text.

        The saga waits all the same, and `resume_saga` without work runs the approved
        input once.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        agent = prebuilt_agent(scripted(WIRE_TURN, "Waiting."), langchain_tools(sagacity, shop))

        paused = sagacity.saga("wire-1", lambda: agent.invoke(REQUEST))

        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        ((call_id, status, content),) = tool_messages(paused.value)
        assert (call_id, status) == ("call-9", "success")
        assert content.startswith("[AWAITING_APPROVAL] send_wire_transfer was not run")
        assert shop.ran == []

        sagacity.approve("wire-1", approver="alice")
        resumed = sagacity.resume_saga("wire-1")

        assert resumed.outcome is SagaOutcome.COMPLETED
        assert resumed.value == "wire-250.00-ACME"
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
