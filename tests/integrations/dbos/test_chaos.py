"""SIGKILL a DBOS process at every point of a saga, then let a new process recover it.

The order saga (reserve, charge, an approved IRREVERSIBLE wire) in a process killed at
one point; a second process launches DBOS on the same system schema, which recovers the
workflow. Whatever the point: every effect at most once, every undo at most once, the
wire only after APPROVED, and the journal verifies.
"""

from __future__ import annotations

import collections
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Sagacity
from sagacity.audit import verify
from tests._postgres import admin_connection, require_server
from tests.integrations._ledger import REFUND_KILLED, SCENARIOS
from tests.processes._kill import running_until

pytestmark = pytest.mark.slow

PROCESS = "tests.integrations.dbos._process"


@pytest.fixture
def system_schema() -> Iterator[str]:
    """A DBOS system schema for this test's processes alone."""
    require_server()
    schema = f"sagacity_dbos_{uuid.uuid4().hex[:10]}"
    yield schema
    with admin_connection() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def decide(url: str, saga_id: str, *, reject: bool, stop: threading.Event) -> None:
    """Approve (or reject) the saga's wire as soon as it is asked, from another Sagacity."""
    with Sagacity.from_url(url) as human:
        while not human.pending(saga_id):
            if stop.wait(0.05):  # polling the request store, as a human's page would
                return
        if reject:
            human.reject(saga_id, approver="alice", reason="no")
        else:
            human.approve(saga_id, approver="alice")


def run_with_a_kill(
    schema: str, url: str, tmp_path: Path, kill_at: str, *, reject: bool = False
) -> tuple[str, list[str]]:
    saga_id = f"order-{uuid.uuid4().hex[:8]}"
    effects = tmp_path / "effects.txt"
    effects.touch()
    stop = threading.Event()
    human = threading.Thread(
        target=decide, args=(url, saga_id), kwargs={"reject": reject, "stop": stop}
    )
    human.start()
    try:
        command = [sys.executable, "-m", PROCESS, schema, url, str(effects)]
        with running_until([*command, kill_at, saga_id, "start"], "ready") as first:
            assert first.wait(120) == -9, "the kill point was never reached"
        with running_until([*command, "-", saga_id], "ready") as second:
            assert second.stdout is not None
            line = second.stdout.readline()
            assert line.startswith("ended"), line
    finally:
        stop.set()
        human.join(30)
    with Sagacity.from_url(url) as sagacity:
        entries = sagacity.history(saga_id)
        assert verify(sagacity.journal, saga_id).ok
    assert entries[-1].phase.value == "ENDED"
    approved = [e.seq for e in entries if e.phase.value == "APPROVED"]
    wire = [
        e.seq for e in entries if e.tool_name == "send_wire_transfer" and e.phase.value == "INTENT"
    ]
    if wire:
        assert approved, "the wire ran with no approval"
        assert approved[0] < wire[0], "the wire ran before its approval"
    return str(entries[-1].payload["outcome"]), effects.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("kill_at", sorted(SCENARIOS))
def test_a_killed_process_never_runs_an_effect_twice(
    system_schema: str, sqlite_url: str, tmp_path: Path, kill_at: str
) -> None:
    outcome, effects = run_with_a_kill(system_schema, sqlite_url, tmp_path, kill_at)
    assert (outcome, effects) == SCENARIOS[kill_at]
    assert max(collections.Counter(effects).values()) == 1


def test_a_process_killed_inside_a_compensation_never_undoes_twice(
    system_schema: str, sqlite_url: str, tmp_path: Path
) -> None:
    outcome, effects = run_with_a_kill(
        system_schema, sqlite_url, tmp_path, "refund:during", reject=True
    )
    assert (outcome, effects) == REFUND_KILLED
