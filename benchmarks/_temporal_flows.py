"""The Temporal side of `bench_engines`: a bare workflow and a saga workflow, timed in turns."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import time
import uuid

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from benchmarks.bench_postgres import reserve_inventory
from sagacity import Sagacity
from sagacity.integrations.temporal import SagaActivities, TemporalSaga

_TIMEOUT = datetime.timedelta(seconds=30)


@activity.defn(name="bare_reserve")
def bare_reserve(sku: str, qty: int) -> str:
    return f"res-{sku}-{qty}"


@workflow.defn
class BareFlow:
    @workflow.run
    async def run(self, calls: int) -> None:
        for n in range(calls):
            await workflow.execute_activity(
                bare_reserve, args=["SKU-1", n], start_to_close_timeout=_TIMEOUT
            )


@workflow.defn
class SagaFlow:
    @workflow.run
    async def run(self, calls: int) -> None:
        async with TemporalSaga(start_to_close_timeout=_TIMEOUT) as saga:
            for n in range(calls):
                await saga.call("reserve_inventory", sku="SKU-1", qty=n)


async def measure(
    address: str, sagacity: Sagacity, calls: int, rounds: int
) -> list[tuple[float, float]]:
    """(bare, journaled) seconds per call, one pair per round, the two taking turns."""
    for _ in range(600):  # the dev server answers once its frontend is healthy
        try:
            client = await Client.connect(address)
            await client.service_client.check_health()
            break
        except RuntimeError:
            await asyncio.sleep(0.1)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    activities = [bare_reserve, *SagaActivities(sagacity, [reserve_inventory]).all]

    async def timed(flow: object) -> float:
        started = time.perf_counter()
        await client.execute_workflow(
            flow,
            calls,
            id=f"bench-{uuid.uuid4().hex}",
            task_queue=queue,  # type: ignore[call-overload]
        )
        return (time.perf_counter() - started) / calls

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        async with Worker(
            client,
            task_queue=queue,
            workflows=[BareFlow, SagaFlow],
            activities=activities,
            activity_executor=pool,
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            await timed(BareFlow.run), await timed(SagaFlow.run)  # warm both
            return [(await timed(BareFlow.run), await timed(SagaFlow.run)) for _ in range(rounds)]
