"""The PydanticAI resumer: a worker process runs the deferred agent on when a decision lands.

The run ends with `DeferredToolRequests` on the wire transfer in this process, which
keeps its messages (`all_messages_json()`) in a folder; `sagacity worker` runs in another
process with the same agent and `PydanticAIResumer`; the decision is made from a third
(the CLI). Approved, the wire runs once in the worker and the output names the transfer
id; rejected, the hold is released and the agent is told no (`ToolDenied`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import Sagacity, SagaOutcome
from sagacity.integrations.pydantic_ai import RESUMER
from tests.integrations._bank import STATES, approve_elsewhere, cli, ledger_lines, worker_process
from tests.integrations.pydantic_ai._worker_app import bank_agent

APP = "tests.integrations.pydantic_ai._worker_app:worker"


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SAGACITY_TEST_LEDGER", str(path))
    return path


async def pause(sagacity: Sagacity, saga_id: str, states: Path) -> str:
    """Run until the wire is deferred; keep the messages where the worker finds them."""
    agent = bank_agent(sagacity)
    result = await sagacity.asaga(saga_id, lambda: agent.run("Pay ACME 250.00."))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    (states / f"{saga_id}.json").write_bytes(result.value.all_messages_json())
    asked = sagacity.history(saga_id)[-1]
    assert (asked.phase.name, asked.payload["resumer"]) == ("AWAITING_APPROVAL", RESUMER)
    (request,) = result.pending
    return request.request_id


class TestWorker:
    async def test_an_approval_runs_the_wire_once_in_the_worker(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """Approved with the CLI: the worker's `DeferredToolResults` run the wire once."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            await pause(sagacity, "pa-w1", tmp_path)
            with worker_process(APP, sqlite_url, ledger, **{STATES: str(tmp_path)}) as worker:
                approve_elsewhere("pa-w1", sqlite_url, ledger)
                worker.wait_for("saga 'pa-w1': request")

            out = (tmp_path / "pa-w1.out").read_text("utf-8")
            assert out == "The bank says: wt-250.00-ACME"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            phases = [e.phase.name for e in sagacity.history("pa-w1")]
            assert phases[-4:] == ["APPROVED", "INTENT", "EXECUTED", "ENDED"]
            assert sagacity.history("pa-w1")[-1].payload["outcome"] == "COMPLETED"

    async def test_a_rejection_releases_the_hold_and_the_agent_is_denied(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """Rejected with the CLI (no tools there): the worker undoes the hold, denies the call."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            request_id = await pause(sagacity, "pa-w2", tmp_path)
            with worker_process(APP, sqlite_url, ledger, **{STATES: str(tmp_path)}) as worker:
                rejected = cli(
                    "reject", "pa-w2", "--approver", "bob", "--reason", "not this week",
                    "--database", sqlite_url, ledger=ledger,
                )  # fmt: skip
                assert rejected.returncode in (0, 6), rejected.stderr
                worker.wait_for("saga 'pa-w2': request")

            out = (tmp_path / "pa-w2.out").read_text("utf-8")
            assert out == (
                f"The bank says: [REJECTED] send_wire_transfer was not run: approval request "
                f"{request_id} was rejected: not this week. Do not call it again; tell the "
                "user it was not done."
            )
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "release hold-ACME-ops"]
            assert sagacity.history("pa-w2")[-1].payload["outcome"] == "COMPENSATED"
