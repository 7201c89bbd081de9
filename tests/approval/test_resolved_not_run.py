"""An approved call whose run stopped after its INTENT: what spends the approval.

A worker journals the approved call's INTENT and dies before the outcome (here the
INTENT is journaled as that worker left it; `test_killed_approved_call.py` kills a real
process). An operator who finds the call did not run says so with `resolve(...,
executed=False)`: the approval stands, `resume_saga` runs the call exactly once, and
`reject` still works. Resolved as executed, or left in doubt, the approval is spent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import (
    ApprovalAlreadyGivenError,
    ApprovalAlreadyUsedError,
    ApprovalRequest,
    JournalEntry,
    Phase,
    Sagacity,
    SagaOutcome,
    verify,
)
from sagacity.audit import generate_key
from sagacity.workflows import StageStatus, WorkflowRuntime, WorkflowStatus
from tests._shop import order_then_wire, phases
from tests.approval._policy import OpenSagacity
from tests.approval.test_approval import SAGA, WIRE_INPUT, Waiting, waiting_saga
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow

RUN = "refund-9"
RESERVED = "reserve A-17 120.00"
WIRED = "wire 120.00 to DE89370400440532013000"
NOTIFIED = "notify wire-A-17"


def journal_approved_intent(sagacity: Sagacity, request: ApprovalRequest) -> JournalEntry:
    """The approved call's INTENT, as a worker killed before the call's outcome leaves it."""
    return sagacity.journal.append(
        request.saga_id,
        Phase.INTENT,
        tool_name=request.tool_name,
        call_id=request.call_id,
        payload={
            "input": request.input,
            "reversibility": "IRREVERSIBLE",
            "request_id": request.request_id,
        },
    )


@pytest.fixture
def crashed(sagacity: Sagacity) -> Waiting:
    """A saga whose approved wire transfer was started (INTENT at seq 5), then its worker died."""
    waiting = waiting_saga(sagacity)
    sagacity.approve(SAGA, approver="alice@treasury")
    intent = journal_approved_intent(sagacity, waiting.request)
    assert intent.seq == 5
    return waiting


class TestResolvedNotRun:
    def test_resume_runs_the_approved_call_exactly_once(self, crashed: Waiting) -> None:
        """After `resolve(executed=False)`, resume_saga runs the approved input once."""
        sagacity = crashed.sagacity
        resolved = sagacity.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        assert (resolved.phase, resolved.ref_seq, resolved.payload) == (
            Phase.FAILED,
            5,
            {"kind": "not_run", "error": None, "resolved_by": "ops"},
        )
        (shown,) = sagacity.pending(SAGA)
        assert (shown.request_id, shown.state) == (crashed.request.request_id, "approved")

        result = sagacity.resume_saga(SAGA)

        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert crashed.shop.log == ["reserve SKU-1", "wire 900.00 to ACME"]
        entries = sagacity.history(SAGA)
        assert phases(entries)[4:] == [
            ("INTENT", "send_wire_transfer", None),
            ("FAILED", "send_wire_transfer", 5),
            ("INTENT", "send_wire_transfer", None),
            ("EXECUTED", "send_wire_transfer", 7),
            ("ENDED", None, None),
        ]
        assert entries[6].payload == {
            "input": WIRE_INPUT,
            "reversibility": "IRREVERSIBLE",
            "request_id": crashed.request.request_id,
        }
        assert entries[-1].payload["outcome"] == "COMPLETED"
        assert sagacity.pending(SAGA) == []
        assert verify(sagacity.journal, SAGA).ok

    def test_the_run_spends_the_approval(self, crashed: Waiting) -> None:
        """The run after the resolution is the one the approval pays for: not a second."""
        sagacity = crashed.sagacity
        sagacity.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        with pytest.raises(ApprovalAlreadyUsedError, match=r"already ran \(INTENT at seq 7\)"):
            sagacity.resume_saga(SAGA)
        assert crashed.wire_ran() == 1

    def test_resume_with_work_runs_it_once(self, crashed: Waiting) -> None:
        """A framework's native resume calls the tool again: it runs once, the rest replays."""
        sagacity = crashed.sagacity
        sagacity.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        result = sagacity.resume_saga(SAGA, order_then_wire(crashed.tools))
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert crashed.shop.calls == {"reserve_inventory": 1, "send_wire_transfer": 1}

    async def test_aresume_runs_it_once(self, crashed: Waiting) -> None:
        """The same from async code."""
        sagacity = crashed.sagacity
        sagacity.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        result = await sagacity.aresume_saga(SAGA)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert crashed.wire_ran() == 1

    def test_reject_compensates_and_nothing_is_wired(self, crashed: Waiting) -> None:
        """The approver may still say no: REJECTED is journaled and the saga compensates."""
        sagacity = crashed.sagacity
        sagacity.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        result = sagacity.reject(SAGA, approver="bob", reason="the customer cancelled")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert crashed.shop.log == ["reserve SKU-1", "release res-SKU-1-2"]
        rejected = next(e for e in sagacity.history(SAGA) if e.phase is Phase.REJECTED)
        assert (rejected.ref_seq, rejected.payload) == (
            3,
            {
                "request_id": crashed.request.request_id,
                "approver": "bob",
                "reason": "the customer cancelled",
                "via": "python",
                "initiated_by": {"by": "code", "via": "work"},
            },
        )
        assert sagacity.pending(SAGA) == []
        assert crashed.wire_ran() == 0

    def test_approving_again_finds_the_approval_standing(self, crashed: Waiting) -> None:
        """approve() says the request is approved already, not that its approval was used."""
        sagacity = crashed.sagacity
        sagacity.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        before = len(sagacity.history(SAGA))
        with pytest.raises(ApprovalAlreadyGivenError, match="'alice@treasury'"):
            sagacity.approve(SAGA, approver="bob")
        assert len(sagacity.history(SAGA)) == before


class TestStillSpent:
    def test_resolved_as_executed(self, crashed: Waiting) -> None:
        """It ran: resume, approve and reject are refused; a native resume replays its result."""
        sagacity = crashed.sagacity
        sagacity.resolve(SAGA, "send_wire_transfer#1", executed=True, result="w-1", by="ops")
        before = len(sagacity.history(SAGA))
        for attempt in (
            lambda: sagacity.resume_saga(SAGA),
            lambda: sagacity.approve(SAGA, approver="bob"),
            lambda: sagacity.reject(SAGA, approver="bob", reason="no"),
        ):
            with pytest.raises(ApprovalAlreadyUsedError, match=r"already ran \(INTENT at seq 5\)"):
                attempt()
        assert len(sagacity.history(SAGA)) == before
        result = sagacity.resume_saga(SAGA, order_then_wire(crashed.tools))
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "w-1")
        assert crashed.wire_ran() == 0

    def test_left_in_doubt(self, crashed: Waiting) -> None:
        """Unresolved, the call may have run: refused, saying how to give the approval back."""
        sagacity = crashed.sagacity
        for attempt in (
            lambda: sagacity.resume_saga(SAGA),
            lambda: sagacity.approve(SAGA, approver="bob"),
            lambda: sagacity.reject(SAGA, approver="bob", reason="no"),
        ):
            with pytest.raises(ApprovalAlreadyUsedError, match=r"executed=False"):
                attempt()
        assert crashed.wire_ran() == 0
        assert len(sagacity.history(SAGA)) == 5

    def test_an_earlier_attempt_that_ran_spends_it(self, crashed: Waiting) -> None:
        """Only attempts known not to have run give nothing back; one that raised spent it.

        The approved call's first attempt (INTENT at seq 5) raised and was retried by the
        tool's own retries; the worker died in the second, which an operator resolved as
        not run. The first attempt may have acted: the approval is spent.
        """
        sagacity = crashed.sagacity
        retried = {"kind": "retried", "attempt": 1, "error": {"type": "E", "message": "x"}}
        sagacity.journal.append(
            SAGA, Phase.FAILED, tool_name="send_wire_transfer", call_id="send_wire_transfer#1",
            ref_seq=5, payload=retried,
        )  # fmt: skip
        journal_approved_intent(sagacity, crashed.request)
        sagacity.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        with pytest.raises(ApprovalAlreadyUsedError, match=r"already ran \(INTENT at seq 5\)"):
            sagacity.resume_saga(SAGA)
        with pytest.raises(ApprovalAlreadyUsedError, match=r"already ran \(INTENT at seq 5\)"):
            sagacity.reject(SAGA, approver="bob", reason="no")
        assert crashed.wire_ran() == 0


class TestSignedApprovals:
    def test_a_resolution_gives_no_signed_approval_back(self, open_sagacity: OpenSagacity) -> None:
        """Under `require_signed_approvals` an unsigned FAILED `not_run` gives nothing back.

        Anyone with database access could append one after the call ran; the approval
        stays spent, and the request can still be rejected.
        """
        key = generate_key()
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        signer = open_sagacity(approval_signing_key=key, require_signed_approvals=True)
        waiting = waiting_saga(worker)
        signer.approve(SAGA, approver="alice@treasury")
        journal_approved_intent(worker, waiting.request)
        worker.resolve(SAGA, "send_wire_transfer#1", executed=False, by="ops")
        with pytest.raises(ApprovalAlreadyUsedError, match=r"'ops'\) resolved it as not run"):
            worker.resume_saga(SAGA)
        assert waiting.wire_ran() == 0
        result = worker.reject(SAGA, approver="bob", reason="run it in a new saga")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert waiting.shop.log == ["reserve SKU-1", "release res-SKU-1-2"]


class TestWorkflowGate:
    """The refund workflow's gated wire stage, started and then its worker died."""

    @pytest.fixture
    def ledger(self, tmp_path: Path) -> Ledger:
        return Ledger(tmp_path / "ledger.txt")

    @pytest.fixture
    def runtime(self, sagacity: Sagacity, ledger: Ledger) -> WorkflowRuntime:
        """A run whose approved wire stage has an INTENT and no outcome."""
        runtime = WorkflowRuntime(sagacity, workflows=[RefundWorkflow(ledger)])
        handle = runtime.start("refund-request", REQUEST, run_id=RUN)
        assert handle.status is WorkflowStatus.PAUSED_AT_GATE
        assert handle.gate is not None
        runtime.approve_gate(RUN, "wire", "carol", sha256=handle.gate.input_sha256)
        (request,) = sagacity.pending(RUN)
        journal_approved_intent(sagacity, request)
        assert runtime.resume(RUN).status is WorkflowStatus.NEEDS_ATTENTION
        return runtime

    def test_resume_runs_the_gated_stage_once(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """Resolved not run, the gate shows approved again and `resume` wires once."""
        sagacity.resolve(RUN, "wire", executed=False, by="operator-dana")
        handle = runtime.get(RUN)
        wire = next(s for s in handle.stages if s.name == "wire")
        assert wire.status is StageStatus.APPROVED
        with pytest.raises(ApprovalAlreadyGivenError, match="'carol'"):
            runtime.approve_gate(RUN, "wire", "erin")
        assert runtime.resume(RUN).status is WorkflowStatus.COMPLETED
        assert ledger.lines() == [RESERVED, WIRED, NOTIFIED]
        wires = [
            e for e in sagacity.history(RUN) if e.phase is Phase.INTENT and e.call_id == "wire"
        ]
        assert len(wires) == 2  # the one that did not run, and the one that did
        assert verify(sagacity.journal, RUN).ok

    def test_reject_gate_compensates(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """Resolved not run, the gate can still be rejected: the reservation is released."""
        sagacity.resolve(RUN, "wire", executed=False, by="operator-dana")
        handle = runtime.reject_gate(RUN, "wire", "dave", "not this one")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert ledger.lines() == [RESERVED, "release res-A-17"]

    def test_resolved_as_executed_runs_no_second_wire(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """Resolved as executed, no gate waits any more; the run goes on with that result."""
        sagacity.resolve(RUN, "wire", executed=True, result="wire-A-17", by="operator-dana")
        assert sagacity.pending(RUN) == []
        with pytest.raises(ApprovalAlreadyUsedError, match=r"already ran \(INTENT at seq"):
            sagacity.reject(RUN, approver="dave", reason="too late")
        assert runtime.resume(RUN).status is WorkflowStatus.COMPLETED
        assert ledger.lines() == [RESERVED, NOTIFIED]
