"""The OpenAI Agents resumer: a worker process approves or rejects the run's interruption.

The run is interrupted on the wire transfer in this process, which keeps its state as
`to_state().to_string()` in a folder; `sagacity worker` runs in another process with the
same agent and `OpenAIAgentsResumer`, reading the state from there; the decision is made
from a third (the CLI). Approved, the SDK runs the wire once in the worker and the final
output names the transfer id; rejected, the hold is released and the agent hears the
SDK's rejection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agents import Runner

from sagacity import Sagacity, SagaOutcome
from sagacity.integrations.openai_agents import RESUMER
from tests.integrations._bank import STATES, approve_elsewhere, cli, ledger_lines, worker_process
from tests.integrations.openai_agents._teller import PROMPT
from tests.integrations.openai_agents._worker_app import bank_agent

APP = "tests.integrations.openai_agents._worker_app:worker"


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SAGACITY_TEST_LEDGER", str(path))
    return path


async def pause(sagacity: Sagacity, saga_id: str, states: Path) -> str:
    """Run until the wire interrupts; keep the state where the worker finds it."""
    agent = bank_agent(sagacity)
    result = await sagacity.asaga(saga_id, lambda: Runner.run(agent, PROMPT))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    (states / f"{saga_id}.state").write_text(result.value.to_state().to_string(), "utf-8")
    asked = sagacity.history(saga_id)[-1]
    assert (asked.phase.name, asked.payload["resumer"]) == ("AWAITING_APPROVAL", RESUMER)
    (request,) = result.pending
    return request.request_id


class TestWorker:
    async def test_an_approval_runs_the_wire_once_in_the_worker(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """Approved with the CLI: the worker's `state.approve` and `Runner.run` wire once."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            await pause(sagacity, "oa-w1", tmp_path)
            with worker_process(APP, sqlite_url, ledger, **{STATES: str(tmp_path)}) as worker:
                approve_elsewhere("oa-w1", sqlite_url, ledger)
                worker.wait_for("saga 'oa-w1': request")

            out = (tmp_path / "oa-w1.out").read_text("utf-8")
            assert out == "The bank says: wt-250.00-ACME"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            phases = [e.phase.name for e in sagacity.history("oa-w1")]
            assert phases[-4:] == ["APPROVED", "INTENT", "EXECUTED", "ENDED"]
            assert sagacity.history("oa-w1")[-1].payload["outcome"] == "COMPLETED"

    async def test_a_rejection_releases_the_hold_and_the_agent_hears_no(
        self, sqlite_url: str, tmp_path: Path, ledger: Path
    ) -> None:
        """Rejected with the CLI (no tools there): the worker undoes the hold, says no."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            request_id = await pause(sagacity, "oa-w2", tmp_path)
            with worker_process(APP, sqlite_url, ledger, **{STATES: str(tmp_path)}) as worker:
                rejected = cli(
                    "reject", "oa-w2", "--approver", "bob", "--reason", "not this week",
                    "--database", sqlite_url, ledger=ledger,
                )  # fmt: skip
                assert rejected.returncode in (0, 6), rejected.stderr
                worker.wait_for("saga 'oa-w2': request")

            out = (tmp_path / "oa-w2.out").read_text("utf-8")
            assert out == (
                f"The bank says: [REJECTED] send_wire_transfer was not run: approval request "
                f"{request_id} was rejected: not this week. Do not call it again; tell the "
                "user it was not done."
            )
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "release hold-ACME-ops"]
            assert sagacity.history("oa-w2")[-1].payload["outcome"] == "COMPENSATED"
