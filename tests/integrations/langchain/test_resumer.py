"""The LangGraph resumer: a worker process continues the paused graph when a decision lands.

The graph pauses on the wire transfer in this process (its thread kept in a SQLite
checkpointer); `sagacity worker` runs in another, with the same graph and
`LangGraphResumer`; the decision is made from a third (the CLI) or through the REST API.
The worker resumes the thread with `Command(resume=...)`: approved, the wire runs once in
the worker and the agent's final message names the transfer id; rejected, the hold is
released and the agent is told no.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import HumanMessage

from sagacity import Sagacity, SagaOutcome
from sagacity.audit import verify
from sagacity.integrations.langchain import RESUMER
from sagacity.server import create_app
from tests.integrations._bank import (
    WorkerProcess,
    approve_elsewhere,
    cli,
    ledger_lines,
    worker_process,
)
from tests.integrations.langchain._worker_app import CHECKPOINTS, HANG_FINAL, LEASE_TTL, bank_graph
from tests.server._bank import ALICE, token_auth

APP = "tests.integrations.langchain._worker_app:worker"
REQUEST = {"messages": [HumanMessage("Hold 250.00 on ACME-ops, then wire it to ACME.")]}


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SAGACITY_TEST_LEDGER", str(path))
    return path


@pytest.fixture(autouse=True)
def _close_checkpointers() -> Iterator[None]:
    """Each test's graphs close their checkpoint connections when it ends."""
    yield
    while Paused.opened:
        Paused.opened.pop().close()


class Paused:
    """The graph of this process, paused on the wire in saga (and thread) `saga_id`."""

    opened: ClassVar[list[sqlite3.Connection]] = []
    """The checkpointers' connections of the graphs made in this test, for it to close."""

    def __init__(self, sagacity: Sagacity, checkpoints: Path, saga_id: str) -> None:
        self.graph = bank_graph(sagacity, str(checkpoints))
        Paused.opened.append(self.graph.checkpointer.conn)
        self.config: Any = {"configurable": {"thread_id": saga_id}}
        result = sagacity.saga(saga_id, lambda: self.graph.invoke(REQUEST, self.config))
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        (self.request,) = result.pending

    def last_message(self) -> str:
        return str(self.graph.get_state(self.config).values["messages"][-1].content)


def phases(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None]]:
    return [(e.phase.name, e.call_id) for e in sagacity.history(saga_id)]


class TestApproved:
    def test_an_approval_from_the_cli_resumes_the_graph_in_the_worker(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """The worker resumes the thread: the wire runs once, the agent names its id."""
        checkpoints = tmp_path / "checkpoints.db"
        with Sagacity.from_url(sqlite_url) as sagacity:
            paused = Paused(sagacity, checkpoints, "lg-1")
            asked = sagacity.history("lg-1")[-1]
            assert asked.phase.name == "AWAITING_APPROVAL"
            assert asked.payload["resumer"] == RESUMER
            with worker_process(APP, sqlite_url, ledger, **{CHECKPOINTS: str(checkpoints)}) as w:
                approve_elsewhere("lg-1", sqlite_url, ledger)
                w.wait_for("saga 'lg-1': request")

            assert paused.last_message() == "The bank says: wt-250.00-ACME"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            assert phases(sagacity, "lg-1") == [
                ("INTENT", "call-h"),
                ("EXECUTED", "call-h"),
                ("AWAITING_APPROVAL", "call-w"),
                ("APPROVED", "call-w"),
                ("INTENT", "call-w"),
                ("EXECUTED", "call-w"),
                ("ENDED", None),
            ]
            assert sagacity.history("lg-1")[-1].payload["outcome"] == "COMPLETED"
            assert verify(sagacity.journal, saga_id="lg-1").ok

    def test_an_approval_through_the_rest_api_resumes_the_graph(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """Approved with `POST /sagacity/approvals/{id}/approve`: the worker resumes the graph."""
        checkpoints = tmp_path / "checkpoints.db"
        with Sagacity.from_url(sqlite_url) as sagacity:
            paused = Paused(sagacity, checkpoints, "lg-2")
            with worker_process(APP, sqlite_url, ledger, **{CHECKPOINTS: str(checkpoints)}) as w:
                with TestClient(create_app(sqlite_url, token_auth(), ui=False)) as api:
                    approved = api.post(
                        f"/sagacity/approvals/{paused.request.request_id}/approve",
                        json={"sha256": paused.request.input_sha256},
                        headers=ALICE,
                    )
                assert approved.status_code == 200, approved.text
                w.wait_for("saga 'lg-2': request")

            assert paused.last_message() == "The bank says: wt-250.00-ACME"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]


class TestRejected:
    def test_a_rejection_from_the_cli_releases_the_hold_and_tells_the_agent_no(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """Rejected with the CLI (no tools there): the worker undoes the hold and says no."""
        checkpoints = tmp_path / "checkpoints.db"
        with Sagacity.from_url(sqlite_url) as sagacity:
            paused = Paused(sagacity, checkpoints, "lg-3")
            with worker_process(APP, sqlite_url, ledger, **{CHECKPOINTS: str(checkpoints)}) as w:
                rejected = cli(
                    "reject", "lg-3", "--approver", "bob", "--reason", "not this week",
                    "--database", sqlite_url, ledger=ledger,
                )  # fmt: skip
                assert rejected.returncode in (0, 6), rejected.stderr
                w.wait_for("saga 'lg-3': request")

            assert paused.last_message() == (
                "The bank says: [REJECTED] send_wire_transfer was not run: approval request "
                f"{paused.request.request_id} was rejected: not this week. Do not call it again; "
                "tell the user it was not done."
            )
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "release hold-ACME-ops"]
            assert sagacity.history("lg-3")[-1].payload["outcome"] == "COMPENSATED"


class TestKilledMidResume:
    def test_another_worker_finishes_the_graph_and_the_wire_runs_once(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """SIGKILLed after the wire ran, before the saga ended: the next worker finishes it.

        Its resume runs the graph's tool node again, where the journal replays the wire
        (no second transfer), and the agent's last message names the transfer id.
        """
        checkpoints = tmp_path / "checkpoints.db"
        env = {CHECKPOINTS: str(checkpoints), LEASE_TTL: "1"}
        with Sagacity.from_url(sqlite_url) as sagacity:
            paused = Paused(sagacity, checkpoints, "lg-k")
            first = WorkerProcess(APP, sqlite_url, ledger, **env, **{HANG_FINAL: "1"})
            try:
                approve_elsewhere("lg-k", sqlite_url, ledger)
                first.wait_for("teller: the last turn hangs")
            finally:
                first.child.kill()
                assert first.child.wait(timeout=60) == -9
                first.stop()
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            assert [e.phase.name for e in sagacity.history("lg-k")][-2:] == ["INTENT", "EXECUTED"]

            with worker_process(APP, sqlite_url, ledger, **env) as second:
                second.wait_for("saga 'lg-k': request")

            assert paused.last_message() == "The bank says: wt-250.00-ACME"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            wire = [e.phase.name for e in sagacity.history("lg-k") if e.call_id == "call-w"]
            assert wire == ["AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED"]
            assert sagacity.history("lg-k")[-1].payload["outcome"] == "COMPLETED"
