"""Scenario 2: an IRREVERSIBLE call pauses the run natively and resumes after approval."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785
from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
    ToolApproved,
)

from sagacity import (
    ApprovalHashMismatchError,
    ApprovalRejectedError,
    ConfigurationError,
    Sagacity,
    SagaOutcome,
    verify,
)
from sagacity.integrations.pydantic_ai import saga_toolset
from tests.integrations.pydantic_ai._agents import (
    OrderTools,
    ScriptedModel,
    agent_with,
    call,
    counts,
    journal_of,
)

WIRE = {"amount": "2500.00", "to": "DE89 3704 0044 0532 0130 00"}
WIRE_SHA256 = hashlib.sha256(rfc8785.dumps(WIRE)).hexdigest()
"""The hash an approver checks, computed here independently of sagacity."""

PAUSED = [("AWAITING_APPROVAL", "send_wire", "call-w")]
RESUMED = [
    ("AWAITING_APPROVAL", "send_wire", "call-w"),
    ("APPROVED", "send_wire", "call-w"),
    ("INTENT", "send_wire", "call-w"),
    ("EXECUTED", "send_wire", "call-w"),
    ("ENDED", None, None),
]


def wire_model() -> ScriptedModel:
    """Asks for the wire, then (once it has the result) says it is sent."""
    return ScriptedModel([call("send_wire", "call-w", **WIRE)], "The wire is sent.")


async def pause(sagacity: Sagacity, shop: OrderTools, model: ScriptedModel) -> Any:
    """Run the agent until the wire pauses; return the first run's result."""
    agent = agent_with(model, saga_toolset(sagacity, shop), deferred=True)
    result = await sagacity.asaga("payout-1", lambda: agent.run("Pay the supplier."))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    return result.value


async def resume(
    sagacity: Sagacity, shop: OrderTools, model: ScriptedModel, run: Any, approval: Any
) -> Any:
    """Resume natively: the message history and PydanticAI's own approval of the call."""
    agent = agent_with(model, saga_toolset(sagacity, shop), deferred=True)
    return await sagacity.aresume_saga(
        "payout-1",
        lambda: agent.run(
            message_history=run.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call-w": approval}),
        ),
    )


class TestNativePause:
    async def test_irreversible_call_ends_the_run_with_deferred_tool_requests(
        self, sagacity: Sagacity
    ) -> None:
        """The wire does not run: the run ends with PydanticAI's DeferredToolRequests.

        Their metadata names sagacity's request and the hash of the exact input.
        """
        shop = OrderTools()

        run = await pause(sagacity, shop, wire_model())

        output = run.output
        assert isinstance(output, DeferredToolRequests)
        assert [(c.tool_name, c.tool_call_id) for c in output.approvals] == [
            ("send_wire", "call-w")
        ]
        [request] = sagacity.pending("payout-1")
        assert output.metadata["call-w"]["sagacity"] == {
            "request_id": request.request_id,
            "saga_id": "payout-1",
            "seq": 1,
            "call_id": "call-w",
            "tool_name": "send_wire",
            "input": WIRE,
            "input_sha256": WIRE_SHA256,
            "reason": "send_wire is IRREVERSIBLE: Send a wire transfer: money that cannot be "
            "called back.",
            "requested_at": request.requested_at.isoformat(),
            "expires_at": None,
            "started_by": None,
            "approvers_required": 1,
            "edited_by": None,
            "state": "waiting",
            "approvals": [],
            "problem": None,
        }
        assert output.metadata["call-w"]["sagacity"] == request.to_json()
        assert journal_of(sagacity, "payout-1") == PAUSED
        assert shop.calls == []


class TestApprovedResume:
    async def test_approved_call_runs_once_with_the_approved_input(
        self, sagacity: Sagacity
    ) -> None:
        """Approved through sagacity, resumed natively: the wire runs once, as approved.

        The approval is checked against the hash the approver was shown; the resume is PydanticAI's
        own DeferredToolResults.
        """
        shop, model = OrderTools(), wire_model()
        run = await pause(sagacity, shop, model)
        shown = run.output.metadata["call-w"]["sagacity"]

        sagacity.approve("payout-1", approver="alice@ops", expected_sha256=shown["input_sha256"])
        result = await resume(sagacity, shop, model, run, True)

        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value.output == "The wire is sent."
        assert shop.calls == [("send_wire", WIRE)]
        assert journal_of(sagacity, "payout-1") == RESUMED
        entries = sagacity.history("payout-1")
        assert entries[1].payload["approver"] == "alice@ops"
        assert entries[2].payload["request_id"] == shown["request_id"]
        assert model.tool_returns() == [
            ("call-w", "success", f"wire-{WIRE['amount']}-{WIRE['to']}")
        ]
        assert sagacity.pending("payout-1") == []
        assert verify(sagacity.journal, "payout-1").ok

    async def test_async_tool_taking_run_context_resumes_once(self, sagacity: Sagacity) -> None:
        """An async IRREVERSIBLE tool that takes RunContext resumes the same way.

        The hash covers the model's arguments only.
        """
        shop = OrderTools()
        model = ScriptedModel([call("delete_account", "call-d", account="acme")], "Deleted.")
        agent = agent_with(model, saga_toolset(sagacity, shop), deferred=True)
        first = await sagacity.asaga("close-1", lambda: agent.run("Close acme."))
        [request] = sagacity.pending("close-1")
        assert request.input == {"account": "acme"}

        sagacity.approve("close-1", approver="bob@ops")
        result = await sagacity.aresume_saga(
            "close-1",
            lambda: agent.run(
                message_history=first.value.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"call-d": True}),
            ),
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.calls == [("delete_account", {"account": "acme"})]
        assert [phase for phase, _, _ in journal_of(sagacity, "close-1")] == [
            phase for phase, _, _ in RESUMED
        ]

    async def test_run_context_tool_resumed_without_work_stays_open(
        self, sagacity: Sagacity
    ) -> None:
        """A tool taking RunContext is not resumed without work: the saga stays open.

        There is no RunContext to call it with, so `aresume_saga` without work raises
        ConfigurationError before anything runs; nothing is compensated, the approval is not
        used up, and the native resume then runs the call once.
        """
        shop = OrderTools()
        model = ScriptedModel([call("delete_account", "call-d", account="acme")], "Deleted.")
        agent = agent_with(model, saga_toolset(sagacity, shop), deferred=True)
        first = await sagacity.asaga("close-2", lambda: agent.run("Close acme."))
        sagacity.approve("close-2", approver="bob@ops")

        with pytest.raises(ConfigurationError, match=r"'close-2'.*'delete_account'.*as `work`"):
            await sagacity.aresume_saga("close-2")

        assert shop.calls == []
        assert [phase for phase, _, _ in journal_of(sagacity, "close-2")] == [
            "AWAITING_APPROVAL",
            "APPROVED",
        ]
        result = await sagacity.aresume_saga(
            "close-2",
            lambda: agent.run(
                message_history=first.value.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"call-d": True}),
            ),
        )
        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.calls == [("delete_account", {"account": "acme"})]

    async def test_approval_and_resume_in_other_processes(self, sqlite_url: str) -> None:
        """Approval and resume may happen in other processes than the pause.

        Another Sagacity on the same database approves; a third resumes from the message history
        stored as JSON.
        """
        shop = OrderTools()
        first = Sagacity.from_url(sqlite_url)
        run = await pause(first, OrderTools(), ScriptedModel([call("send_wire", "call-w", **WIRE)]))
        stored_history = ModelMessagesTypeAdapter.dump_json(run.all_messages())
        first.close()

        approver = Sagacity.from_url(sqlite_url)
        approver.approve("payout-1", approver="alice@ops", expected_sha256=WIRE_SHA256)
        approver.close()

        worker = Sagacity.from_url(sqlite_url)
        agent = agent_with(ScriptedModel("The wire is sent."), saga_toolset(worker, shop))
        result = await worker.aresume_saga(
            "payout-1",
            lambda: agent.run(
                message_history=ModelMessagesTypeAdapter.validate_json(stored_history),
                deferred_tool_results=DeferredToolResults(approvals={"call-w": True}),
            ),
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.calls == [("send_wire", WIRE)]
        assert journal_of(worker, "payout-1") == RESUMED
        worker.close()

    async def test_resume_without_work_runs_the_stored_input(self, sagacity: Sagacity) -> None:
        """`resume_saga` without work runs the approved call from its stored input.

        The input the adapter journals is what the plain tool binds.
        """
        shop = OrderTools()
        await pause(sagacity, shop, wire_model())
        sagacity.approve("payout-1", approver="alice@ops")

        result = sagacity.resume_saga("payout-1")

        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == f"wire-{WIRE['amount']}-{WIRE['to']}"
        assert shop.calls == [("send_wire", WIRE)]


class TestRefusals:
    async def test_approved_in_pydantic_ai_only_is_deferred_again(self, sagacity: Sagacity) -> None:
        """PydanticAI's approval alone runs nothing: the run pauses again at the same call.

        The journal gains nothing, the request stays as it was, and a proper approval then
        runs the call once on the next resume.
        """
        shop, model = OrderTools(), wire_model()
        run = await pause(sagacity, shop, model)
        [request] = sagacity.pending("payout-1")

        again = await resume(sagacity, shop, ScriptedModel(), run, True)

        assert again.outcome is SagaOutcome.AWAITING_APPROVAL
        output = again.value.output
        assert isinstance(output, DeferredToolRequests)
        assert [c.tool_call_id for c in output.approvals] == ["call-w"]
        assert output.metadata["call-w"]["sagacity"] == request.to_json()
        assert [r.request_id for r in again.pending] == [request.request_id]
        assert shop.calls == []
        assert journal_of(sagacity, "payout-1") == PAUSED
        sagacity.approve("payout-1", approver="alice@ops")
        result = await resume(sagacity, shop, model, again.value, True)
        assert result.outcome is SagaOutcome.COMPLETED
        assert counts(shop)["send_wire"] == 1

    async def test_approval_of_other_arguments_is_refused(self, sagacity: Sagacity) -> None:
        """Approval of other arguments than those approved is refused.

        PydanticAI lets a resume change them (`ToolApproved(override_args=...)`): the input no
        longer hashes to what was approved, so nothing runs.
        """
        shop, model = OrderTools(), wire_model()
        run = await pause(sagacity, shop, model)
        sagacity.approve("payout-1", approver="alice@ops", expected_sha256=WIRE_SHA256)
        changed = ToolApproved(override_args={**WIRE, "to": "attacker"})

        with pytest.raises(ApprovalHashMismatchError, match="sha256"):
            await resume(sagacity, shop, ScriptedModel(), run, changed)

        assert shop.calls == []
        assert journal_of(sagacity, "payout-1") == [
            *PAUSED,
            ("APPROVED", "send_wire", "call-w"),
            ("REFUSED", "send_wire", "call-w"),  # the attempt is evidence
        ]
        result = await resume(sagacity, shop, model, run, True)
        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.calls == [("send_wire", WIRE)]

    async def test_rejected_request_compensates_and_cannot_be_resumed(
        self, sagacity: Sagacity
    ) -> None:
        """A request rejected through sagacity compensates the saga and cannot run.

        The steps before the wire are undone; a later approval in PydanticAI runs nothing.
        """
        shop = OrderTools()
        model = ScriptedModel(
            [call("reserve_inventory", "call-r", sku="SKU-1")],
            [call("send_wire", "call-w", **WIRE)],
        )
        run = await pause(sagacity, shop, model)

        rejected = sagacity.reject("payout-1", approver="alice@ops", reason="unknown IBAN")

        assert rejected.outcome is SagaOutcome.COMPENSATED
        assert shop.undone == [("release_inventory", "res-SKU-1-1")]
        with pytest.raises(ApprovalRejectedError, match="rejected"):
            await resume(sagacity, shop, ScriptedModel(), run, True)
        assert counts(shop)["send_wire"] == 0
