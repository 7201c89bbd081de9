"""A worker shut down mid-tool: Temporal raises its cancellation into the tool's thread."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from temporalio.client import Client, WorkflowFailureError

from sagacity import CompensationContext, Sagacity, compensable, compensation
from tests.integrations.temporal._harness import running_worker, saga_id
from tests.integrations.temporal._workflows import Order, OrderWorkflow

# Stopping a worker evicts its cached workflow; Temporal's SDK lets the evicted coroutine
# be collected outside the workflow's event loop, which Python reports as unraisable.
EVICTION_NOISE = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class SlowStock:
    """Reserving stock runs until Temporal interrupts it; charging is instant."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.log: list[str] = []

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        self.started.set()
        self.log.append(f"reserve {sku}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # a long call to a warehouse, mid-effect
            time.sleep(0.01)
        return f"res-{sku}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(by="refund")
    def charge_card(self, amount: str, card: str) -> str:
        self.log.append(f"charge {amount}")
        return f"ch-{amount}"

    @compensation
    def refund(self) -> None:
        self.log.append("refund")


@EVICTION_NOISE
async def test_a_tool_cancelled_by_its_worker_shutting_down_is_in_doubt_not_failed(
    temporal_address: str, shared_store_url: str
) -> None:
    """The interrupted call may have acted: in doubt, never undone as if it had not run."""
    client = await Client.connect(temporal_address)
    stock, sid = SlowStock(), saga_id()
    with Sagacity.from_url(shared_store_url) as first:
        async with running_worker(client, first, stock) as queue:
            handle = await client.start_workflow(
                OrderWorkflow.run, Order(sid, timeout_seconds=5), id=sid, task_queue=queue
            )
            assert await asyncio.to_thread(stock.started.wait, 30)
        # The worker shut down (no grace): the tool was interrupted mid-call.
        failed = [e for e in first.history(sid) if e.phase.value == "FAILED"]
        assert [(e.call_id, e.payload["kind"]) for e in failed] == [
            ("reserve_inventory-1", "outcome_unknown")
        ]
        with Sagacity.from_url(shared_store_url) as second:
            async with running_worker(client, second, stock, task_queue=queue):
                with pytest.raises(WorkflowFailureError):
                    await asyncio.wait_for(handle.result(), 60)
            ended = second.history(sid)[-1]
    assert ended.payload["outcome"] == "NEEDS_ATTENTION"
    assert stock.log == ["reserve A-1"]  # never run again, never undone blindly, no charge
