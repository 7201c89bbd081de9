"""A worker SIGKILLed inside an approved IRREVERSIBLE call, after its INTENT, before it acted.

The call is in doubt, so its approval counts as spent; an operator who finds the money
was not sent resolves it `executed=False`, and the approval stands again: the next
resume runs the call exactly once (the ledger shows one wire), or a rejection ends the
saga compensated. On SQLite and PostgreSQL, the process's journal shared by file or
server; the core path and a workflow's gate.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import ApprovalAlreadyUsedError, Phase, Sagacity, SagaOutcome, verify
from sagacity.workflows import WorkflowRuntime, WorkflowStatus
from tests.approval._crash_child import RUN, SAGA, Bank
from tests.processes._kill import run_until_killed
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow

pytestmark = pytest.mark.slow

RESERVED = "reserve A-17 120.00"
WIRED = "wire 120.00 to DE89370400440532013000"
NOTIFIED = "notify wire-A-17"


def kill_inside_wire(action: str, url: str, ledger: Path) -> None:
    """Run the child's `action` and SIGKILL it inside the approved wire, before it acts."""
    run_until_killed("tests.approval._crash_child", action, url, str(ledger), when="inside wire")


@pytest.fixture
def here(shared_store_url: str) -> Iterator[Sagacity]:
    """This process, after the kill: it waits for the killed worker's lease to run out."""
    sagacity = Sagacity.from_url(shared_store_url, lease_wait=15)
    yield sagacity
    sagacity.close()


class TestKilledInsideTheApprovedCall:
    @pytest.fixture
    def bank(self, here: Sagacity, shared_store_url: str, tmp_path: Path) -> Bank:
        """Saga `wire-1`: funds reserved, the wire approved, its resume killed inside it."""
        bank = Bank(tmp_path / "ledger.txt")
        tools = {tool.name: tool for tool in here.wrap(bank)}

        def work() -> str:
            tools["reserve"]("SKU-1")
            return str(tools["wire"]("900.00", "ACME"))

        assert here.saga(SAGA, work).outcome is SagaOutcome.AWAITING_APPROVAL
        here.approve(SAGA, approver="alice@treasury")
        kill_inside_wire("resume", shared_store_url, bank.ledger)
        entries = here.history(SAGA)
        assert [(e.phase, e.call_id) for e in entries[3:]] == [
            (Phase.APPROVED, "wire#1"),
            (Phase.INTENT, "wire#1"),
        ]
        assert bank.lines() == ["reserve SKU-1"]
        return bank

    def test_resolved_not_run_the_next_resume_wires_once(self, here: Sagacity, bank: Bank) -> None:
        """In doubt it is refused; resolved not run, resume_saga sends the wire exactly once."""
        with pytest.raises(ApprovalAlreadyUsedError, match="executed=False"):
            here.resume_saga(SAGA)
        assert bank.lines() == ["reserve SKU-1"]
        resolved = here.resolve(SAGA, "wire#1", executed=False, by="ops@bank")
        assert resolved.payload == {"kind": "not_run", "error": None, "resolved_by": "ops@bank"}

        result = here.resume_saga(SAGA)

        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert bank.lines() == ["reserve SKU-1", "wire 900.00 to ACME"]
        wires = [e for e in here.history(SAGA) if e.call_id == "wire#1"]
        assert [e.phase for e in wires] == [
            Phase.AWAITING_APPROVAL,
            Phase.APPROVED,
            Phase.INTENT,  # the killed attempt
            Phase.FAILED,  # resolved not run
            Phase.INTENT,
            Phase.EXECUTED,
        ]
        assert here.pending(SAGA) == []
        with pytest.raises(ApprovalAlreadyUsedError, match="already ran"):
            here.resume_saga(SAGA)
        assert bank.lines() == ["reserve SKU-1", "wire 900.00 to ACME"]
        assert verify(here.journal, SAGA).ok

    def test_resolved_not_run_it_can_still_be_rejected(self, here: Sagacity, bank: Bank) -> None:
        """The approver may still say no: the saga compensates and no wire is sent."""
        here.resolve(SAGA, "wire#1", executed=False, by="ops@bank")
        result = here.reject(SAGA, approver="bob", reason="the customer cancelled")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert bank.lines() == ["reserve SKU-1", "release res-SKU-1"]
        assert verify(here.journal, SAGA).ok

    def test_resolved_as_executed_the_approval_is_spent(self, here: Sagacity, bank: Bank) -> None:
        """The operator finds the wire went out: nothing runs it again, nor rejects it."""
        here.resolve(SAGA, "wire#1", executed=True, result="wire-900.00-ACME", by="ops@bank")
        with pytest.raises(ApprovalAlreadyUsedError, match="already ran"):
            here.resume_saga(SAGA)
        with pytest.raises(ApprovalAlreadyUsedError, match="already ran"):
            here.reject(SAGA, approver="bob", reason="too late")
        assert bank.lines() == ["reserve SKU-1"]


class TestKilledInsideTheGatedStage:
    def test_resolved_not_run_resume_wires_once(
        self, here: Sagacity, shared_store_url: str, tmp_path: Path
    ) -> None:
        """A run killed inside its approved wire stage finishes, wiring once, once resolved."""
        ledger = Ledger(tmp_path / "ledger.txt")
        runtime = WorkflowRuntime(here, [RefundWorkflow(ledger)])
        handle = runtime.start("refund-request", REQUEST, run_id=RUN)
        assert handle.status is WorkflowStatus.PAUSED_AT_GATE
        assert handle.gate is not None
        runtime.approve_gate(RUN, "wire", "carol", sha256=handle.gate.input_sha256)
        kill_inside_wire("gate", shared_store_url, ledger.path)
        assert runtime.resume(RUN).status is WorkflowStatus.NEEDS_ATTENTION
        assert ledger.lines() == [RESERVED]

        here.resolve(RUN, "wire", executed=False, by="operator-dana")

        assert runtime.resume(RUN).status is WorkflowStatus.COMPLETED
        assert ledger.lines() == [RESERVED, WIRED, NOTIFIED]
        assert verify(here.journal, RUN).ok
