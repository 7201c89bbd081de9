"""No stranded run: a call run outside PydanticAI is replayed by its own resume.

The run ends with `DeferredToolRequests` on the wire transfer; the approval and the
approved call are made with the CLI in other processes (`sagacity approve`, `sagacity
resume --tools`), which end the saga. `agent.run(message_history=…,
deferred_tool_results=DeferredToolResults(approvals={id: True}))` inside `aresume_saga`
then replays what the journal holds instead of raising `ApprovalAlreadyUsedError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
    ToolDenied,
)

from sagacity import Sagacity, SagaOutcome, SagaStateError
from tests.integrations._bank import (
    approve_and_run_elsewhere,
    ledger_lines,
    reject_elsewhere,
)
from tests.integrations.pydantic_ai._worker_app import bank_agent


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SAGACITY_TEST_LEDGER", str(path))
    return path


async def paused(sagacity: Sagacity, saga_id: str) -> bytes:
    """Run until the wire is deferred; return the run's messages, as an application keeps them."""
    result = await sagacity.asaga(saga_id, lambda: bank_agent(sagacity).run("Pay ACME 250.00."))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    assert isinstance(result.value.output, DeferredToolRequests)
    messages: bytes = result.value.all_messages_json()
    return messages


async def resumed_with(sagacity: Sagacity, saga_id: str, messages: bytes, answer: Any) -> Any:
    """PydanticAI's own resume: the kept messages, and its answer for the deferred call."""
    agent = bank_agent(sagacity)
    return await sagacity.aresume_saga(
        saga_id,
        lambda: agent.run(
            message_history=ModelMessagesTypeAdapter.validate_json(messages),
            deferred_tool_results=DeferredToolResults(approvals={"call-w": answer}),
        ),
    )


class TestApprovedCallRunElsewhere:
    async def test_the_deferred_results_replay_the_transfer_id(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """`sagacity resume` ran the wire; the resumed run's output names its transfer id."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            messages = await paused(sagacity, "pa-1")
            ran = approve_and_run_elsewhere("pa-1", sqlite_url, ledger)
            assert ran.stdout.startswith("saga 'pa-1': COMPLETED"), ran.stdout + ran.stderr
            before = sagacity.history("pa-1")

            resumed = await resumed_with(sagacity, "pa-1", messages, True)

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPLETED, True)
            assert resumed.value.output == "The bank says: wt-250.00-ACME"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            assert sagacity.history("pa-1") == before

    async def test_a_failure_elsewhere_is_raised_as_pydantic_ai_raises_a_tool_failure(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """The wire failed in the CLI and the hold was released: the resumed run says why.

        PydanticAI lets a tool's exception end the run: the result carries it, with the
        journal's account of the failure, and the saga stays COMPENSATED.
        """
        with Sagacity.from_url(sqlite_url) as sagacity:
            messages = await paused(sagacity, "pa-2")
            approve_and_run_elsewhere("pa-2", sqlite_url, ledger, bank_down=True)

            resumed = await resumed_with(sagacity, "pa-2", messages, True)

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPENSATED, True)
            assert isinstance(resumed.error, SagaStateError)
            assert "RuntimeError: the bank refused the transfer to ACME" in str(resumed.error)
            assert ledger_lines(ledger) == [
                "hold ACME-ops 250.00",
                "refused 250.00 ACME",
                "release hold-ACME-ops",
            ]


class TestRejectedElsewhere:
    async def test_a_denial_tells_the_agent_no(self, sqlite_url: str, ledger: Path) -> None:
        """Rejected with the CLI: PydanticAI's `ToolDenied` gives the agent its no."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            messages = await paused(sagacity, "pa-3")
            assert reject_elsewhere("pa-3", sqlite_url, ledger).returncode == 0
            before = sagacity.history("pa-3")

            resumed = await resumed_with(
                sagacity, "pa-3", messages, ToolDenied("rejected: not this week")
            )

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPENSATED, True)
            assert resumed.value.output == "The bank says: rejected: not this week"
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "release hold-ACME-ops"]
            assert sagacity.history("pa-3") == before
