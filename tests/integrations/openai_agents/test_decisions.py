"""What the SDK and sagacity each decide about one call, and the attacks on them.

Two IRREVERSIBLE calls of which sagacity approved one, a rejection in the SDK's run state,
one call id used for two calls, and an approval of one tool offered to another.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, FunctionTool, ModelBehaviorError, Runner, RunResult, RunState

from sagacity import (
    ApprovalMissingError,
    ApprovalRejectedError,
    ApprovalToolMismatchError,
    Sagacity,
    SagaOutcome,
    SagaResult,
    verify,
)
from sagacity.integrations.openai_agents import REJECTION_SOURCE, function_tools
from tests.integrations.openai_agents._orders import (
    Orders,
    agent_with,
    call,
    phases,
    scripted,
    tool_outputs,
)
from tests.integrations.openai_agents.test_approval import (
    SDK_ERROR_MESSAGE,
    WIRE_INPUT,
    wire_model,
)

SAGA = "decide-1"
WIRE_AND_DELETE = [
    call("send_wire_transfer", "c-1", amount="900.00", to="ACME"),
    call("delete_account", "c-2", account="acct-7"),
]
"""One model turn asking for two IRREVERSIBLE calls."""


async def pause(sagacity: Sagacity, agent: Agent[Any]) -> tuple[SagaResult, RunResult]:
    """Run the agent in the saga up to the SDK's approval interruption."""
    result = await sagacity.asaga(SAGA, lambda: Runner.run(agent, "pay and close"))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    assert isinstance(result.value, RunResult)
    return result, result.value


def request_id(sagacity: Sagacity, call_id: str) -> str:
    """The id of the pending request of a call."""
    (request,) = [r for r in sagacity.pending(SAGA) if r.call_id == call_id]
    return request.request_id


def approved_in_the_sdk(run: RunResult) -> RunState[Any]:
    """The run's state with every interruption approved in the SDK."""
    state = run.to_state()
    for item in run.interruptions:
        state.approve(item)
    return state


def swapped(stored: str, tool: str, arguments: dict[str, Any]) -> str:
    """A stored state whose wire (call-2) is edited to call `tool` with `arguments`.

    The SDK's own record of the call's invocation is dropped too, so that only sagacity is
    left to notice.
    """
    wire_arguments = json.dumps(WIRE_INPUT, separators=(",", ":"))
    state = json.loads(stored)

    def edit(value: Any) -> Any:
        if value == "send_wire_transfer":
            return tool
        if value == wire_arguments:
            return json.dumps(arguments, separators=(",", ":"))
        if isinstance(value, dict):
            return {key: edit(item) for key, item in value.items()}
        if isinstance(value, list):
            return [edit(item) for item in value]
        return value

    edited = edit(state)
    assert edited != state
    del edited["context"]["tool_invocations"]["call-2"]
    return json.dumps(edited)


class TestOneOfTwoApproved:
    async def test_the_approved_call_runs_once_and_the_other_is_refused(
        self, sagacity: Sagacity
    ) -> None:
        """Both approved in the SDK, one in sagacity: that one runs, once; the other is refused.

        The SDK runs an approved call without asking the approval policy again, so the other
        call cannot be paused again: it is refused inside the tool, runs nothing, and the
        refusal is raised when the work returns. Its request is still approvable; resuming
        from the state stored at the pause then runs it, and replays the first.
        """
        orders = Orders()
        model = scripted(WIRE_AND_DELETE)
        model.enqueue([])  # the refused resume answers once more
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await pause(sagacity, agent)
        stored = run.to_state().to_string()
        sagacity.approve(SAGA, approver="alice", request_id=request_id(sagacity, "c-1"))
        delete_request = request_id(sagacity, "c-2")

        with pytest.raises(ApprovalMissingError, match="'delete_account'"):
            await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, approved_in_the_sdk(run)))

        assert orders.log == ["wire 900.00 to ACME"]
        assert tool_outputs(model)["c-2"] == SDK_ERROR_MESSAGE
        assert phases(sagacity.history(SAGA)) == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "c-1"),
            ("AWAITING_APPROVAL", "delete_account", "c-2"),
            ("APPROVED", "send_wire_transfer", "c-1"),
            ("INTENT", "send_wire_transfer", "c-1"),
            ("EXECUTED", "send_wire_transfer", "c-1"),
        ]
        [waiting] = sagacity.pending(SAGA)
        assert (waiting.request_id, waiting.state) == (delete_request, "waiting")

        sagacity.approve(SAGA, approver="bob", request_id=delete_request)
        state = await RunState.from_string(agent, stored)
        for item in state.get_interruptions():
            state.approve(item)
        done = await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, state))

        assert done.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["wire 900.00 to ACME", "delete acct-7"]
        assert orders.calls == {"send_wire_transfer": 1, "delete_account": 1}
        assert tool_outputs(model) == {"c-1": "wire-900.00-ACME", "c-2": "deleted-acct-7"}
        assert phases(sagacity.history(SAGA))[5:] == [
            ("APPROVED", "delete_account", "c-2"),
            ("INTENT", "delete_account", "c-2"),
            ("EXECUTED", "delete_account", "c-2"),
            ("ENDED", None, None),
        ]
        assert verify(sagacity.journal, SAGA).ok


class TestRejectedInTheSdk:
    async def test_the_sdk_calls_neither_the_tool_nor_its_policy_for_a_rejected_call(
        self, sagacity: Sagacity
    ) -> None:
        """After `state.reject`, the SDK answers the call itself: no tool code of it runs.

        Neither `on_invoke_tool` nor `needs_approval` is called for it. This is why the
        adapter reads the rejection from the run context the SDK gives `is_enabled`.
        """
        orders = Orders()
        model = wire_model()
        tools = function_tools(sagacity, orders)
        seen: list[str] = []
        for tool in tools:
            assert isinstance(tool, FunctionTool)
            if tool.name == "send_wire_transfer":
                invoke, policy = tool.on_invoke_tool, tool.needs_approval
                assert callable(policy)

                async def probe_invoke(ctx: Any, arguments: str, invoke: Any = invoke) -> Any:
                    seen.append("on_invoke_tool")
                    return await invoke(ctx, arguments)

                async def probe_policy(ctx: Any, params: Any, call_id: str, p: Any = policy) -> Any:
                    seen.append("needs_approval")
                    return await p(ctx, params, call_id)

                tool.on_invoke_tool = probe_invoke
                tool.needs_approval = probe_policy
        agent = agent_with(model, tools)
        _, run = await pause(sagacity, agent)
        seen.clear()
        state = run.to_state()
        state.reject(run.interruptions[0])

        await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, state))

        assert seen == []
        assert tool_outputs(model)["call-2"] == "Tool execution was not approved."

    async def test_a_rejection_is_journaled_and_the_call_never_runs(
        self, sagacity: Sagacity
    ) -> None:
        """`state.reject` is journaled REJECTED, naming the SDK as its source.

        The request is consumed, nothing runs, and the saga goes on: the model is told the
        SDK's rejection message, and the saga completes with the reservation kept.
        """
        orders = Orders()
        model = wire_model()
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await pause(sagacity, agent)
        wire_request = request_id(sagacity, "call-2")
        state = run.to_state()
        state.reject(run.interruptions[0], rejection_message="not this supplier")

        result = await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, state))

        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value.final_output == "done"
        assert orders.log == ["reserve SKU-1 x1"]
        assert tool_outputs(model)["call-2"] == "not this supplier"
        assert phases(sagacity.history(SAGA)) == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-2"),
            ("REJECTED", "send_wire_transfer", "call-2"),
            ("ENDED", None, None),
        ]
        rejected = sagacity.history(SAGA)[3]
        assert (rejected.ref_seq, rejected.payload) == (
            3,
            {
                "request_id": wire_request,
                "approver": None,
                "source": REJECTION_SOURCE,
                "reason": "not this supplier",
                "initiated_by": {"by": "agent", "adapter": "openai_agents"},
            },
        )
        assert REJECTION_SOURCE == "openai-agents state.reject"
        assert sagacity.pending(SAGA) == []
        assert verify(sagacity.journal, SAGA).ok

    async def test_a_rejection_wins_over_an_approval_in_sagacity(self, sagacity: Sagacity) -> None:
        """Approved in sagacity, rejected in the SDK: the wire never runs, now or later.

        Without a message of its own the rejection's reason is empty. Afterwards neither a
        resume without work nor the stored state approved in the SDK can run it.
        """
        orders = Orders()
        model = wire_model()
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await pause(sagacity, agent)
        stored = run.to_state().to_string()
        sagacity.approve(SAGA, approver="alice")
        state = run.to_state()
        state.reject(run.interruptions[0])

        result = await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, state))

        assert result.outcome is SagaOutcome.COMPLETED
        assert phases(sagacity.history(SAGA))[2:] == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-2"),
            ("APPROVED", "send_wire_transfer", "call-2"),
            ("REJECTED", "send_wire_transfer", "call-2"),
            ("ENDED", None, None),
        ]
        assert sagacity.history(SAGA)[4].payload["reason"] == ""
        with pytest.raises(ApprovalRejectedError, match=r"'openai-agents state\.reject'"):
            await sagacity.aresume_saga(SAGA)
        approved = await RunState.from_string(agent, stored)
        approved.approve(approved.get_interruptions()[0])
        with pytest.raises(ApprovalRejectedError):
            await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, approved))
        assert orders.calls["send_wire_transfer"] == 0

    async def test_a_rejection_is_journaled_before_the_resumed_calls_run(
        self, sagacity: Sagacity
    ) -> None:
        """The rejection is journaled as the resumed run prepares its tools, before any call.

        The wire is rejected in the SDK, the account deletion approved in both: REJECTED
        comes before the deletion's INTENT.
        """
        orders = Orders()
        agent = agent_with(scripted(WIRE_AND_DELETE), function_tools(sagacity, orders))
        _, run = await pause(sagacity, agent)
        sagacity.approve(SAGA, approver="alice", request_id=request_id(sagacity, "c-2"))
        state = run.to_state()
        wire, delete = run.interruptions
        state.reject(wire, rejection_message="no")
        state.approve(delete)

        result = await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, state))

        assert result.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["delete acct-7"]
        assert phases(sagacity.history(SAGA))[2:] == [
            ("APPROVED", "delete_account", "c-2"),
            ("REJECTED", "send_wire_transfer", "c-1"),
            ("INTENT", "delete_account", "c-2"),
            ("EXECUTED", "delete_account", "c-2"),
            ("ENDED", None, None),
        ]

    async def test_a_standing_rejection_declines_each_asked_call_of_the_tool(
        self, sagacity: Sagacity
    ) -> None:
        """`always_reject=True` rejects every call of the tool: each one asked is declined."""
        orders = Orders()
        agent = agent_with(
            scripted(
                [
                    call("delete_account", "c-1", account="acct-1"),
                    call("delete_account", "c-2", account="acct-2"),
                ]
            ),
            function_tools(sagacity, orders),
        )
        _, run = await pause(sagacity, agent)
        state = run.to_state()
        state.reject(run.interruptions[0], always_reject=True)

        result = await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, state))

        assert result.outcome is SagaOutcome.COMPLETED
        assert [(p, c) for p, _, c in phases(sagacity.history(SAGA))] == [
            ("AWAITING_APPROVAL", "c-1"),
            ("AWAITING_APPROVAL", "c-2"),
            ("REJECTED", "c-1"),
            ("REJECTED", "c-2"),
            ("ENDED", None),
        ]
        assert orders.calls["delete_account"] == 0

    async def test_a_rejection_of_another_tool_under_the_id_declines_nothing(
        self, sagacity: Sagacity
    ) -> None:
        """A rejection names its tool: one of another tool under the same id leaves the request.

        The stored state is edited so that call-2 deletes an account; the SDK's rejection
        of that call is not a decision about the wire, which still waits.
        """
        orders = Orders()
        agent = agent_with(wire_model(), function_tools(sagacity, orders))
        _, run = await pause(sagacity, agent)
        stored = run.to_state().to_string()
        tampered = await RunState.from_string(
            agent, swapped(stored, "delete_account", {"account": "acct-7"})
        )
        tampered.reject(tampered.get_interruptions()[0])

        result = await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, tampered))

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert [r.call_id for r in result.pending] == ["call-2"]
        assert phases(sagacity.history(SAGA))[-1] == (
            "AWAITING_APPROVAL",
            "send_wire_transfer",
            "call-2",
        )
        assert orders.log == ["reserve SKU-1 x1"]


class TestOneIdForTwoCalls:
    @pytest.mark.parametrize(
        "second",
        [
            call("send_wire_transfer", "c-1", amount="1.00", to="EVE"),
            call("reserve_inventory", "c-1", sku="SKU-1"),
        ],
        ids=["same-tool", "other-tool"],
    )
    async def test_one_id_for_two_calls_in_a_turn_is_refused_before_anything_runs(
        self, sagacity: Sagacity, second: Any
    ) -> None:
        """Two different calls under one id in one turn: the SDK refuses them before either runs.

        Nothing is asked or journaled; the run's error ends the saga (compensated, with
        nothing to undo).
        """
        orders = Orders()
        model = scripted([call("send_wire_transfer", "c-1", amount="900.00", to="ACME"), second])

        result = await sagacity.asaga(
            SAGA, lambda: Runner.run(agent_with(model, function_tools(sagacity, orders)), "pay")
        )

        assert isinstance(result.error, ModelBehaviorError)
        assert "reused a tool call ID for a different invocation in one response" in str(
            result.error
        )
        assert result.outcome is SagaOutcome.COMPENSATED
        assert phases(sagacity.history(SAGA)) == [("ENDED", None, None)]
        assert sagacity.pending(SAGA) == []
        assert orders.log == []

    async def test_the_same_call_repeated_under_its_id_is_one_call(
        self, sagacity: Sagacity
    ) -> None:
        """The very same call twice under one id is one call: one interruption, one request.

        Approved, it runs once.
        """
        orders = Orders()
        wire = call("send_wire_transfer", "c-1", amount="900.00", to="ACME")
        agent = agent_with(scripted([wire, wire]), function_tools(sagacity, orders))
        paused, run = await pause(sagacity, agent)

        assert [item.raw_item.call_id for item in run.interruptions] == ["c-1"]
        assert [(r.call_id, r.input) for r in paused.pending] == [("c-1", WIRE_INPUT)]
        sagacity.approve(SAGA, approver="alice")
        done = await sagacity.aresume_saga(
            SAGA, lambda: Runner.run(agent, approved_in_the_sdk(run))
        )
        assert done.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["wire 900.00 to ACME"]

    async def test_an_id_reused_in_a_later_turn_is_refused_before_it_runs(
        self, sagacity: Sagacity
    ) -> None:
        """A later turn's call under an id that already ran is refused by the SDK.

        The wire is neither asked for nor run; the run's error compensates the saga.
        """
        orders = Orders()
        model = scripted(
            [call("reserve_inventory", "c-1", sku="SKU-1")],
            [call("send_wire_transfer", "c-1", amount="900.00", to="ACME")],
        )

        result = await sagacity.asaga(
            SAGA, lambda: Runner.run(agent_with(model, function_tools(sagacity, orders)), "pay")
        )

        assert isinstance(result.error, ModelBehaviorError)
        assert "reused a completed tool call ID for a different invocation" in str(result.error)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert orders.log == ["reserve SKU-1 x1", "release res-SKU-1-1"]
        assert [p for p, _, _ in phases(sagacity.history(SAGA))] == [
            "INTENT",
            "EXECUTED",
            "COMPENSATING",
            "COMPENSATED",
            "ENDED",
        ]


class TestToolSwap:
    @pytest.mark.parametrize(
        ("tool", "arguments"),
        [
            ("delete_account", {"account": "acct-7"}),
            ("reserve_inventory", {"sku": "SKU-9", "qty": 1}),
        ],
        ids=["irreversible", "compensatable"],
    )
    async def test_an_edited_state_that_swaps_the_tool_is_refused(
        self, sagacity: Sagacity, tool: str, arguments: dict[str, Any]
    ) -> None:
        """The approved call id edited to call another tool: refused, journaled, nothing runs.

        The approval of the wire does not let another tool run under its id. The attempt is
        journaled REFUSED (reason tool_mismatch) under the tool that tried; the wire's
        request stays approved, and the unedited state then runs the wire once.
        """
        orders = Orders()
        model = wire_model()
        model.enqueue([])  # the refused resume answers once more
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await pause(sagacity, agent)
        stored = run.to_state().to_string()
        wire_request = request_id(sagacity, "call-2")
        sagacity.approve(SAGA, approver="alice")
        tampered = await RunState.from_string(agent, swapped(stored, tool, arguments))
        tampered.approve(tampered.get_interruptions()[0])

        with pytest.raises(ApprovalToolMismatchError, match="asked for tool 'send_wire_transfer'"):
            await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, tampered))

        assert orders.log == ["reserve SKU-1 x1"]
        assert phases(sagacity.history(SAGA))[2:] == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-2"),
            ("APPROVED", "send_wire_transfer", "call-2"),
            ("REFUSED", tool, "call-2"),
        ]
        refused = sagacity.history(SAGA)[4]
        assert (refused.ref_seq, refused.payload["reason"], refused.payload["request_id"]) == (
            3,
            "tool_mismatch",
            wire_request,
        )
        [request] = sagacity.pending(SAGA)
        assert (request.request_id, request.state) == (wire_request, "approved")
        state = await RunState.from_string(agent, stored)
        state.approve(state.get_interruptions()[0])
        done = await sagacity.aresume_saga(SAGA, lambda: Runner.run(agent, state))
        assert done.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["reserve SKU-1 x1", "wire 900.00 to ACME"]

    @pytest.mark.parametrize(
        ("tool", "arguments"),
        [
            ("delete_account", {"account": "acct-7"}),
            ("reserve_inventory", {"sku": "SKU-9", "qty": 1}),
        ],
        ids=["irreversible", "compensatable"],
    )
    async def test_a_fresh_run_reusing_the_approved_id_for_another_tool_is_refused(
        self, sagacity: Sagacity, tool: str, arguments: dict[str, Any]
    ) -> None:
        """A new run whose model calls another tool under the approved id: refused.

        Nothing runs; the approved wire still runs once on the proper resume.
        """
        orders = Orders()
        agent = agent_with(wire_model(), function_tools(sagacity, orders))
        _, run = await pause(sagacity, agent)
        sagacity.approve(SAGA, approver="alice")
        other = agent_with(scripted([call(tool, "call-2", **arguments)]), agent.tools)

        with pytest.raises(ApprovalToolMismatchError, match="asked for tool 'send_wire_transfer'"):
            await sagacity.aresume_saga(SAGA, lambda: Runner.run(other, "go"))

        assert orders.log == ["reserve SKU-1 x1"]
        assert phases(sagacity.history(SAGA))[-1] == ("REFUSED", tool, "call-2")
        done = await sagacity.aresume_saga(
            SAGA, lambda: Runner.run(agent, approved_in_the_sdk(run))
        )
        assert done.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["reserve SKU-1 x1", "wire 900.00 to ACME"]
