"""A paused ADK run survives its process: paused, approved and resumed in three processes.

ADK's sessions are in its `DatabaseSessionService` on SQLite, the journal in sagacity's
database; a resume that dies after the wire ran replays the wire's journaled result
instead of wiring twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sagacity import Sagacity
from tests.integrations.adk._agents import phases

pytestmark = pytest.mark.slow


def step(*arguments: str) -> subprocess.CompletedProcess[str]:
    """Run one step of the saga in a new Python process (see `_restart.py`)."""
    return subprocess.run(
        [sys.executable, "-m", "tests.integrations.adk._restart", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[3],
        check=False,
    )


def summary(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The JSON line a step printed last."""
    assert done.returncode == 0, done.stderr
    parsed: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


class TestAcrossProcesses:
    def test_paused_approved_and_resumed_in_three_processes(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """The wire runs once, in the last process, from the confirmation ADK stored in the first.

        Each process has its own Sagacity, tools, agent and session service.
        """
        sessions = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
        effects = tmp_path / "effects.txt"
        common = (shared_store_url, sessions, "wire-p", str(effects))

        paused = summary(step("pause", *common))
        assert paused["outcome"] == "AWAITING_APPROVAL"
        with Sagacity.from_url(shared_store_url) as approver:
            (request,) = approver.pending("wire-p")
            approver.approve("wire-p", approver="alice", expected_sha256=request.input_sha256)
        resumed = summary(step("resume", *common, paused["session"]))

        assert resumed["outcome"] == "COMPLETED"
        assert effects.read_text().splitlines() == ["reserve SKU-1 x1", "wire 900.00 to ACME"]
        with Sagacity.from_url(shared_store_url) as reader:
            assert phases(reader.history("wire-p"))[2:] == [
                ("AWAITING_APPROVAL", "send_wire_transfer", "call-2"),
                ("APPROVED", "send_wire_transfer", "call-2"),
                ("INTENT", "send_wire_transfer", "call-2"),
                ("EXECUTED", "send_wire_transfer", "call-2"),
                ("ENDED", None, None),
            ]

    def test_a_resume_killed_after_the_wire_replays_it_instead_of_wiring_twice(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """The resuming process dies after the wire ran, before ADK saved its response.

        ADK's session still holds the unanswered confirmation, so the next resume runs the
        call again under its id: sagacity returns the journaled result, and the wire ran once.
        """
        sessions = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
        effects = tmp_path / "effects.txt"
        common = (shared_store_url, sessions, "wire-k", str(effects))
        paused = summary(step("pause", *common))
        with Sagacity.from_url(shared_store_url) as approver:
            approver.approve("wire-k", approver="alice")

        killed = step("resume", *common, paused["session"], "crash")
        assert killed.returncode == 9, killed.stderr
        assert effects.read_text().splitlines()[-1] == "wire 900.00 to ACME"
        resumed = summary(step("resume", *common, paused["session"]))

        assert resumed["outcome"] == "COMPLETED"
        assert effects.read_text().splitlines() == ["reserve SKU-1 x1", "wire 900.00 to ACME"]
        with Sagacity.from_url(shared_store_url) as reader:
            wire = [e.phase.value for e in reader.history("wire-k") if e.call_id == "call-2"]
        assert wire == ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"]
