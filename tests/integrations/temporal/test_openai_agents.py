"""The OpenAI Agents SDK on Temporal (its plugin): tool calls are journaled calls of the saga.

Temporal's plugin (`temporalio-openai-agents`) pins `openai-agents<0.23`, which the dev
venv (0.24, the adapter's floor) cannot hold: `make test-openai-temporal` runs this file in
`.venv-openai-temporal`. Elsewhere it skips, naming where it runs.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("temporalio.openai_agents") is None:
    pytest.skip(
        "OpenAI Agents on Temporal NOT RUN in this venv (temporalio-openai-agents is not "
        "installed): `make test-openai-temporal` runs it in .venv-openai-temporal",
        allow_module_level=True,
    )

from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.openai_agents import OpenAIAgentsPlugin
from temporalio.worker import Replayer

from sagacity import Sagacity
from tests._shop import Shop
from tests.integrations.temporal._agent_runs import (
    EVICTION_NOISE,
    agent_worker,
    relaying,
    sagacity_cause,
    waiting,
)
from tests.integrations.temporal._agent_runs import ids as fresh_ids
from tests.integrations.temporal._harness import RUNNER
from tests.integrations.temporal._openai_agents_workflows import (
    Ask,
    SagalessShopAgentWorkflow,
    ScriptedProvider,
    ShopAgentWorkflow,
)

pytestmark = EVICTION_NOISE


@pytest.fixture
async def client(temporal_address: str) -> Client:
    plugin = OpenAIAgentsPlugin(model_provider=ScriptedProvider())
    return await Client.connect(temporal_address, plugins=[plugin])


def worker(client: Client, sagacity: Sagacity, shop: Shop, queue: str) -> Any:
    workflows = [ShopAgentWorkflow, SagalessShopAgentWorkflow]
    return agent_worker(client, sagacity, queue, workflows, [shop])


def ids() -> tuple[str, str]:
    return fresh_ids("shop")


def phases(sagacity: Sagacity, sid: str) -> list[tuple[str, str | None]]:
    return [(e.phase.value, e.call_id) for e in sagacity.history(sid)]


async def test_a_tool_failure_the_loop_swallows_fails_and_compensates_the_saga(
    client: Client, shared_store_url: str
) -> None:
    shop, (sid, queue) = Shop(ship_fails=True), ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, shop, queue):
            with pytest.raises(WorkflowFailureError) as failed:
                await client.execute_workflow(
                    ShopAgentWorkflow.run, Ask("order"), id=sid, task_queue=queue
                )
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.details[0]) == ("SagacitySagaEnded", "COMPENSATED")
        # The model was told of the failure and answered; the saga is undone all the same.
        assert shop.log == ["reserve A-1", "charge 40.00", "refund ch-40.00", "release res-A-1-2"]
        assert shop.calls["ship"] == 1
        assert ("FAILED", "ship-3") in phases(sagacity, sid)
        assert sagacity.history(sid)[-1].payload["outcome"] == "COMPENSATED"


@EVICTION_NOISE
async def test_an_approval_pause_survives_a_worker_restart_and_the_wire_runs_once(
    client: Client, shared_store_url: str
) -> None:
    shop, (sid, queue) = Shop(), ids()
    with Sagacity.from_url(shared_store_url) as first, Sagacity.from_url(shared_store_url) as human:
        async with worker(client, first, shop, queue):
            handle = await client.start_workflow(
                ShopAgentWorkflow.run, Ask("wire", poll_seconds=0.2), id=sid, task_queue=queue
            )
            while not await asyncio.to_thread(human.pending, sid):
                await asyncio.sleep(0.05)  # the request store, read as a page refresh would
            await asyncio.wait_for(waiting(handle), 30)
        # The first worker is gone; the workflow waits in Temporal, the request in the journal.
        assert shop.calls["send_wire_transfer"] == 0
        await asyncio.to_thread(human.approve, sid, approver="alice")
        with Sagacity.from_url(shared_store_url) as second:
            async with worker(client, second, shop, queue):
                output = await asyncio.wait_for(handle.result(), 60)
            journal = phases(second, sid)
    assert output == "wired: wire-900.00-ACME"
    assert shop.calls["send_wire_transfer"] == 1
    assert journal.index(("APPROVED", "send_wire_transfer-1")) < journal.index(
        ("INTENT", "send_wire_transfer-1")
    )
    assert journal[-1][0] == "ENDED"


async def test_a_rejection_ends_the_run_compensated_and_the_wire_never_runs(
    client: Client, shared_store_url: str
) -> None:
    shop, (sid, queue) = Shop(), ids()
    with (
        Sagacity.from_url(shared_store_url) as sagacity,
        Sagacity.from_url(shared_store_url) as human,
    ):
        async with worker(client, sagacity, shop, queue), relaying(sagacity, client):
            # The workflow would ask the journal only after an hour: the signal wakes it.
            handle = await client.start_workflow(
                ShopAgentWorkflow.run, Ask("wire", poll_seconds=3600), id=sid, task_queue=queue
            )
            while not await asyncio.to_thread(human.pending, sid):
                await asyncio.sleep(0.05)
            await asyncio.wait_for(waiting(handle), 30)  # the call's activity let the saga go
            await asyncio.to_thread(human.reject, sid, approver="alice", reason="wrong payee")
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 30)
        cause = sagacity_cause(failed.value)
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.details[0]) == ("SagacitySagaEnded", "rejected")
        assert shop.calls["send_wire_transfer"] == 0
        assert sagacity.history(sid)[-1].payload["outcome"] == "COMPENSATED"


async def test_an_agent_run_outside_an_agent_saga_runs_no_tool(
    client: Client, shared_store_url: str
) -> None:
    shop, (sid, queue) = Shop(), ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, shop, queue):
            with pytest.raises(WorkflowFailureError) as failed:
                await client.execute_workflow(
                    SagalessShopAgentWorkflow.run, Ask("order"), id=sid, task_queue=queue
                )
        assert sagacity.history(sid) == []
    cause = sagacity_cause(failed.value)
    assert isinstance(cause, ApplicationError)
    assert cause.type == "SagacityNoSaga"
    assert shop.calls == {}


async def test_parallel_calls_each_run_once_and_a_replay_touches_nothing(
    client: Client, shared_store_url: str
) -> None:
    shop, (sid, queue) = Shop(), ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, shop, queue):
            handle = await client.start_workflow(
                ShopAgentWorkflow.run, Ask("together"), id=sid, task_queue=queue
            )
            output = await handle.result()
        history = sagacity.history(sid)
        # Replaying the workflow's history schedules nothing and never touches the journal.
        replayer = Replayer(
            workflows=[ShopAgentWorkflow],
            plugins=[OpenAIAgentsPlugin(model_provider=ScriptedProvider())],
            workflow_runner=RUNNER,
        )
        await replayer.replay_workflow(await handle.fetch_history())
        assert sagacity.history(sid) == history
    assert output == "res-A-1-2 sh-o-1"
    assert (shop.calls["reserve_inventory"], shop.calls["ship"]) == (1, 1)
    executed = sorted(e.call_id or "" for e in history if e.phase.value == "EXECUTED")
    assert executed == ["reserve_inventory-1", "ship-2"]
    assert history[-1].payload["outcome"] == "COMPLETED"
