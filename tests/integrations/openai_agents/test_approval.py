"""IRREVERSIBLE tools pause the run with the SDK's own approval.

They run only after `Sagacity.approve` of their exact input, whatever the SDK's state says.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, ModelBehaviorError, Runner, RunResult, RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity import (
    ApprovalHashMismatchError,
    ApprovalMissingError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaResult,
    compensable,
    verify,
)
from sagacity.integrations.openai_agents import function_tools
from tests.integrations.openai_agents._orders import (
    Orders,
    agent_with,
    call,
    phases,
    scripted,
    tool_outputs,
)

SDK_ERROR_MESSAGE = "An error occurred while running the tool. Please try again."
WIRE_INPUT = {"amount": "900.00", "to": "ACME"}


def wire_model() -> ScriptedModel:
    """Reserve stock, then wire 900.00 to ACME (which waits), then say "done"."""
    return scripted(
        [call("reserve_inventory", "call-1", sku="SKU-1")],
        [call("send_wire_transfer", "call-2", amount="900.00", to="ACME")],
    )


async def run_until_paused(
    sagacity: Sagacity, saga_id: str, agent: Agent[Any]
) -> tuple[SagaResult, RunResult]:
    """Run the agent in a saga up to the SDK's approval interruption."""
    result = await sagacity.asaga(saga_id, lambda: Runner.run(agent, "pay ACME for order 1"))
    assert isinstance(result.value, RunResult)
    return result, result.value


class TestPause:
    async def test_irreversible_call_interrupts_the_run_and_waits(self, sagacity: Sagacity) -> None:
        """The run ends with the SDK's interruption; the saga waits on the exact input.

        The tool has not run.
        """
        orders = Orders()
        agent = agent_with(wire_model(), function_tools(sagacity, orders))

        result, run = await run_until_paused(sagacity, "wire-1", agent)

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert [(item.tool_name, item.raw_item.call_id) for item in run.interruptions] == [
            ("send_wire_transfer", "call-2")
        ]
        (request,) = result.pending
        assert (request.call_id, request.tool_name, request.input) == (
            "call-2",
            "send_wire_transfer",
            WIRE_INPUT,
        )
        assert orders.calls["send_wire_transfer"] == 0
        assert phases(sagacity.history("wire-1")) == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-2"),
        ]


class TestApprovedInBoth:
    @pytest.mark.parametrize(
        ("tool", "arguments", "expected"),
        [
            ("send_wire_transfer", WIRE_INPUT, "wire 900.00 to ACME"),
            ("delete_account", {"account": "acct-7"}, "delete acct-7"),
        ],
        ids=["sync-decimal", "async"],
    )
    async def test_runs_exactly_once_with_the_approved_input(
        self, sagacity: Sagacity, tool: str, arguments: dict[str, Any], expected: str
    ) -> None:
        """Approved in both, the resumed run calls the tool once with the approved input.

        The SDK state is approved with `state.approve`, sagacity with `Sagacity.approve`.
        """
        orders = Orders()
        model = scripted([call(tool, "call-1", **arguments)])
        agent = agent_with(model, function_tools(sagacity, orders))
        paused, run = await run_until_paused(sagacity, "approve-1", agent)
        (request,) = paused.pending

        state = run.to_state()
        state.approve(run.interruptions[0])
        sagacity.approve("approve-1", approver="alice", expected_sha256=request.input_sha256)
        resumed = await sagacity.aresume_saga("approve-1", lambda: Runner.run(agent, state))

        assert resumed.outcome is SagaOutcome.COMPLETED
        assert resumed.value.final_output == "done"
        assert orders.log == [expected]
        assert orders.calls[tool] == 1
        entries = sagacity.history("approve-1")
        assert phases(entries) == [
            ("AWAITING_APPROVAL", tool, "call-1"),
            ("APPROVED", tool, "call-1"),
            ("INTENT", tool, "call-1"),
            ("EXECUTED", tool, "call-1"),
            ("ENDED", None, None),
        ]
        assert entries[2].payload["input"] == arguments
        assert entries[2].payload["request_id"] == request.request_id
        assert entries[1].payload["approver"] == "alice"
        assert sagacity.pending("approve-1") == []
        assert verify(sagacity.journal, "approve-1").ok

    async def test_resumes_in_other_processes(self, sqlite_url: str) -> None:
        """Paused, approved and resumed in three processes, the call runs once, in the last.

        Each process has its own Sagacity, tools and agent; the SDK state travels as a string.
        """
        first = Sagacity.from_url(sqlite_url)
        _, run = await run_until_paused(
            first, "wire-2", agent_with(wire_model(), function_tools(first, Orders()))
        )
        stored = run.to_state().to_string()
        first.close()

        approver = Sagacity.from_url(sqlite_url)
        approver.approve("wire-2", approver="alice")
        approver.close()

        resumer = Sagacity.from_url(sqlite_url)
        orders = Orders()
        agent = agent_with(scripted(), function_tools(resumer, orders))
        state = await RunState.from_string(agent, stored)
        state.approve(state.get_interruptions()[0])
        resumed = await resumer.aresume_saga("wire-2", lambda: Runner.run(agent, state))

        assert resumed.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["wire 900.00 to ACME"]
        assert phases(resumer.history("wire-2"))[-4:] == [
            ("APPROVED", "send_wire_transfer", "call-2"),
            ("INTENT", "send_wire_transfer", "call-2"),
            ("EXECUTED", "send_wire_transfer", "call-2"),
            ("ENDED", None, None),
        ]
        resumer.close()


class TestApprovedOnlyInTheSdk:
    async def test_is_refused_and_the_tool_does_not_run(self, sagacity: Sagacity) -> None:
        """Approved only in the SDK: resuming raises ApprovalMissingError and nothing runs.

        The model was told the call failed; nothing after AWAITING_APPROVAL is journaled.
        """
        orders = Orders()
        model = wire_model()
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await run_until_paused(sagacity, "wire-3", agent)

        state = run.to_state()
        state.approve(run.interruptions[0])
        with pytest.raises(ApprovalMissingError, match="no approval is journaled"):
            await sagacity.aresume_saga("wire-3", lambda: Runner.run(agent, state))

        assert orders.calls["send_wire_transfer"] == 0
        assert tool_outputs(model)["call-2"] == SDK_ERROR_MESSAGE
        assert phases(sagacity.history("wire-3"))[-1] == (
            "AWAITING_APPROVAL",
            "send_wire_transfer",
            "call-2",
        )
        assert len(sagacity.pending("wire-3")) == 1

    async def test_saga_can_still_be_approved_properly(self, sagacity: Sagacity) -> None:
        """After that refusal, approving properly and resuming the stored state runs it once."""
        orders = Orders()
        model = wire_model()
        model.enqueue([assistant_message("done")])  # the refused resume uses one answer
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await run_until_paused(sagacity, "wire-4", agent)
        stored = run.to_state().to_string()
        state = run.to_state()
        state.approve(run.interruptions[0])
        with pytest.raises(ApprovalMissingError):
            await sagacity.aresume_saga("wire-4", lambda: Runner.run(agent, state))

        sagacity.approve("wire-4", approver="alice")
        state = await RunState.from_string(agent, stored)
        state.approve(state.get_interruptions()[0])
        resumed = await sagacity.aresume_saga("wire-4", lambda: Runner.run(agent, state))

        assert resumed.outcome is SagaOutcome.COMPLETED
        assert orders.calls["send_wire_transfer"] == 1


class TestApprovedOnlyInSagacity:
    async def test_the_sdk_interrupts_again_and_nothing_runs(self, sagacity: Sagacity) -> None:
        """Sagacity.approve without `state.approve`: the resumed run stops at the same call."""
        orders = Orders()
        agent = agent_with(wire_model(), function_tools(sagacity, orders))
        _, run = await run_until_paused(sagacity, "wire-8", agent)
        sagacity.approve("wire-8", approver="alice")

        again = await sagacity.aresume_saga("wire-8", lambda: Runner.run(agent, run.to_state()))

        assert again.outcome is SagaOutcome.AWAITING_APPROVAL
        assert [item.raw_item.call_id for item in again.value.interruptions] == ["call-2"]
        assert orders.calls["send_wire_transfer"] == 0


class TestApprovedForAnotherInput:
    async def test_edited_state_is_refused_by_the_hash(self, sagacity: Sagacity) -> None:
        """An edited SDK state is refused by the hash; the unedited one then runs once.

        The stored state is edited to wire to MALLORY and approved in the SDK; sagacity approved
        ACME: resuming raises ApprovalHashMismatchError and nothing runs.
        """
        orders = Orders()
        model = wire_model()
        model.enqueue([assistant_message("done")])
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await run_until_paused(sagacity, "wire-5", agent)
        stored = run.to_state().to_string()
        sagacity.approve("wire-5", approver="alice")

        tampered = await RunState.from_string(agent, _edit_beneficiary(stored, "MALLORY"))
        tampered.approve(tampered.get_interruptions()[0])
        with pytest.raises(ApprovalHashMismatchError):
            await sagacity.aresume_saga("wire-5", lambda: Runner.run(agent, tampered))
        assert orders.calls["send_wire_transfer"] == 0
        assert "INTENT" not in [phase for phase, *_ in phases(sagacity.history("wire-5"))[2:]]

        state = await RunState.from_string(agent, stored)
        state.approve(state.get_interruptions()[0])
        resumed = await sagacity.aresume_saga("wire-5", lambda: Runner.run(agent, state))
        assert resumed.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["reserve SKU-1 x1", "wire 900.00 to ACME"]

    async def test_fresh_run_reusing_the_call_id_is_refused_by_the_policy(
        self, sagacity: Sagacity
    ) -> None:
        """A new run whose model repeats call-2 with another input is refused before it runs.

        The approval policy meets the mismatch, answers "needs approval" (the run is
        interrupted) and `aresume_saga` raises ApprovalHashMismatchError.
        """
        orders = Orders()
        agent = agent_with(wire_model(), function_tools(sagacity, orders))
        await run_until_paused(sagacity, "wire-10", agent)
        sagacity.approve("wire-10", approver="alice")

        other = agent_with(
            scripted([call("send_wire_transfer", "call-2", amount="9000.00", to="ACME")]),
            function_tools(sagacity, orders),
        )
        ran: list[RunResult] = []

        async def fresh_run() -> None:
            ran.append(await Runner.run(other, "pay ACME more"))

        with pytest.raises(ApprovalHashMismatchError):
            await sagacity.aresume_saga("wire-10", fresh_run)

        assert [item.raw_item.call_id for item in ran[0].interruptions] == ["call-2"]
        assert orders.calls["send_wire_transfer"] == 0

    async def test_sdk_refuses_an_edit_it_can_see(self, sagacity: Sagacity) -> None:
        """An edited call whose SDK record is kept is refused by the SDK itself."""
        agent = agent_with(wire_model(), function_tools(sagacity, Orders()))
        _, run = await run_until_paused(sagacity, "wire-7", agent)
        stored = run.to_state().to_string().replace('\\"to\\":\\"ACME\\"', '\\"to\\":\\"EVE\\"')

        tampered = await RunState.from_string(agent, stored)
        with pytest.raises(ModelBehaviorError, match="reused a tool call ID"):
            tampered.approve(tampered.get_interruptions()[0])


class TestStickySdkApproval:
    async def test_always_approve_does_not_approve_later_calls_in_sagacity(
        self, sagacity: Sagacity
    ) -> None:
        """`state.approve(item, always_approve=True)` lets a later call skip the SDK pause.

        sagacity still holds that call: it journals AWAITING_APPROVAL, the model is told
        the call waits, and it runs once, with its input, after Sagacity.approve and a
        resume without work.
        """
        orders = Orders()
        model = scripted(
            [call("delete_account", "call-1", account="acct-1")],
            [call("delete_account", "call-2", account="acct-2")],
        )
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await run_until_paused(sagacity, "sticky-1", agent)
        state = run.to_state()
        state.approve(run.interruptions[0], always_approve=True)
        sagacity.approve("sticky-1", approver="alice")

        waiting = await sagacity.aresume_saga("sticky-1", lambda: Runner.run(agent, state))

        assert waiting.outcome is SagaOutcome.AWAITING_APPROVAL
        assert orders.log == ["delete acct-1"]
        assert tool_outputs(model)["call-2"].startswith("[AWAITING_APPROVAL] delete_account")
        (request,) = waiting.pending
        assert (request.call_id, request.input) == ("call-2", {"account": "acct-2"})

        sagacity.approve("sticky-1", approver="alice")
        done = await sagacity.aresume_saga("sticky-1")

        assert done.outcome is SagaOutcome.COMPLETED
        assert done.value == "deleted-acct-2"
        assert orders.log == ["delete acct-1", "delete acct-2"]
        assert phases(sagacity.history("sticky-1"))[4:] == [
            ("AWAITING_APPROVAL", "delete_account", "call-2"),
            ("APPROVED", "delete_account", "call-2"),
            ("INTENT", "delete_account", "call-2"),
            ("EXECUTED", "delete_account", "call-2"),
            ("ENDED", None, None),
        ]


class TestRejected:
    async def test_rejection_compensates_and_the_tool_never_runs(self, sagacity: Sagacity) -> None:
        """Rejected in both: the saga ends COMPENSATED and the tool never runs.

        The SDK run, continued outside the saga, tells the model the call was not approved.
        """
        orders = Orders()
        model = wire_model()
        agent = agent_with(model, function_tools(sagacity, orders))
        _, run = await run_until_paused(sagacity, "wire-6", agent)

        state = run.to_state()
        state.reject(run.interruptions[0])
        rejected = sagacity.reject("wire-6", approver="alice", reason="unknown beneficiary")
        after = await Runner.run(agent, state)

        assert rejected.outcome is SagaOutcome.COMPENSATED
        assert after.final_output == "done"
        assert tool_outputs(model)["call-2"] == "Tool execution was not approved."
        assert orders.log == ["reserve SKU-1 x1", "release res-SKU-1-1"]
        assert phases(sagacity.history("wire-6")) == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-2"),
            ("REJECTED", "send_wire_transfer", "call-2"),
            ("COMPENSATING", "reserve_inventory", "call-1"),
            ("COMPENSATED", "reserve_inventory", "call-1"),
            ("ENDED", None, None),
        ]


class Ledger:
    """An IRREVERSIBLE tool whose arguments may all be left out."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def close_books(self, period: str = "current") -> str:
        """Close the books of an accounting period; it cannot be reopened."""
        self.closed.append(period)
        return f"closed {period}"


class TestUnreadableArguments:
    @pytest.mark.parametrize("arguments", ["", "   ", "{bad", "[1]"])
    async def test_the_sdk_interrupts_without_asking_sagacity(
        self, sagacity: Sagacity, arguments: str
    ) -> None:
        """Arguments that are not a JSON object make the SDK interrupt on its own.

        The SDK does not ask the approval policy: sagacity journals nothing, holds no
        request, and the saga ends COMPLETED while the run lists the interruption.
        """
        ledger = Ledger()
        model = ScriptedModel(
            [[function_call("close_books", arguments, call_id="c1")], [assistant_message("ok")]]
        )
        agent = agent_with(model, function_tools(sagacity, ledger))

        result = await sagacity.asaga("books-1", lambda: Runner.run(agent, "close the books"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert result.pending == []
        assert [item.raw_item.call_id for item in result.value.interruptions] == ["c1"]
        assert phases(sagacity.history("books-1")) == [("ENDED", None, None)]
        assert ledger.closed == []

    async def test_empty_arguments_approved_in_the_sdk_wait_for_sagacity(
        self, sagacity: Sagacity
    ) -> None:
        """Approved in the SDK only, a call with empty arguments still waits for sagacity.

        The SDK runs it with `{}`; in a new saga sagacity journals AWAITING_APPROVAL and
        tells the model, and the call runs once after `Sagacity.approve`.
        """
        ledger = Ledger()
        model = ScriptedModel(
            [[function_call("close_books", "", call_id="c1")], [assistant_message("ok")]]
        )
        agent = agent_with(model, function_tools(sagacity, ledger))
        first = await sagacity.asaga("books-1", lambda: Runner.run(agent, "close the books"))
        state = first.value.to_state()
        state.approve(first.value.interruptions[0])

        held = await sagacity.asaga("books-2", lambda: Runner.run(agent, state))

        assert held.outcome is SagaOutcome.AWAITING_APPROVAL
        assert tool_outputs(model)["c1"].startswith("[AWAITING_APPROVAL] close_books")
        assert ledger.closed == []
        (request,) = held.pending
        assert (request.call_id, request.input) == ("c1", {"period": "current"})

        sagacity.approve("books-2", approver="alice", expected_sha256=request.input_sha256)
        done = await sagacity.aresume_saga("books-2")

        assert done.outcome is SagaOutcome.COMPLETED
        assert ledger.closed == ["current"]


def _edit_beneficiary(stored: str, beneficiary: str) -> str:
    """Change the wire's beneficiary in a stored SDK state, as one with write access could.

    The SDK fingerprints each invocation and refuses an edited call on its own, so the edit
    also drops that record: only sagacity's hash is left to refuse it.
    """
    original = '\\"to\\":\\"ACME\\"'
    assert original in stored
    state = json.loads(stored.replace(original, f'\\"to\\":\\"{beneficiary}\\"'))
    del state["context"]["tool_invocations"]["call-2"]
    return json.dumps(state)
