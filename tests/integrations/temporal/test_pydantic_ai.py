"""PydanticAI's durable agent on Temporal: its tool calls are journaled calls of the saga."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from pydantic_ai.exceptions import ToolFailed
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from sagacity import Sagacity
from tests.integrations.temporal._agent_runs import (
    EVICTION_NOISE,
    agent_worker,
    asked,
    relaying,
    waiting,
)
from tests.integrations.temporal._agent_runs import ids as fresh_ids
from tests.integrations.temporal._harness import RUNNER
from tests.integrations.temporal._pydantic_agents import (
    DEPOT,
    TOOLS,
    Ask,
    DepotAgentWorkflow,
    SagalessAgentWorkflow,
)

pytestmark = EVICTION_NOISE


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address, plugins=[PydanticAIPlugin()])


@contextlib.asynccontextmanager
async def worker(
    client: Client, sagacity: Sagacity, queue: str, *, bind: bool = True
) -> AsyncIterator[None]:
    if bind:
        TOOLS.bind(sagacity)
    async with agent_worker(client, sagacity, queue, [DepotAgentWorkflow, SagalessAgentWorkflow]):
        yield


def ids() -> tuple[str, str]:
    return fresh_ids("depot")


async def test_a_tool_failure_the_loop_swallows_fails_and_compensates_the_saga(
    client: Client, shared_store_url: str
) -> None:
    DEPOT.reset(ship_error=ToolFailed("the carrier is not answering"))
    sid, queue = ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, queue):
            with pytest.raises(WorkflowFailureError) as failed:
                await client.execute_workflow(
                    DepotAgentWorkflow.run, Ask("order"), id=sid, task_queue=queue
                )
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.details[0]) == ("SagacitySagaEnded", "COMPENSATED")
        assert DEPOT.log == ["reserve A-1 x2", "release res-A-1-2"]
        phases = [(e.phase.value, e.call_id) for e in sagacity.history(sid)]
        assert ("FAILED", "s1") in phases
        assert sagacity.history(sid)[-1].payload["outcome"] == "COMPENSATED"


async def test_a_tool_failure_the_loop_does_not_swallow_fails_the_workflow_compensated(
    client: Client, shared_store_url: str
) -> None:
    DEPOT.reset(ship_error=RuntimeError("courier down"))
    sid, queue = ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, queue):
            with pytest.raises(WorkflowFailureError):
                await client.execute_workflow(
                    DepotAgentWorkflow.run, Ask("order"), id=sid, task_queue=queue
                )
        assert DEPOT.log == ["reserve A-1 x2", "release res-A-1-2"]
        assert DEPOT.calls["ship"] == 1  # non-retryable: Temporal did not run it again
        assert sagacity.history(sid)[-1].payload["outcome"] == "COMPENSATED"


@EVICTION_NOISE
async def test_an_approval_pause_survives_a_worker_restart_and_the_wire_runs_once(
    client: Client, shared_store_url: str
) -> None:
    DEPOT.reset()
    sid, queue = ids()
    with Sagacity.from_url(shared_store_url) as first, Sagacity.from_url(shared_store_url) as human:
        async with worker(client, first, queue):
            handle = await client.start_workflow(
                DepotAgentWorkflow.run, Ask("wire", poll_seconds=0.2), id=sid, task_queue=queue
            )
            await asyncio.wait_for(asked(human, sid), 30)
            await asyncio.wait_for(waiting(handle), 30)
        # The first worker is gone; the workflow waits in Temporal, the request in the journal.
        await asyncio.to_thread(human.approve, sid, approver="alice")
        with Sagacity.from_url(shared_store_url) as second:
            async with worker(client, second, queue):
                output = await asyncio.wait_for(handle.result(), 60)
            phases = [(e.phase.value, e.call_id) for e in second.history(sid)]
    assert output == "wired: wire-900.00-ACME"
    assert DEPOT.calls["send_wire_transfer"] == 1
    assert phases.index(("APPROVED", "w1")) < phases.index(("INTENT", "w1"))
    assert phases[-1][0] == "ENDED"


async def test_a_rejected_request_ends_the_run_and_the_wire_never_runs(
    client: Client, shared_store_url: str
) -> None:
    DEPOT.reset()
    sid, queue = ids()
    with (
        Sagacity.from_url(shared_store_url) as sagacity,
        Sagacity.from_url(shared_store_url) as human,
    ):
        async with worker(client, sagacity, queue), relaying(sagacity, client):
            # The workflow would ask the journal only after an hour: the signal wakes it.
            handle = await client.start_workflow(
                DepotAgentWorkflow.run, Ask("wire", poll_seconds=3600), id=sid, task_queue=queue
            )
            await asyncio.wait_for(asked(human, sid), 30)
            await asyncio.wait_for(waiting(handle), 30)  # the call's activity let the saga go
            await asyncio.to_thread(human.reject, sid, approver="alice", reason="wrong payee")
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 30)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.details[0]) == ("SagacitySagaEnded", "rejected")
        assert DEPOT.calls["send_wire_transfer"] == 0
        assert sagacity.history(sid)[-1].payload["outcome"] == "COMPENSATED"


async def test_parallel_calls_of_one_saga_each_run_once_and_the_saga_completes(
    client: Client, shared_store_url: str
) -> None:
    DEPOT.reset()
    sid, queue = ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, queue):
            handle = await client.start_workflow(
                DepotAgentWorkflow.run, Ask("together"), id=sid, task_queue=queue
            )
            output = await handle.result()
        history = sagacity.history(sid)
        # Replaying the workflow's history schedules nothing and never touches the journal.
        replayer = Replayer(
            workflows=[DepotAgentWorkflow], plugins=[PydanticAIPlugin()], workflow_runner=RUNNER
        )
        await replayer.replay_workflow(await handle.fetch_history())
        assert sagacity.history(sid) == history
    assert output == "res-A-1-2 sh-o-1"
    assert (DEPOT.calls["reserve_inventory"], DEPOT.calls["ship"]) == (1, 1)
    executed = sorted(e.call_id or "" for e in history if e.phase.value == "EXECUTED")
    assert executed == ["r1", "s1"]
    assert history[-1].payload["outcome"] == "COMPLETED"


async def test_an_agent_run_outside_an_agent_saga_runs_no_tool(
    client: Client, shared_store_url: str
) -> None:
    DEPOT.reset()
    sid, queue = ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, queue):
            with pytest.raises(WorkflowFailureError) as failed:
                await client.execute_workflow(
                    SagalessAgentWorkflow.run, Ask("order"), id=sid, task_queue=queue
                )
        assert sagacity.history(sid) == []
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "SagacityNoSaga"
    assert "AgentSaga" in str(cause)
    assert DEPOT.calls == {}


async def test_a_worker_whose_toolset_is_not_bound_refuses_the_call_by_name(
    client: Client, shared_store_url: str
) -> None:
    DEPOT.reset()
    TOOLS.binding.sagacity = None
    sid, queue = ids()
    with Sagacity.from_url(shared_store_url) as sagacity:
        async with worker(client, sagacity, queue, bind=False):
            with pytest.raises(WorkflowFailureError) as failed:
                await client.execute_workflow(
                    DepotAgentWorkflow.run, Ask("order"), id=sid, task_queue=queue
                )
    cause = failed.value.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "ConfigurationError"
    assert "toolset 'depot': tool 'reserve_inventory'" in str(cause)
    assert "bind" in str(cause)
    assert DEPOT.calls == {}
