"""The graph's own decision: a "no" in `Command(resume=...)` is honoured, a "yes" never suffices.

And several calls waiting in one model turn: each runs once its own approval is
journaled, whatever its siblings wait on.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from sagacity import ApprovalMissingError, Sagacity, SagaOutcome
from sagacity.audit import verify
from sagacity.integrations.langchain import RESUME_SOURCE, langchain_tools
from tests.integrations.langchain._agents import (
    AsyncOrderTools,
    GraphRun,
    OrderTools,
    build_graph,
    calls,
    journal_of,
    phases_by_call,
    scripted,
    tool_call,
    tool_messages,
)

REQUEST = {"messages": [HumanMessage("Pay ACME 250.00 and BETA 75.00 by wire.")]}
WIRE_A = {"amount": "250.00", "to": "ACME"}
WIRE_B = {"amount": "75.00", "to": "BETA"}
ONE_WIRE = calls(tool_call("send_wire_transfer", "call-a", **WIRE_A))
TWO_WIRES = calls(
    tool_call("send_wire_transfer", "call-a", **WIRE_A),
    tool_call("send_wire_transfer", "call-b", **WIRE_B),
)


def rejected_text(request_id: str, reason: str = "") -> str:
    why = f": {reason}" if reason else ""
    return (
        f"[REJECTED] send_wire_transfer was not run: approval request {request_id} was "
        f"rejected{why}. Do not call it again; tell the user it was not done."
    )


def make_run(
    sagacity: Sagacity, flavour: tuple[str, bool], *turns: Any, **options: Any
) -> tuple[GraphRun, OrderTools | AsyncOrderTools]:
    graph_kind, is_async = flavour
    shop = AsyncOrderTools() if is_async else OrderTools()
    graph = build_graph(graph_kind, scripted(*turns), langchain_tools(sagacity, shop))
    return GraphRun(sagacity, graph, is_async=is_async, **options), shop


class TestARejectionInTheResumeValue:
    async def test_a_no_is_honoured_even_when_sagacity_holds_an_approval(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """`Command(resume={"approved": False})` stops an approved call and is journaled.

        The approver approved in sagacity; the graph's resume value says no. The call
        does not run, REJECTED names the resume value as its source, the model is told,
        and the saga goes on to COMPLETED with nothing pending.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, flavour, ONE_WIRE, "Not sent.")
        await run.start("wire-1", REQUEST)
        (request,) = approver.pending("wire-1")
        approver.approve("wire-1", approver="alice", expected_sha256=request.input_sha256)
        assert [r.state for r in approver.pending("wire-1")] == ["approved"]

        result = await run.resume("wire-1", {"approved": False, "reason": "customer cancelled"})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == []
        assert tool_messages(result.value) == [
            ("call-a", "success", rejected_text(request.request_id, "customer cancelled"))
        ]
        assert result.value["messages"][-1].content == "Not sent."
        assert journal_of(sagacity, "wire-1") == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-a"),
            ("APPROVED", "send_wire_transfer", "call-a"),
            ("REJECTED", "send_wire_transfer", "call-a"),
            ("ENDED", None, None),
        ]
        rejection = sagacity.history("wire-1")[2]
        assert (rejection.ref_seq, rejection.payload) == (
            1,
            {
                "request_id": request.request_id,
                "approver": None,
                "source": "langgraph Command(resume)",
                "reason": "customer cancelled",
                "initiated_by": {"by": "agent", "adapter": "langgraph", "thread_id": "thread-1"},
            },
        )
        assert RESUME_SOURCE == "langgraph Command(resume)"
        assert sagacity.pending("wire-1") == []
        assert verify(sagacity.journal, "wire-1").ok

    @pytest.mark.parametrize(
        "answer",
        [False, {"approved": False}, {"approved": "no"}, {"approved": None, "reason": 7}],
        ids=["False", "approved-False", "approved-not-True", "approved-None"],
    )
    async def test_every_documented_no_rejects_without_an_approval(
        self, stores: tuple[Sagacity, Sagacity], answer: Any
    ) -> None:
        """`False`, and any `"approved"` that is not `True`, say no; a reason must be text."""
        sagacity, _ = stores
        run, shop = make_run(sagacity, ("create_agent", False), ONE_WIRE, "Not sent.")
        await run.start("wire-1", REQUEST)
        (request,) = sagacity.pending("wire-1")

        result = await run.resume("wire-1", answer)

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == []
        assert tool_messages(result.value) == [
            ("call-a", "success", rejected_text(request.request_id))
        ]
        assert [phase for phase, _, _ in journal_of(sagacity, "wire-1")] == [
            "AWAITING_APPROVAL",
            "REJECTED",
            "ENDED",
        ]
        assert sagacity.history("wire-1")[1].payload["reason"] == ""

    async def test_a_no_naming_the_request_decides_it(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """A value that names its request id (copied from the interrupt) is that call's "no"."""
        sagacity, approver = stores
        run, shop = make_run(sagacity, flavour, ONE_WIRE, "Not sent.")
        await run.start("wire-1", REQUEST)
        (shown,) = run.interrupts()
        approver.approve("wire-1", approver="alice")

        result = await run.resume(
            "wire-1", {"request_id": shown.value["request_id"], "approved": False}
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == []
        assert sagacity.history("wire-1")[2].payload["request_id"] == shown.value["request_id"]

    async def test_a_no_naming_another_request_does_not_decide_this_call(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """A "no" for another request id is not this call's: sagacity's approval lets it run."""
        sagacity, approver = stores
        run, shop = make_run(sagacity, flavour, ONE_WIRE, "Sent.")
        await run.start("wire-1", REQUEST)
        approver.approve("wire-1", approver="alice")

        result = await run.resume("wire-1", {"request_id": "some-other", "approved": False})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        assert "REJECTED" not in [phase for phase, _, _ in journal_of(sagacity, "wire-1")]

    async def test_a_no_for_a_call_edited_in_the_paused_state_rejects_it(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """The paused call edited with `update_state` and then rejected: nothing runs.

        The "no" is read before any check, so the edited input is neither run nor refused
        as a changed input: the request it waited on is rejected.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, flavour, ONE_WIRE, "Not sent.")
        first = await run.start("wire-1", REQUEST)
        approver.approve("wire-1", approver="alice")
        (asked,) = [m for m in first.value["messages"] if getattr(m, "tool_calls", None)]
        edited = calls(tool_call("send_wire_transfer", "call-a", amount="9999.00", to="MALLORY"))
        edited.id = asked.id
        run.graph.update_state(run.config, {"messages": [edited]})

        result = await run.resume("wire-1", {"approved": False})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == []
        assert [phase for phase, _, _ in journal_of(sagacity, "wire-1")] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "REJECTED",
            "ENDED",
        ]

    async def test_a_rejected_call_stays_rejected_when_its_node_runs_again(
        self, stores: tuple[Sagacity, Sagacity]
    ) -> None:
        """A hand-built ToolNode runs every call again on resume: the rejected one is not run.

        Two wires wait in one node; the first is rejected by a value naming its request,
        the second is not approved yet, so the node pauses again. Once the second is
        approved, resuming runs it; the first gets its rejection again, journaled once.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, ("tool_node", True), TWO_WIRES, "One sent.")
        await run.start("wire-2", REQUEST)
        first, second = sorted(approver.pending("wire-2"), key=lambda r: r.call_id)

        with pytest.raises(ApprovalMissingError):
            await run.resume("wire-2", {"request_id": first.request_id, "approved": False})
        assert shop.ran == []
        assert run.interrupt_of("call-b").value["request_id"] == second.request_id

        approver.approve("wire-2", approver="alice", request_id=second.request_id)
        result = await run.resume("wire-2", {"approved": True})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("75.00", "BETA"))]
        assert sorted(tool_messages(result.value)) == [
            ("call-a", "success", rejected_text(first.request_id)),
            ("call-b", "success", "wire-75.00-BETA"),
        ]
        assert phases_by_call(sagacity, "wire-2") == {
            "call-a": ["AWAITING_APPROVAL", "REJECTED"],
            "call-b": ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"],
            None: ["ENDED"],
        }


class TestParallelDecisions:
    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    async def test_create_agent_takes_each_answer_for_its_own_interrupt(
        self, stores: tuple[Sagacity, Sagacity], is_async: bool
    ) -> None:
        """Two waiting calls, both approved in sagacity, answered by interrupt id: yes and no.

        `create_agent` runs each call as its own task, so each interrupt has its own
        answer in LangGraph's resume map: the call answered no is rejected, the other runs.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, ("create_agent", is_async), TWO_WIRES, "One sent.")
        await run.start("wire-3", REQUEST)
        for request in approver.pending("wire-3"):
            approver.approve("wire-3", approver="alice", request_id=request.request_id)
        shown_a, shown_b = run.interrupt_of("call-a"), run.interrupt_of("call-b")

        result = await run.resume(
            "wire-3", {shown_a.id: {"approved": False, "reason": "wrong payee"}, shown_b.id: True}
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("75.00", "BETA"))]
        assert sorted(tool_messages(result.value)) == [
            ("call-a", "success", rejected_text(shown_a.value["request_id"], "wrong payee")),
            ("call-b", "success", "wire-75.00-BETA"),
        ]
        assert phases_by_call(sagacity, "wire-3") == {
            "call-a": ["AWAITING_APPROVAL", "APPROVED", "REJECTED"],
            "call-b": ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"],
            None: ["ENDED"],
        }

    async def test_a_no_naming_no_request_rejects_every_call_waiting_in_a_tool_node(
        self, stores: tuple[Sagacity, Sagacity]
    ) -> None:
        """In a hand-built ToolNode an unaddressed "no" cannot be told apart: it rejects all.

        LangGraph shows one of the node's waiting calls and hands the node's answers to
        its calls in the order they ask, which is not stable for parallel calls. A "no"
        that names no request therefore rejects every call of the node that waits, even
        the one approved in sagacity: nothing runs.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, ("tool_node", True), TWO_WIRES, "None sent.")
        await run.start("wire-4", REQUEST)
        for request in approver.pending("wire-4"):
            approver.approve("wire-4", approver="alice", request_id=request.request_id)
        assert len(run.interrupts()) == 1

        result = await run.resume("wire-4", {"approved": False})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == []
        assert phases_by_call(sagacity, "wire-4") == {
            "call-a": ["AWAITING_APPROVAL", "APPROVED", "REJECTED"],
            "call-b": ["AWAITING_APPROVAL", "APPROVED", "REJECTED"],
            None: ["ENDED"],
        }
        sources = {
            e.payload["source"] for e in sagacity.history("wire-4") if e.phase.name == "REJECTED"
        }
        assert sources == {"langgraph Command(resume)"}


class TestSiblingsWaiting:
    @pytest.mark.parametrize(
        "flavour",
        [("tool_node", True), ("create_agent", False), ("create_agent", True)],
        ids=["tool_node-async", "create_agent-sync", "create_agent-async"],
    )
    async def test_an_approved_call_runs_while_its_sibling_still_waits(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """With the second wire approved and the first not, resuming runs the second once.

        The first still waits: it pauses the graph again and the resume raises its
        refusal (nothing is approved for it). Approved in turn, it runs, and the second
        is not run again.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, flavour, TWO_WIRES, "Both sent.")
        await run.start("wire-5", REQUEST)
        first, second = sorted(approver.pending("wire-5"), key=lambda r: r.call_id)
        approver.approve("wire-5", approver="alice", request_id=second.request_id)
        answers = {shown.id: True for shown in run.interrupts()}

        with pytest.raises(ApprovalMissingError, match=first.request_id):
            await run.resume("wire-5", answers)

        assert shop.ran == [("send_wire_transfer", ("75.00", "BETA"))]
        assert [(r.call_id, r.state) for r in approver.pending("wire-5")] == [("call-a", "waiting")]
        assert run.interrupt_of("call-a").value["request_id"] == first.request_id

        approver.approve("wire-5", approver="bob", request_id=first.request_id)
        result = await run.resume("wire-5", {shown.id: True for shown in run.interrupts()})

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [
            ("send_wire_transfer", ("75.00", "BETA")),
            ("send_wire_transfer", ("250.00", "ACME")),
        ]
        assert phases_by_call(sagacity, "wire-5") == {
            "call-a": ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"],
            "call-b": ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"],
            None: ["ENDED"],
        }

    async def test_a_sync_tool_node_runs_each_call_after_its_own_approval(
        self, stores: tuple[Sagacity, Sagacity]
    ) -> None:
        """A hand-built sync ToolNode may ask for, and run, one waiting call per resume.

        It runs a turn's calls with `Executor.map`, which cancels the calls that have not
        started once an earlier one raises: whether the second wire is asked before the
        first one's pause depends on the threads. Whatever they do, approving what waits
        and resuming, once or twice, runs each wire once, after its own approval.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, ("tool_node", False), TWO_WIRES, "Both sent.")

        result = await run.start("wire-6", REQUEST)
        resumes = 0
        while result.outcome is SagaOutcome.AWAITING_APPROVAL:
            for request in approver.pending("wire-6"):
                assert request.state == "waiting"
                approver.approve("wire-6", approver="alice", request_id=request.request_id)
            result = await run.resume("wire-6", True)
            resumes += 1

        assert result.outcome is SagaOutcome.COMPLETED
        assert resumes in (1, 2)
        assert sorted(shop.ran) == [
            ("send_wire_transfer", ("250.00", "ACME")),
            ("send_wire_transfer", ("75.00", "BETA")),
        ]
        assert phases_by_call(sagacity, "wire-6") == {
            "call-a": ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"],
            "call-b": ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"],
            None: ["ENDED"],
        }
