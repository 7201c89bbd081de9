"""The Server-Sent Events stream sees approval requests asked by other processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from sagacity import Sagacity
from sagacity.server import create_app
from tests.server._bank import ALICE, VIEWER, token_auth
from tests.server._live import live_server

ROOT = Path(__file__).resolve().parents[2]


def _events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """(event, data) pairs of an SSE stream; comment lines skipped."""
    name, data = None, None
    for line in lines:
        if line.startswith(":"):
            continue
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
        elif line == "" and name is not None:
            yield name, data
            name, data = None, None


def _ask_in_another_process(db_url: str, saga_id: str) -> None:
    script = textwrap.dedent(
        f"""
        from sagacity import Sagacity
        from tests.server._bank import Bank, start_wire
        sagacity = Sagacity.from_url({db_url!r})
        bank = Bank()
        sagacity.wrap(bank)
        print(start_wire(sagacity, bank, {saga_id!r}, amount="7").outcome.value)
        sagacity.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "AWAITING_APPROVAL"


def test_a_request_asked_by_another_process_is_streamed(db_url: str) -> None:
    """snapshot, then approval.requested for the other process's request, then updated."""
    served = Sagacity.from_url(db_url)
    try:
        app = create_app(served, token_auth(), ui=False, poll_interval=0.1)
        with (
            live_server(app) as base,
            httpx.Client(base_url=base, timeout=30) as client,
            client.stream("GET", "/sagacity/events", headers=VIEWER) as stream,
        ):
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = _events(stream.iter_lines())
            assert next(events) == ("snapshot", {"pending": []})
            _ask_in_another_process(db_url, "sse-1")
            name, data = next(events)
            assert name == "approval.requested"
            assert data["saga_id"] == "sse-1"
            assert data["input"] == {"amount": "7", "to": "acct-1"}
            approved = client.post(
                f"/sagacity/approvals/{data['request_id']}/approve",
                json={"sha256": data["input_sha256"]},
                headers=ALICE,
            )
            assert approved.status_code == 200, approved.text
            name, update = next(events)
            assert name == "approval.updated"
            assert update["state"] == "approved"
            assert [a["approver"] for a in update["approvals"]] == ["alice"]
    finally:
        served.close()
