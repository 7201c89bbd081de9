"""An approval asked in one process, given in a second and run in a third."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sagacity import Phase, Sagacity
from sagacity.audit import verify
from sagacity.journal import sha256_hex

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


def step(command: str, url: str, saga_id: str, log: Path) -> Any:
    """Run one step in a fresh Python process and return what it printed (JSON)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.postgres._worker", command, url, saga_id, str(log)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class TestApprovalAcrossProcesses:
    @pytest.mark.slow
    def test_asked_approved_and_resumed_in_three_processes(
        self, pg_url: str, tmp_path: Path
    ) -> None:
        """The wire runs once, in the third process, with the input the second approved."""
        log = tmp_path / "wires.jsonl"
        wire_input = {"amount": "250.00", "to": "acct-77"}

        outcome, request_id, input_sha = step("ask", pg_url, "refund-9", log)
        assert (outcome, input_sha) == ("AWAITING_APPROVAL", sha256_hex(wire_input))
        assert not log.exists()

        assert step("approve", pg_url, "refund-9", log) == ["APPROVED", 2]
        assert not log.exists()

        assert step("resume", pg_url, "refund-9", log) == ["COMPLETED", "wire-acct-77-250.00"]
        assert [json.loads(line) for line in log.read_text().splitlines()] == [wire_input]

        sagacity = Sagacity.from_url(pg_url)
        try:
            history = sagacity.history("refund-9")
            assert [e.phase for e in history] == [
                Phase.AWAITING_APPROVAL,
                Phase.APPROVED,
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.ENDED,
            ]
            approved = history[1]
            assert approved.payload == {
                "request_id": request_id,
                "approver": "alice@example.com",
                "input_sha256": input_sha,
                "via": "python",  # approved by the second process's own code
                "initiated_by": {"by": "code", "via": "work"},
            }
            assert history[2].payload == {
                "input": wire_input,
                "reversibility": "IRREVERSIBLE",
                "request_id": request_id,
            }
            assert sagacity.pending("refund-9") == []
            assert verify(sagacity.journal, "refund-9").ok
        finally:
            sagacity.close()
