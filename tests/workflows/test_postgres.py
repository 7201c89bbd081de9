"""The refund workflow's main paths on PostgreSQL: two workers sharing one database."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from sagacity import Sagacity, verify
from sagacity.workflows import WorkflowRuntime, WorkflowStatus
from tests._postgres import postgres_url_for
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to a fresh schema, dropped after the test."""
    yield from postgres_url_for(request)


@pytest.fixture
def workers(pg_url: str) -> Iterator[tuple[Sagacity, Sagacity]]:
    """Two Sagacity instances on the one database, as two processes would have."""
    one, other = Sagacity.from_url(pg_url), Sagacity.from_url(pg_url)
    yield one, other
    one.close()
    other.close()


def test_paused_on_one_worker_approved_and_finished_on_another(
    workers: tuple[Sagacity, Sagacity], tmp_path: Path
) -> None:
    """Start pauses at the gate; another worker approves and completes it; the chain verifies."""
    one, other = workers
    ledger = Ledger(tmp_path / "ledger.txt")
    first = WorkflowRuntime(one, [RefundWorkflow(ledger)])
    second = WorkflowRuntime(other, [RefundWorkflow(ledger)])
    gate = first.start("refund-request", REQUEST, run_id="pg-1").gate
    assert gate is not None
    assert second.pending_gates() == [gate]
    second.approve_gate("pg-1", "wire", "alice", sha256=gate.input_sha256)
    done = second.resume("pg-1")
    assert done.status is WorkflowStatus.COMPLETED
    assert first.get("pg-1") == done
    assert ledger.lines() == [
        "reserve A-17 120.00",
        "wire 120.00 to DE89370400440532013000",
        "notify wire-A-17",
    ]
    assert verify(one.journal, "pg-1").ok
    assert [h.run_id for h in first.list(status="COMPLETED")] == ["pg-1"]


def test_rejected_and_check_failed_runs_compensate(
    workers: tuple[Sagacity, Sagacity], tmp_path: Path
) -> None:
    """A rejection and a failed budget check each release the reservation, on PostgreSQL."""
    one, other = workers
    ledger = Ledger(tmp_path / "ledger.txt")
    runtime = WorkflowRuntime(one, [RefundWorkflow(ledger)])
    runtime.start("refund-request", REQUEST, run_id="pg-2")
    rejected = WorkflowRuntime(other, [RefundWorkflow(ledger)]).reject_gate(
        "pg-2", "wire", "bob", "duplicate"
    )
    assert rejected.status is WorkflowStatus.COMPENSATED
    poor = WorkflowRuntime(other, [RefundWorkflow(ledger, budget=Decimal("1"))])
    assert poor.start("refund-request", REQUEST, run_id="pg-3").status is (
        WorkflowStatus.COMPENSATED
    )
    assert ledger.lines() == [
        "reserve A-17 120.00",
        "release res-A-17",
        "reserve A-17 120.00",
        "release res-A-17",
    ]
    assert verify(one.journal).ok
