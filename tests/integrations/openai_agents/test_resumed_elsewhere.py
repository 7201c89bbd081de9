"""No stranded run: a call run outside the SDK is replayed by the SDK's own resume.

The run is interrupted on the wire transfer; the approval and the approved call are made
with the CLI in other processes (`sagacity approve`, `sagacity resume --tools`), which end
the saga. `state.approve(item)` then `Runner.run(agent, state)` inside `aresume_saga`
replays what the journal holds instead of raising `ApprovalAlreadyUsedError`: the agent's
final output names the transfer id, and nothing runs twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, RunResult, RunState

from sagacity import ApprovalRejectedError, Sagacity, SagaOutcome
from sagacity.integrations.openai_agents import function_tools
from tests.integrations._bank import (
    Bank,
    approve_and_run_elsewhere,
    ledger_lines,
    reject_elsewhere,
)
from tests.integrations.openai_agents._orders import agent_with
from tests.integrations.openai_agents._teller import PROMPT, Teller, told


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SAGACITY_TEST_LEDGER", str(path))
    return path


async def paused(sagacity: Sagacity, saga_id: str) -> tuple[Agent[Any], RunResult]:
    agent = agent_with(Teller(), function_tools(sagacity, Bank(), failure_error_function=told))
    result = await sagacity.asaga(saga_id, lambda: Runner.run(agent, PROMPT))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    return agent, result.value


class TestApprovedCallRunElsewhere:
    async def test_the_sdk_resume_replays_the_transfer_id(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """`sagacity resume` ran the wire; `state.approve`, `Runner.run` tell the agent its id."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            agent, run = await paused(sagacity, "oa-1")
            saved = run.to_state().to_string()
            ran = approve_and_run_elsewhere("oa-1", sqlite_url, ledger)
            assert ran.stdout.startswith("saga 'oa-1': COMPLETED"), ran.stdout + ran.stderr
            before = sagacity.history("oa-1")

            state = await RunState.from_string(agent, saved)
            state.approve(state.get_interruptions()[0])
            resumed = await sagacity.aresume_saga("oa-1", lambda: Runner.run(agent, state))

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPLETED, True)
            assert resumed.value.final_output == "The bank says: wt-250.00-ACME"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            assert sagacity.history("oa-1") == before

    async def test_a_failure_elsewhere_is_what_the_agent_is_told(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """The wire failed in the CLI and the hold was released: the resumed agent learns why."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            agent, run = await paused(sagacity, "oa-2")
            state = run.to_state()
            approve_and_run_elsewhere("oa-2", sqlite_url, ledger, bank_down=True)

            state.approve(run.interruptions[0])
            resumed = await sagacity.aresume_saga("oa-2", lambda: Runner.run(agent, state))

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPENSATED, True)
            output = resumed.value.final_output
            assert output.startswith("The bank says: failed: saga 'oa-2' ended COMPENSATED")
            assert "RuntimeError: the bank refused the transfer to ACME" in output
            assert ledger_lines(ledger) == [
                "hold ACME-ops 250.00",
                "refused 250.00 ACME",
                "release hold-ACME-ops",
            ]


class TestRejectedElsewhere:
    async def test_the_sdk_reject_tells_the_agent_no(self, sqlite_url: str, ledger: Path) -> None:
        """Rejected with the CLI: `state.reject` and `Runner.run` give the agent the SDK's no."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            agent, run = await paused(sagacity, "oa-3")
            state = run.to_state()
            assert reject_elsewhere("oa-3", sqlite_url, ledger).returncode == 0
            before = sagacity.history("oa-3")

            state.reject(run.interruptions[0], rejection_message="rejected: not this week")
            resumed = await sagacity.aresume_saga("oa-3", lambda: Runner.run(agent, state))

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPENSATED, True)
            assert resumed.value.final_output == "The bank says: rejected: not this week"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "release hold-ACME-ops"]
            assert sagacity.history("oa-3") == before

    async def test_an_sdk_approval_of_a_rejected_call_is_refused(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """Approved in the SDK after the CLI rejected it: refused as in any run, nothing runs."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            agent, run = await paused(sagacity, "oa-4")
            state = run.to_state()
            reject_elsewhere("oa-4", sqlite_url, ledger)
            before = sagacity.history("oa-4")

            state.approve(run.interruptions[0])
            with pytest.raises(ApprovalRejectedError, match="rejected by 'bob': not this week"):
                await sagacity.aresume_saga("oa-4", lambda: Runner.run(agent, state))

            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "release hold-ACME-ops"]
            assert sagacity.history("oa-4") == before
