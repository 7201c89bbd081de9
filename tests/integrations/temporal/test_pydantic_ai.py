"""PydanticAI's durable agent on Temporal: its tool calls are journaled calls of the saga."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from pydantic_ai.exceptions import ToolFailed
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker

from sagacity import Sagacity
from sagacity.integrations.temporal import DecisionRelay, SagaActivities
from tests.integrations.temporal._harness import RUNNER
from tests.integrations.temporal._pydantic_agents import (
    DEPOT,
    TOOLS,
    Ask,
    DepotAgentWorkflow,
    SagalessAgentWorkflow,
)

# Stopping a worker evicts its cached workflow; Temporal's SDK lets the evicted coroutine
# be collected outside the workflow's event loop, which Python reports as unraisable.
EVICTION_NOISE = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
# An evicted workflow's coroutine may be collected during a later test of the file.
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
    executor = concurrent.futures.ThreadPoolExecutor(4)
    try:
        async with Worker(
            client,
            task_queue=queue,
            workflows=[DepotAgentWorkflow, SagalessAgentWorkflow],
            activities=SagaActivities(sagacity, []).all,
            activity_executor=executor,
            workflow_runner=RUNNER,
        ):
            yield
    finally:
        executor.shutdown(wait=True)


@contextlib.asynccontextmanager
async def relaying(sagacity: Sagacity, client: Client) -> AsyncIterator[None]:
    task = asyncio.create_task(DecisionRelay(sagacity, client, poll_interval=0.05).run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def waiting(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the workflow waits for the decision: a timer started, the call's activity done."""
    while True:
        async for event in handle.fetch_history_events():
            if event.HasField("timer_started_event_attributes"):
                return
        await asyncio.sleep(0.05)


def ids() -> tuple[str, str]:
    return f"depot-{uuid.uuid4().hex[:10]}", f"q-{uuid.uuid4().hex[:8]}"


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


async def asked(human: Sagacity, sid: str) -> None:
    while not await asyncio.to_thread(human.pending, sid):
        await asyncio.sleep(0.05)  # the request store, read as a human's page refresh would


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
