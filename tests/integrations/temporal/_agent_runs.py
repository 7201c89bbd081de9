"""What the agent-on-Temporal tests share: a worker, the relay, and waits on the workflow."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity import Sagacity
from sagacity.integrations.temporal import DecisionRelay, SagaActivities
from tests.integrations.temporal._harness import RUNNER

# Stopping a worker evicts its cached workflow; Temporal's SDK lets the evicted coroutine
# be collected outside the workflow's event loop, which Python reports as unraisable. An
# evicted workflow's coroutine may be collected during a later test of the file, so the
# files mark every test with it.
EVICTION_NOISE = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@contextlib.asynccontextmanager
async def agent_worker(
    client: Client,
    sagacity: Sagacity,
    queue: str,
    workflows: Sequence[type],
    tools: Sequence[object] = (),
) -> AsyncIterator[None]:
    """A worker running `workflows` and sagacity's activities for `tools` on `queue`."""
    executor = concurrent.futures.ThreadPoolExecutor(4)
    try:
        async with Worker(
            client,
            task_queue=queue,
            workflows=list(workflows),
            activities=SagaActivities(sagacity, tools).all,
            activity_executor=executor,
            workflow_runner=RUNNER,
        ):
            yield
    finally:
        executor.shutdown(wait=True)


@contextlib.asynccontextmanager
async def relaying(sagacity: Sagacity, client: Client) -> AsyncIterator[None]:
    """A `DecisionRelay` running for the length of the block."""
    task = asyncio.create_task(DecisionRelay(sagacity, client, poll_interval=0.05).run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def asked(human: Sagacity, sid: str) -> None:
    """Until the saga's request is in the store."""
    while not await asyncio.to_thread(human.pending, sid):
        await asyncio.sleep(0.05)  # the request store, read as a human's page refresh would


async def waiting(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the workflow waits for the decision: a timer started, the call's activity done."""
    while True:
        async for event in handle.fetch_history_events():
            if event.HasField("timer_started_event_attributes"):
                return
        await asyncio.sleep(0.05)


def ids(prefix: str) -> tuple[str, str]:
    """A fresh saga id starting with `prefix`, and a fresh task queue."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}", f"q-{uuid.uuid4().hex[:8]}"


def sagacity_cause(error: BaseException | None) -> Any:
    """The first of `error`'s causes that is one of sagacity's application errors."""
    while error is not None and not (
        isinstance(error, ApplicationError) and str(error.type).startswith("Sagacity")
    ):
        error = error.__cause__ or getattr(error, "cause", None)
    return error
