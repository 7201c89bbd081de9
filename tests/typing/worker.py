"""Decisions and the worker as users type-check them (`mypy --strict tests/typing`)."""

from __future__ import annotations

import asyncio

from sagacity import Decision, DecisionOutcome, Resumer, Sagacity, SagaResult, Worker
from sagacity.worker import DecisionEvents, WorkerHealth, pausing_as
from sagacity.workflows import WorkflowResumer


def resume_sync(decision: Decision) -> str:
    return decision.saga_id if decision.approved else decision.outcome.value


async def resume_async(decision: Decision) -> None:
    await asyncio.sleep(0)


class GraphResumer:
    def __call__(self, decision: Decision, /) -> object:
        return decision.input


def build(sagacity: Sagacity) -> Worker:
    one: Resumer = resume_sync
    named: dict[str, Resumer] = {
        "work": one,
        "langgraph": GraphResumer(),
        "pydantic_ai": resume_async,
        "workflow": WorkflowResumer(sagacity),
    }
    worker = Worker(sagacity, named, poll_interval=0.5, listen=None, health_file="h.json")
    health: WorkerHealth = worker.health
    assert health.state in ("starting", "running", "stopping", "stopped")
    return worker


def events(sagacity: Sagacity) -> DecisionOutcome:
    with DecisionEvents(sagacity, poll_interval=0.2) as reader:
        decision: Decision = reader.wait("order-1", timeout=5.0)
        for later in reader.follow(timeout=1.0):
            print(later.to_json()["outcome"])
    return decision.outcome


async def aevents(sagacity: Sagacity) -> Decision:
    with DecisionEvents(sagacity) as reader:
        async for decision in reader.afollow(timeout=1.0):
            print(decision.tool)
        return await reader.await_decision("order-1", request_id=None, timeout=2.0)


def named_pause(sagacity: Sagacity) -> SagaResult:
    with pausing_as("billing"):
        return sagacity.saga("order-2", lambda: None)


def run(worker: Worker) -> int:
    acted: int = worker.run_once()
    worker.run(handle_signals=False)
    worker.stop()
    return acted + int(worker.resume("order-3"))
