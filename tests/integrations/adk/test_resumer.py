"""`AdkResumer`: a decision answers ADK's confirmation request in the paused session.

It is what `sagacity.Worker` calls for the sagas an ADK pause journaled (resumer "adk").
"""

from __future__ import annotations

import asyncio
import datetime

import pytest

from sagacity import (
    ApprovalMissingError,
    ApprovalRequest,
    Decision,
    DecisionOutcome,
    Sagacity,
    SagaNotFoundError,
    SagaOutcome,
    Worker,
)
from sagacity.integrations.adk import RESUMER, AdkResumer, function_tools
from tests.integrations.adk._agents import USER, Desk, Orders, final_text, phases, scripted

SAGA = "resume-1"


def wire_desk(sagacity: Sagacity, orders: Orders) -> Desk:
    """A desk whose model reserves, then asks to wire 900.00 to ACME, then says "done"."""
    model = scripted(
        [("reserve_inventory", "call-1", {"sku": "SKU-1"})],
        [("send_wire_transfer", "call-2", {"amount": "900.00", "to": "ACME"})],
    )
    return Desk(model, function_tools(sagacity, orders))


async def pause(sagacity: Sagacity, desk: Desk) -> ApprovalRequest:
    """Run the first turn in a session whose id is the saga id, up to the confirmation."""
    await desk.new_session(SAGA)
    result = await sagacity.asaga(SAGA, lambda: desk.turn(SAGA, "pay ACME"))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    (request,) = result.pending
    return request


def decided(request: ApprovalRequest, outcome: DecisionOutcome, reason: str | None) -> Decision:
    """The decision a worker reads from the journal, for `request`."""
    return Decision(
        saga_id=request.saga_id,
        request_id=request.request_id,
        call_id=request.call_id,
        tool=request.tool_name,
        outcome=outcome,
        decided_by="alice",
        decided_at=datetime.datetime.now(datetime.UTC),
        seq=None,
        input=request.input,
        input_sha256=request.input_sha256,
        approvers=("alice",) if outcome is DecisionOutcome.APPROVED else (),
        reason=reason,
        resumer=RESUMER,
    )


class TestPauseNamesTheResumer:
    async def test_the_request_journals_the_adk_resumer(self, sagacity: Sagacity) -> None:
        """The AWAITING_APPROVAL entry names "adk": a worker picks `AdkResumer` by it."""
        desk = wire_desk(sagacity, Orders())
        await pause(sagacity, desk)

        awaiting = sagacity.history(SAGA)[-1]
        assert awaiting.phase.value == "AWAITING_APPROVAL"
        assert awaiting.payload["resumer"] == RESUMER == "adk"


class TestResume:
    async def test_an_approval_runs_the_wire_once_in_the_paused_session(
        self, sagacity: Sagacity
    ) -> None:
        """Called as the worker calls it (the work of `aresume_saga`): COMPLETED, one wire."""
        orders = Orders()
        desk = wire_desk(sagacity, orders)
        request = await pause(sagacity, desk)
        sagacity.approve(SAGA, approver="alice")
        resumer = AdkResumer(desk.runner, user_id=USER)

        decision = decided(request, DecisionOutcome.APPROVED, None)
        result = await sagacity.aresume_saga(SAGA, lambda: resumer(decision))

        assert result.outcome is SagaOutcome.COMPLETED
        assert final_text(result.value) == "done"
        assert orders.log == ["reserve SKU-1 x1", "wire 900.00 to ACME"]

    async def test_a_decision_without_sagacitys_approval_runs_nothing(
        self, sagacity: Sagacity
    ) -> None:
        """A forged APPROVED decision: ADK is told yes, sagacity's check refuses the wire."""
        orders = Orders()
        desk = wire_desk(sagacity, orders)
        request = await pause(sagacity, desk)
        resumer = AdkResumer(desk.runner, user_id=USER)

        decision = decided(request, DecisionOutcome.APPROVED, None)
        with pytest.raises(ApprovalMissingError, match="no approval is journaled"):
            await sagacity.aresume_saga(SAGA, lambda: resumer(decision))

        assert orders.calls["send_wire_transfer"] == 0

    async def test_a_rejection_after_the_saga_ended_tells_the_model_and_runs_nothing(
        self, sagacity: Sagacity
    ) -> None:
        """`Sagacity.reject` compensated the saga; the resumer then gives ADK its "no".

        It runs outside any saga: ADK tells the model the call was rejected, the wire
        never runs, and nothing more is journaled.
        """
        orders = Orders()
        desk = wire_desk(sagacity, orders)
        request = await pause(sagacity, desk)
        rejected = sagacity.reject(SAGA, approver="bob", reason="wrong supplier")
        assert rejected.outcome is SagaOutcome.COMPENSATED
        before = phases(sagacity.history(SAGA))
        resumer = AdkResumer(desk.runner, user_id=USER)

        events = await resumer(decided(request, DecisionOutcome.REJECTED, "wrong supplier"))

        responses = [
            response.response
            for event in events
            for response in event.get_function_responses()
            if response.id == "call-2"
        ]
        assert responses == [{"error": "This tool call is rejected."}]
        assert orders.log == ["reserve SKU-1 x1", "release res-SKU-1-1"]
        assert phases(sagacity.history(SAGA)) == before

    async def test_a_rejection_told_in_a_replay_of_the_ended_saga_journals_nothing(
        self, sagacity: Sagacity
    ) -> None:
        """As a worker tells a run rejected elsewhere: inside a replay of the ended saga.

        ADK tells the model no, nothing runs, the saga's outcome stays COMPENSATED and the
        result says it was a replay.
        """
        orders = Orders()
        desk = wire_desk(sagacity, orders)
        request = await pause(sagacity, desk)
        sagacity.reject(SAGA, approver="bob", reason="wrong supplier")
        before = phases(sagacity.history(SAGA))
        resumer = AdkResumer(desk.runner, user_id=USER)
        decision = decided(request, DecisionOutcome.REJECTED, "wrong supplier")

        result = await sagacity.aresume_saga(SAGA, lambda: resumer(decision))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.replayed is True
        assert orders.calls["send_wire_transfer"] == 0
        assert phases(sagacity.history(SAGA)) == before

    async def test_a_call_run_elsewhere_is_replayed_when_adk_resumes(
        self, sagacity: Sagacity
    ) -> None:
        """Approved and run by `resume_saga` without work; ADK's own resume then replays it.

        The session's confirmation is answered with the journaled result: the wire ran once.
        """
        orders = Orders()
        desk = wire_desk(sagacity, orders)
        request = await pause(sagacity, desk)
        sagacity.approve(SAGA, approver="alice")
        elsewhere = await sagacity.aresume_saga(SAGA)
        assert elsewhere.outcome is SagaOutcome.COMPLETED
        resumer = AdkResumer(desk.runner, user_id=USER)
        decision = decided(request, DecisionOutcome.APPROVED, None)

        result = await sagacity.aresume_saga(SAGA, lambda: resumer(decision))

        assert result.outcome is SagaOutcome.COMPLETED
        assert result.replayed is True
        assert orders.calls["send_wire_transfer"] == 1
        responses = [
            response.response
            for event in result.value
            for response in event.get_function_responses()
            if response.id == "call-2"
        ]
        assert responses == [{"result": "wire-900.00-ACME"}]

    async def test_an_unknown_session_is_named(self, sagacity: Sagacity) -> None:
        """A decision whose session the runner does not have: an error naming saga and session."""
        desk = wire_desk(sagacity, Orders())
        request = await pause(sagacity, desk)
        resumer = AdkResumer(desk.runner, session=lambda decision: (USER, "elsewhere"))

        with pytest.raises(SagaNotFoundError, match="no session 'elsewhere'"):
            await resumer(decided(request, DecisionOutcome.APPROVED, None))


class TestWorker:
    def test_a_worker_resumes_the_approved_session_once(self, shared_store_url: str) -> None:
        """`Worker` with {"adk": AdkResumer}: the approved wire runs once; a second pass idles."""
        orders = Orders()
        with Sagacity.from_url(shared_store_url) as sagacity:
            desk = wire_desk(sagacity, orders)
            asyncio.run(pause(sagacity, desk))
            sagacity.approve(SAGA, approver="alice")
            worker = Worker(sagacity, {RESUMER: AdkResumer(desk.runner, user_id=USER)})

            assert worker.run_once() == 1
            assert worker.run_once() == 0

            assert orders.log == ["reserve SKU-1 x1", "wire 900.00 to ACME"]
            assert phases(sagacity.history(SAGA))[-1] == ("ENDED", None, None)
            assert sagacity.history(SAGA)[-1].payload["outcome"] == "COMPLETED"
