"""A DBOS workflow as a saga: calls journaled as steps, failures compensated in reverse."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from dbos import DBOS, SetWorkflowID

from sagacity import Sagacity
from sagacity.audit import verify
from sagacity.integrations.dbos import DecisionRelay, SagaEndedError, SagaSteps
from tests._shop import Shop
from tests.integrations.dbos._workflows import STEPS, order_workflow, swallowing_workflow


@pytest.fixture
def steps_key(dbos_schema: str) -> Iterator[str]:
    key = uuid.uuid4().hex[:8]
    yield key
    STEPS.pop(key, None)


def start(key: str, sagacity: Sagacity, shop: Shop) -> str:
    STEPS[key] = SagaSteps(sagacity, [shop])
    return f"order-{uuid.uuid4().hex[:10]}"


def order(sid: str, **more: Any) -> dict[str, Any]:
    return {"order_id": sid, "sku": "A-1", "amount": "40.00", **more}


@contextlib.contextmanager
def relaying(sagacity: Sagacity) -> Iterator[None]:
    relay = DecisionRelay(sagacity, poll_interval=0.05)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        relay.close()
        thread.join(10)


def asked(human: Sagacity, sid: str) -> None:
    deadline = time.monotonic() + 30
    while not human.pending(sid):
        assert time.monotonic() < deadline, f"saga {sid} never asked for approval"
        time.sleep(0.05)  # the request store, read as a human's page refresh would


def test_a_workflow_that_returns_completes_its_saga(steps_key: str, sagacity: Sagacity) -> None:
    shop = Shop()
    sid = start(steps_key, sagacity, shop)
    with SetWorkflowID(sid):
        done = order_workflow(steps_key, order(sid, ship=True))
    assert done == ["res-A-1-2", "ch-40.00", f"sh-{sid}"]
    entries = sagacity.history(sid)
    calls = [(e.phase.value, e.call_id) for e in entries if e.call_id]
    assert [phase for phase, _ in calls] == ["INTENT", "EXECUTED"] * 3
    # Each call's id is its tool and the function id of its step in the workflow.
    call_steps = [
        s["function_id"]
        for s in DBOS.list_workflow_steps(sid)
        if s["function_name"] == "sagacity.call"
    ]
    tools = ["reserve_inventory", "charge_card", "ship"]
    assert [call for _, call in calls[::2]] == [
        f"{tool}-{n}" for tool, n in zip(tools, call_steps, strict=True)
    ]
    assert entries[-1].payload["outcome"] == "COMPLETED"
    assert verify(sagacity.journal, sid).ok


def test_a_failed_call_fails_the_workflow_and_compensates_in_reverse(
    steps_key: str, sagacity: Sagacity
) -> None:
    shop = Shop(ship_fails=True)
    sid = start(steps_key, sagacity, shop)
    with SetWorkflowID(sid), pytest.raises(RuntimeError, match="courier down"):
        order_workflow(steps_key, order(sid, ship=True))
    assert shop.log == ["reserve A-1", "charge 40.00", "refund ch-40.00", "release res-A-1-2"]
    assert shop.calls["ship"] == 1  # a tool's failure is not retried by DBOS
    assert sagacity.history(sid)[-1].payload["outcome"] == "COMPENSATED"


def test_a_failure_the_workflow_swallows_still_compensates(
    steps_key: str, sagacity: Sagacity
) -> None:
    shop = Shop(ship_fails=True)
    sid = start(steps_key, sagacity, shop)
    with SetWorkflowID(sid), pytest.raises(SagaEndedError) as ended:
        swallowing_workflow(steps_key, order(sid))
    assert ended.value.outcome == "COMPENSATED"
    assert shop.log == ["reserve A-1", "release res-A-1-1"]


def test_an_approval_sent_to_the_waiting_workflow_runs_the_wire_once(
    steps_key: str, shared_store_url: str
) -> None:
    shop = Shop()
    with (
        Sagacity.from_url(shared_store_url) as worker_side,
        Sagacity.from_url(shared_store_url) as human,
        relaying(worker_side),
    ):
        sid = start(steps_key, worker_side, shop)
        # The workflow would ask the journal only after an hour: the relay wakes it.
        with SetWorkflowID(sid):
            handle = DBOS.start_workflow(
                order_workflow, steps_key, order(sid, wire_to="ACME", poll=3600)
            )
        asked(human, sid)
        assert shop.calls["send_wire_transfer"] == 0
        human.approve(sid, approver="alice")
        assert handle.get_result() == ["res-A-1-2", "ch-40.00", "wire-40.00-ACME"]
        phases = [(e.phase.value, e.tool_name) for e in worker_side.history(sid)]
    assert shop.calls["send_wire_transfer"] == 1
    assert phases.index(("APPROVED", "send_wire_transfer")) < phases.index(
        ("INTENT", "send_wire_transfer")
    )


def test_a_rejection_ends_the_workflow_compensated(steps_key: str, shared_store_url: str) -> None:
    shop = Shop()
    with (
        Sagacity.from_url(shared_store_url) as worker_side,
        Sagacity.from_url(shared_store_url) as human,
        relaying(worker_side),
    ):
        sid = start(steps_key, worker_side, shop)
        with SetWorkflowID(sid):
            handle = DBOS.start_workflow(
                order_workflow, steps_key, order(sid, wire_to="ACME", poll=3600)
            )
        asked(human, sid)
        human.reject(sid, approver="alice", reason="wrong payee")
        with pytest.raises(SagaEndedError) as ended:
            handle.get_result()
        outcome = worker_side.history(sid)[-1].payload["outcome"]
    assert ended.value.outcome == "rejected"
    assert shop.calls["send_wire_transfer"] == 0
    assert shop.log == ["reserve A-1", "charge 40.00", "refund ch-40.00", "release res-A-1-2"]
    assert outcome == "COMPENSATED"
