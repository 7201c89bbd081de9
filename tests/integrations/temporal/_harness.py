"""Running the test workflows against the dev server: a client, a worker, a saga."""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from sagacity import Sagacity
from sagacity.integrations.temporal import SagaActivities
from tests.integrations.temporal._workflows import OrderWorkflow, SwallowingWorkflow

WORKFLOWS: Sequence[type] = (OrderWorkflow, SwallowingWorkflow)

# The sandbox re-imports workflow modules per run; sagacity and the tests' own modules
# are passed through, as an application's would be.
RUNNER = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules("sagacity", "tests")
)


@contextlib.asynccontextmanager
async def running_worker(
    client: Client, sagacity: Sagacity, *tools: object, task_queue: str | None = None
) -> AsyncIterator[str]:
    """A worker with the test workflows and `tools` as activities; yields its task queue."""
    queue = task_queue or f"q-{uuid.uuid4().hex[:8]}"
    executor = concurrent.futures.ThreadPoolExecutor(8)
    try:
        async with Worker(
            client,
            task_queue=queue,
            workflows=list(WORKFLOWS),
            activities=SagaActivities(sagacity, tools).all,
            activity_executor=executor,
            workflow_runner=RUNNER,
        ):
            yield queue
    finally:
        executor.shutdown(wait=True)


def saga_id() -> str:
    return f"order-{uuid.uuid4().hex[:10]}"


async def run(client: Client, queue: str, workflow: Any, arg: Any, *, id: str) -> Any:
    return await client.execute_workflow(workflow, arg, id=id, task_queue=queue)
