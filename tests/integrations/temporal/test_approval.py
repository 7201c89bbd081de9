"""An IRREVERSIBLE activity waits for the human's journaled decision, woken by a signal."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from sagacity import Sagacity
from tests._shop import Shop
from tests.integrations.temporal._agent_runs import EVICTION_NOISE, asked, relaying, waiting
from tests.integrations.temporal._harness import running_worker, saga_id
from tests.integrations.temporal._workflows import Order, OrderWorkflow


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address)


async def test_an_approval_signals_the_waiting_workflow_and_the_wire_runs_once(
    client: Client, shared_store_url: str
) -> None:
    shop, sid = Shop(), saga_id()
    with (
        Sagacity.from_url(shared_store_url) as worker_side,
        Sagacity.from_url(shared_store_url) as human,
    ):
        async with (
            running_worker(client, worker_side, shop) as queue,
            relaying(worker_side, client),
        ):
            # The workflow would ask the journal only after an hour: the signal wakes it.
            order = Order(sid, wire_to="ACME", poll_seconds=3600)
            handle = await client.start_workflow(OrderWorkflow.run, order, id=sid, task_queue=queue)
            await asyncio.wait_for(asked(human, sid), 30)
            assert shop.calls["send_wire_transfer"] == 0
            await asyncio.to_thread(human.approve, sid, approver="alice")
            done = await asyncio.wait_for(handle.result(), 30)
        assert done == ["res-A-1-2", "ch-40.00", "wire-40.00-ACME"]
        assert shop.calls["send_wire_transfer"] == 1
        phases = [(e.phase.value, e.call_id) for e in worker_side.history(sid)]
        assert phases.index(("APPROVED", "send_wire_transfer-3")) < phases.index(
            ("INTENT", "send_wire_transfer-3")
        )
        assert phases[-1][0] == "ENDED"


async def test_a_rejection_fails_the_workflow_and_compensates_once(
    client: Client, shared_store_url: str
) -> None:
    shop, sid = Shop(), saga_id()
    with (
        Sagacity.from_url(shared_store_url) as worker_side,
        Sagacity.from_url(shared_store_url) as human,
    ):
        async with (
            running_worker(client, worker_side, shop) as queue,
            relaying(worker_side, client),
        ):
            order = Order(sid, wire_to="ACME", poll_seconds=3600)
            handle = await client.start_workflow(OrderWorkflow.run, order, id=sid, task_queue=queue)
            await asyncio.wait_for(asked(human, sid), 30)
            await asyncio.to_thread(human.reject, sid, approver="alice", reason="wrong payee")
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 30)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.details[0]) == ("SagacitySagaEnded", "rejected")
        assert shop.calls["send_wire_transfer"] == 0
        assert shop.log == ["reserve A-1", "charge 40.00", "refund ch-40.00", "release res-A-1-2"]
        assert worker_side.history(sid)[-1].payload["outcome"] == "COMPENSATED"


async def test_an_edited_request_runs_the_approved_input(
    client: Client, shared_store_url: str
) -> None:
    shop, sid = Shop(), saga_id()
    with (
        Sagacity.from_url(shared_store_url) as worker_side,
        Sagacity.from_url(shared_store_url) as human,
    ):
        async with running_worker(client, worker_side, shop) as queue:
            order = Order(sid, wire_to="ACME", poll_seconds=0.1)
            handle = await client.start_workflow(OrderWorkflow.run, order, id=sid, task_queue=queue)
            await asyncio.wait_for(asked(human, sid), 30)
            await asyncio.to_thread(
                human.edit, sid, approver="bob", new_input={"amount": "35.00", "to": "ACME"}
            )
            await asyncio.to_thread(human.approve, sid, approver="alice")
            done = await asyncio.wait_for(handle.result(), 30)
        assert done[-1] == "wire-35.00-ACME"
        assert shop.log[-1] == "wire 35.00 to ACME"


@EVICTION_NOISE
async def test_a_worker_stopped_while_the_workflow_waits_ends_nothing(
    client: Client, shared_store_url: str
) -> None:
    """Its evicted workflow schedules no compensation: the next worker carries the saga on."""
    shop, sid = Shop(), saga_id()
    with (
        Sagacity.from_url(shared_store_url) as first,
        Sagacity.from_url(shared_store_url) as human,
    ):
        async with running_worker(client, first, shop) as queue:
            order = Order(sid, wire_to="ACME", poll_seconds=0.2)
            handle = await client.start_workflow(OrderWorkflow.run, order, id=sid, task_queue=queue)
            await asyncio.wait_for(asked(human, sid), 30)
            await asyncio.wait_for(waiting(handle), 30)
        # The worker stopped and evicted the waiting workflow: the saga is as it was.
        assert [e.phase.value for e in human.history(sid)][-1] == "AWAITING_APPROVAL"
        await asyncio.to_thread(human.approve, sid, approver="alice")
        with Sagacity.from_url(shared_store_url) as second:
            async with running_worker(client, second, shop, task_queue=queue):
                done = await asyncio.wait_for(handle.result(), 60)
        history = human.history(sid)
    phases = [e.phase.value for e in history]
    assert done == ["res-A-1-2", "ch-40.00", "wire-40.00-ACME"]
    assert shop.log == ["reserve A-1", "charge 40.00", "wire 40.00 to ACME"]
    assert not {"COMPENSATING", "COMPENSATED"} & set(phases)
    assert history[-1].payload["outcome"] == "COMPLETED"
