"""SIGKILL a Temporal worker at every point of a saga, then let a new worker finish it.

Three activities (reserve, charge, an IRREVERSIBLE wire) and the compensation walk; a
worker process is killed at one point, a second worker takes over. Whatever the point:
every effect at most once, every undo at most once, the wire only after APPROVED, and the
journal verifies. A kill before the call journaled anything is retried cleanly; one
after EXECUTED replays; one between INTENT and EXECUTED leaves the call in doubt, never
run again, and the saga ends NEEDS_ATTENTION with the rest compensated.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

from sagacity import Sagacity
from sagacity.audit import verify
from tests.integrations._ledger import REFUND_KILLED, SCENARIOS
from tests.integrations.temporal._workflows import Order, OrderWorkflow
from tests.processes._kill import running_until

pytestmark = pytest.mark.slow

WORKER = "tests.integrations.temporal._worker_process"


async def decide(url: str, saga_id: str, *, reject: bool) -> None:
    """Approve (or reject) the saga's wire as soon as it is asked, from another Sagacity."""
    with Sagacity.from_url(url) as human:
        while not await asyncio.to_thread(human.pending, saga_id):
            await asyncio.sleep(0.05)  # polling the request store: a human's refresh
        if reject:
            await asyncio.to_thread(human.reject, saga_id, approver="alice", reason="no")
        else:
            await asyncio.to_thread(human.approve, saga_id, approver="alice")


def worker(address: str, url: str, queue: str, effects: Path, kill_at: str) -> list[str]:
    return [sys.executable, "-m", WORKER, address, url, queue, str(effects), kill_at]


async def run_with_a_kill(
    address: str, url: str, tmp_path: Path, kill_at: str, *, reject: bool = False
) -> tuple[str, list[str]]:
    """Run the order saga, killing the first worker at `kill_at`; return the outcome, effects."""
    client = await Client.connect(address)
    saga_id, queue = f"order-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:8]}"
    effects = tmp_path / "effects.txt"
    effects.touch()
    order = Order(saga_id, wire_to="ACME", poll_seconds=0.2, timeout_seconds=3)
    deciding = asyncio.create_task(decide(url, saga_id, reject=reject))
    handle = await client.start_workflow(OrderWorkflow.run, order, id=saga_id, task_queue=queue)
    with running_until(worker(address, url, queue, effects, kill_at), "ready") as first:
        assert await asyncio.to_thread(first.wait, 120) == -9, "the kill point was never reached"
    with (
        running_until(worker(address, url, queue, effects, "-"), "ready"),
        contextlib.suppress(WorkflowFailureError),  # the outcome is read from the journal
    ):
        await asyncio.wait_for(handle.result(), 120)
    deciding.cancel()  # a saga that went in doubt before its wire never asks
    with contextlib.suppress(asyncio.CancelledError):
        await deciding
    with Sagacity.from_url(url) as sagacity:
        entries = sagacity.history(saga_id)
        assert verify(sagacity.journal, saga_id).ok
    ended = entries[-1]
    assert ended.phase.value == "ENDED"
    wire = [
        e.seq
        for e in entries
        if e.tool_name == "send_wire_transfer"
        and e.phase.value == "INTENT"
        and e.payload.get("request_id")
    ]
    approved = [e.seq for e in entries if e.phase.value == "APPROVED"]
    if wire:
        assert approved, "the wire ran with no approval"
        assert approved[0] < wire[0], "the wire ran before its approval"
    return str(ended.payload["outcome"]), effects.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("kill_at", sorted(SCENARIOS))
async def test_a_killed_worker_never_runs_an_effect_twice(
    temporal_address: str, sqlite_url: str, tmp_path: Path, kill_at: str
) -> None:
    outcome, effects = await run_with_a_kill(temporal_address, sqlite_url, tmp_path, kill_at)
    assert (outcome, effects) == SCENARIOS[kill_at]
    assert max(collections.Counter(effects).values()) == 1


async def test_a_worker_killed_inside_a_compensation_never_undoes_twice(
    temporal_address: str, sqlite_url: str, tmp_path: Path
) -> None:
    outcome, effects = await run_with_a_kill(
        temporal_address, sqlite_url, tmp_path, "refund:during", reject=True
    )
    assert (outcome, effects) == REFUND_KILLED
