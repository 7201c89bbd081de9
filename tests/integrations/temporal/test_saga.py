"""A Temporal workflow as a saga: its calls journaled, its failures compensated in reverse."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from sagacity import Sagacity
from sagacity.audit import verify
from tests._shop import Shop
from tests.integrations.temporal._harness import run, running_worker, saga_id
from tests.integrations.temporal._workflows import Order, OrderWorkflow, SwallowingWorkflow


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address)


async def test_a_workflow_that_returns_completes_its_saga(
    client: Client, sagacity: Sagacity
) -> None:
    shop, sid = Shop(), saga_id()
    async with running_worker(client, sagacity, shop) as queue:
        done = await run(client, queue, OrderWorkflow.run, Order(sid, ship=True), id=sid)
    assert done == ["res-A-1-2", "ch-40.00", f"sh-{sid}"]
    entries = sagacity.history(sid)
    assert [(e.phase.value, e.call_id) for e in entries if e.call_id] == [
        ("INTENT", "reserve_inventory-1"),
        ("EXECUTED", "reserve_inventory-1"),
        ("INTENT", "charge_card-2"),
        ("EXECUTED", "charge_card-2"),
        ("INTENT", "ship-3"),
        ("EXECUTED", "ship-3"),
    ]
    assert entries[-1].phase.value == "ENDED"
    assert entries[-1].payload["outcome"] == "COMPLETED"
    assert verify(sagacity.journal, sid).ok


async def test_a_failed_call_fails_the_workflow_and_compensates_in_reverse(
    client: Client, sagacity: Sagacity
) -> None:
    shop, sid = Shop(ship_fails=True), saga_id()
    async with running_worker(client, sagacity, shop) as queue:
        with pytest.raises(WorkflowFailureError):
            await run(client, queue, OrderWorkflow.run, Order(sid, ship=True), id=sid)
    assert shop.log == ["reserve A-1", "charge 40.00", "refund ch-40.00", "release res-A-1-2"]
    assert shop.calls["ship"] == 1  # a failed call is not retried by Temporal
    ended = sagacity.history(sid)[-1]
    assert (ended.phase.value, ended.payload["outcome"]) == ("ENDED", "COMPENSATED")


async def test_a_failure_the_workflow_swallows_still_compensates(
    client: Client, sagacity: Sagacity
) -> None:
    shop, sid = Shop(ship_fails=True), saga_id()
    async with running_worker(client, sagacity, shop) as queue:
        with pytest.raises(WorkflowFailureError) as failed:
            await run(client, queue, SwallowingWorkflow.run, Order(sid), id=sid)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.details[0]) == ("SagacitySagaEnded", "COMPENSATED")
    assert shop.log == ["reserve A-1", "release res-A-1-1"]
    assert sagacity.history(sid)[-1].payload["outcome"] == "COMPENSATED"


async def test_two_workers_with_their_own_sagacity_share_the_sagas(
    client: Client, shared_store_url: str
) -> None:
    """Two "machines": separate clients and Sagacity instances on one journal, one queue."""
    shops = [Shop(), Shop()]
    sagas = [saga_id() for _ in range(6)]
    other = await Client.connect(client.service_client.config.target_host)
    with Sagacity.from_url(shared_store_url) as one, Sagacity.from_url(shared_store_url) as two:
        async with (
            running_worker(client, one, shops[0]) as queue,
            running_worker(other, two, shops[1], task_queue=queue),
        ):
            results = await asyncio.gather(
                *(
                    run(client, queue, OrderWorkflow.run, Order(sid, ship=True), id=sid)
                    for sid in sagas
                )
            )
        for sid, done in zip(sagas, results, strict=True):
            assert done == ["res-A-1-2", "ch-40.00", f"sh-{sid}"]
            assert one.history(sid)[-1].payload["outcome"] == "COMPLETED"
            assert verify(one.journal, sid).ok
    # Each call ran once, on whichever worker took its activity.
    total = shops[0].calls + shops[1].calls
    assert dict(total) == {"reserve_inventory": 6, "charge_card": 6, "ship": 6}
