"""The seed's refund example end to end (reserve → check budget → gate → wire → notify).

Each path is checked by what a user depends on: the ledger of real effects and undos in
order, the run's status and stage flow, and the exact phases in the run's hash chain.
"""

from __future__ import annotations

import contextlib
import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity, verify
from sagacity.errors import (
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalInputError,
    ApprovalNotFoundError,
)
from sagacity.testing import FakeClock
from sagacity.workflows import (
    GATE_TIMEOUT_APPROVER,
    StageStatus,
    WorkflowHandle,
    WorkflowRuntime,
    WorkflowStatus,
)
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow


def flow(handle: WorkflowHandle) -> list[tuple[str, str]]:
    """The stage flow as (stage, status) pairs."""
    return [(s.name, s.status.value) for s in handle.stages]


def chain(sagacity: Sagacity, run_id: str) -> list[tuple[str, str | None]]:
    """The run's journal as (phase, call id) pairs."""
    return [(e.phase.name, e.call_id) for e in sagacity.history(run_id)]


def paused(runtime: WorkflowRuntime, run_id: str = "refund-1") -> WorkflowHandle:
    handle = runtime.start("refund-request", REQUEST, run_id=run_id)
    assert handle.status is WorkflowStatus.PAUSED_AT_GATE
    return handle


class TestCompleted:
    def test_pauses_at_the_gate_with_the_exact_value(
        self, runtime: WorkflowRuntime, ledger: Ledger
    ) -> None:
        """start() runs up to the gate and returns PAUSED_AT_GATE with the wire's exact value."""
        handle = paused(runtime)
        assert handle.current_stage == "wire"
        assert flow(handle) == [
            ("reserve_funds", "EXECUTED"),
            ("wire", "AWAITING_APPROVAL"),
            ("notify", "PENDING"),
        ]
        assert ledger.lines() == ["reserve A-17 120.00"]
        gate = handle.gate
        assert gate is not None
        assert gate.stage_name == "wire"
        assert gate.workflow_name == "refund-request"
        assert gate.reason == "A wire transfer cannot be undone"
        assert gate.value == {
            "reservation_id": "res-A-17",
            "order_id": "A-17",
            "amount": "120.00",
            "iban": "DE89370400440532013000",
        }
        assert gate.input == {"reservation": gate.value}
        assert gate.state == "waiting"
        assert runtime.pending_gates() == [gate]

    def test_a_gate_cannot_be_edited(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """Its input is the stage's own: an edit is refused, and the gate still waits.

        Were it journaled, the run would call the stage with the input it computed and
        be refused as changed; approved, the gate still runs the rest.
        """
        gate = paused(runtime).gate
        assert gate is not None
        before = sagacity.history("refund-1")
        with pytest.raises(ApprovalInputError, match="gate of workflow 'refund-request'"):
            sagacity.edit(
                "refund-1",
                approver="bob",
                request_id=gate.request_id,
                new_input={"reservation": {**gate.value, "amount": "1.00"}},
            )
        assert sagacity.history("refund-1") == before
        runtime.approve_gate("refund-1", "wire", "alice", sha256=gate.input_sha256)
        assert runtime.resume("refund-1").status is WorkflowStatus.COMPLETED
        assert ledger.lines()[1] == "wire 120.00 to DE89370400440532013000"

    def test_approved_gate_runs_the_rest(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """Approved and resumed, the wire and the notice run once; the run COMPLETES."""
        gate = paused(runtime).gate
        assert gate is not None
        approved = runtime.approve_gate("refund-1", "wire", "alice", sha256=gate.input_sha256)
        assert approved.status is WorkflowStatus.PAUSED_AT_GATE
        assert flow(approved)[1] == ("wire", "APPROVED")
        assert ledger.lines() == ["reserve A-17 120.00"]  # approval alone runs nothing
        done = runtime.resume("refund-1")
        assert done.status is WorkflowStatus.COMPLETED
        assert done.result == "notice-wire-A-17"
        assert done.current_stage is None
        assert ledger.lines() == [
            "reserve A-17 120.00",
            "wire 120.00 to DE89370400440532013000",
            "notify wire-A-17",
        ]
        assert chain(sagacity, "refund-1") == [
            ("INTENT", "workflow"),
            ("EXECUTED", "workflow"),
            ("INTENT", "reserve_funds"),
            ("EXECUTED", "reserve_funds"),
            ("AWAITING_APPROVAL", "wire"),
            ("APPROVED", "wire"),
            ("INTENT", "wire"),
            ("EXECUTED", "wire"),
            ("INTENT", "notify"),
            ("EXECUTED", "notify"),
            ("ENDED", None),
        ]
        entries = sagacity.history("refund-1")
        assert entries[5].payload["approver"] == "alice"
        assert entries[5].payload["input_sha256"] == gate.input_sha256
        assert entries[6].payload["request_id"] == gate.request_id
        assert verify(sagacity.journal, "refund-1").ok

    def test_resume_of_a_completed_run_changes_nothing(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """resume() on a COMPLETED run returns it as it is and journals nothing."""
        paused(runtime)
        runtime.approve_gate("refund-1", "wire", "alice")
        runtime.resume("refund-1")
        before = len(sagacity.history("refund-1"))
        again = runtime.resume("refund-1")
        assert again.status is WorkflowStatus.COMPLETED
        assert len(sagacity.history("refund-1")) == before
        assert len(ledger.lines()) == 3

    def test_listing_by_status(self, runtime: WorkflowRuntime, sagacity: Sagacity) -> None:
        """list(status=...) finds runs by status and leaves plain sagas out."""
        paused(runtime, "refund-1")
        paused(runtime, "refund-2")
        runtime.reject_gate("refund-2", "wire", "bob", "duplicate request")
        sagacity.saga("not-a-run", lambda: None)
        assert [h.run_id for h in runtime.list()] == ["refund-1", "refund-2"]
        assert [h.run_id for h in runtime.list(status="PAUSED_AT_GATE")] == ["refund-1"]
        assert [h.run_id for h in runtime.list(WorkflowStatus.COMPENSATED)] == ["refund-2"]


class TestCheckFails:
    def test_stage_never_runs_and_earlier_stages_are_undone(
        self, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """A failing BudgetCheck: the wire never runs, nothing is asked, reserve is released."""
        runtime = WorkflowRuntime(sagacity, [RefundWorkflow(ledger, budget=Decimal("100"))])
        handle = runtime.start("refund-request", REQUEST, run_id="refund-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert handle.current_stage == "wire"
        assert flow(handle) == [
            ("reserve_funds", "COMPENSATED"),
            ("wire", "CHECK_FAILED"),
            ("notify", "PENDING"),
        ]
        assert handle.error == "refund 120.00 exceeds the budget 100"
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]
        assert runtime.pending_gates() == []
        assert chain(sagacity, "refund-1") == [
            ("INTENT", "workflow"),
            ("EXECUTED", "workflow"),
            ("INTENT", "reserve_funds"),
            ("EXECUTED", "reserve_funds"),
            ("REFUSED", "wire"),
            ("COMPENSATING", "reserve_funds"),
            ("COMPENSATED", "reserve_funds"),
            ("COMPENSATING", "workflow"),  # the start: nothing to undo, recorded so
            ("COMPENSATED", "workflow"),
            ("ENDED", None),
        ]
        refused = sagacity.history("refund-1")[4]
        assert refused.tool_name == "refund-request.wire"
        assert refused.payload["reason"] == "check_failed"
        assert refused.payload["check"] == "BudgetCheck"
        assert refused.payload["detail"] == "refund 120.00 exceeds the budget 100"
        ended = sagacity.history("refund-1")[-1].payload
        assert ended["outcome"] == "COMPENSATED"
        assert ended["error"]["type"] == "CheckFailedError"
        assert verify(sagacity.journal, "refund-1").ok

    def test_checks_run_again_after_the_approval(self, sagacity: Sagacity, ledger: Ledger) -> None:
        """A budget spent while the gate waited fails the approved run before the wire."""
        workflow = RefundWorkflow(ledger)
        runtime = WorkflowRuntime(sagacity, [workflow])
        paused(runtime)
        runtime.approve_gate("refund-1", "wire", "alice")
        workflow.budget = Decimal("50")
        handle = runtime.resume("refund-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert flow(handle)[1] == ("wire", "CHECK_FAILED")
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]


class TestGateRejected:
    def test_rejection_compensates_and_the_wire_never_runs(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """reject_gate journals REJECTED with approver and reason, and releases the funds."""
        paused(runtime)
        handle = runtime.reject_gate("refund-1", "wire", "bob", "customer already refunded")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert flow(handle)[:2] == [("reserve_funds", "COMPENSATED"), ("wire", "REJECTED")]
        assert handle.error == "customer already refunded"
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]
        rejected = [e for e in sagacity.history("refund-1") if e.phase is Phase.REJECTED]
        assert [(e.payload["approver"], e.payload["reason"]) for e in rejected] == [
            ("bob", "customer already refunded")
        ]
        # Nothing is left to approve, and resuming runs nothing.
        with pytest.raises(ApprovalNotFoundError, match="no gate waits before stage 'wire'"):
            runtime.approve_gate("refund-1", "wire", "alice")
        assert runtime.resume("refund-1").status is WorkflowStatus.COMPENSATED
        assert len(ledger.lines()) == 2


class TestGateTimedOut:
    def test_expire_gates_fails_and_compensates_after_the_timeout(
        self, runtime: WorkflowRuntime, clock: FakeClock, sagacity: Sagacity, ledger: Ledger
    ) -> None:
        """Before the timeout nothing expires; after it the run is rejected and compensated."""
        gate = paused(runtime).gate
        assert gate is not None
        assert gate.expires_at == gate.requested_at + datetime.timedelta(hours=1)
        clock.advance(3599)
        assert runtime.expire_gates() == []
        clock.advance(1)
        (expired,) = runtime.expire_gates()
        assert expired.run_id == "refund-1"
        assert expired.status is WorkflowStatus.COMPENSATED
        assert flow(expired)[1] == ("wire", "REJECTED")
        assert expired.error is not None
        assert expired.error.startswith("gate timed out: no decision within 3600s")
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]
        (rejected,) = [e for e in sagacity.history("refund-1") if e.phase is Phase.REJECTED]
        assert rejected.payload["approver"] == GATE_TIMEOUT_APPROVER
        assert runtime.expire_gates() == []

    def test_two_workers_expiring_at_once_each_expire_what_is_left(
        self, clock: FakeClock, tmp_path: Path
    ) -> None:
        """Worker A expires a gate worker B has just read as open.

        B's pass skips it and goes on to the gates still left, instead of stopping.
        """
        url = f"sqlite:///{tmp_path / 'two.db'}"
        workers = [Sagacity.from_url(url, clock=clock) for _ in range(2)]
        runtimes = [
            WorkflowRuntime(w, [RefundWorkflow(Ledger(tmp_path / "ledger.txt"))]) for w in workers
        ]
        try:
            for run_id in ("r1", "r2"):
                runtimes[0].start("refund-request", REQUEST, run_id=run_id)
            clock.advance(3600)
            stale = runtimes[1]._open_gates()  # B reads the gates of both runs ...
            (r1,) = [g for g in stale if g[2].saga_id == "r1"]
            runtimes[0]._expire(*r1)  # ... A expires r1 meanwhile
            runtimes[1]._open_gates = lambda run_id=None: stale  # type: ignore[method-assign]
            (expired,) = runtimes[1].expire_gates()
            assert expired.run_id == "r2"
            assert expired.status is WorkflowStatus.COMPENSATED
        finally:
            for worker in workers:
                worker.close()

    def test_late_approval_is_refused_and_expires_the_gate(
        self, runtime: WorkflowRuntime, clock: FakeClock, ledger: Ledger
    ) -> None:
        """Approving after the timeout, before expire_gates ran, is refused and fails the run."""
        paused(runtime)
        clock.advance(3601)
        with pytest.raises(ApprovalExpiredError, match="timed out 3600s after"):
            runtime.approve_gate("refund-1", "wire", "alice")
        assert runtime.get("refund-1").status is WorkflowStatus.COMPENSATED
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]

    def test_resume_expires_a_timed_out_gate(
        self, runtime: WorkflowRuntime, clock: FakeClock, ledger: Ledger
    ) -> None:
        """resume() of a run whose gate timed out undecided expires it instead of waiting."""
        paused(runtime)
        clock.advance(7200)
        assert runtime.resume("refund-1").status is WorkflowStatus.COMPENSATED
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]

    def test_a_gate_approved_in_time_is_not_expired(
        self, runtime: WorkflowRuntime, clock: FakeClock, ledger: Ledger
    ) -> None:
        """Approved before the timeout, the run goes on even when resumed after it."""
        paused(runtime)
        runtime.approve_gate("refund-1", "wire", "alice")
        clock.advance(7200)
        assert runtime.expire_gates() == []
        assert runtime.resume("refund-1").status is WorkflowStatus.COMPLETED
        assert len(ledger.lines()) == 3


class TestStageFailsAfterGate:
    def test_failed_wire_releases_the_funds(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger, tmp_path: Path
    ) -> None:
        """The approved wire raises: FAILED journaled, the reservation released."""
        paused(runtime)
        runtime.approve_gate("refund-1", "wire", "alice")
        (tmp_path / "fail-wire").touch()
        handle = runtime.resume("refund-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert flow(handle) == [
            ("reserve_funds", "COMPENSATED"),
            ("wire", "FAILED"),
            ("notify", "PENDING"),
        ]
        assert handle.error == "RuntimeError: bank rejected the transfer"
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]
        assert chain(sagacity, "refund-1")[6:] == [
            ("INTENT", "wire"),
            ("FAILED", "wire"),
            ("COMPENSATING", "reserve_funds"),
            ("COMPENSATED", "reserve_funds"),
            ("COMPENSATING", "workflow"),
            ("COMPENSATED", "workflow"),
            ("ENDED", None),
        ]

    def test_failed_notice_undoes_in_reverse_and_skips_the_wire(
        self, runtime: WorkflowRuntime, ledger: Ledger, tmp_path: Path
    ) -> None:
        """The notice fails after the wire: the reserve is released; the IRREVERSIBLE wire stays."""
        paused(runtime)
        runtime.approve_gate("refund-1", "wire", "alice")
        (tmp_path / "fail-notify").touch()
        handle = runtime.resume("refund-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert flow(handle) == [
            ("reserve_funds", "COMPENSATED"),
            ("wire", "EXECUTED"),
            ("notify", "FAILED"),
        ]
        assert ledger.lines() == [
            "reserve A-17 120.00",
            "wire 120.00 to DE89370400440532013000",
            "release res-A-17",
        ]


class TestApprovalBinding:
    def test_approval_for_another_hash_is_refused(self, runtime: WorkflowRuntime) -> None:
        """An approver shown another value's hash cannot approve this gate."""
        paused(runtime)
        with pytest.raises(ApprovalHashMismatchError):
            runtime.approve_gate("refund-1", "wire", "alice", sha256="0" * 64)
        assert runtime.get("refund-1").gate is not None
        assert runtime.get("refund-1").stages[1].status is StageStatus.AWAITING_APPROVAL

    def test_edited_journaled_output_is_refused_at_the_gate(
        self, runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger, sqlite_url: str
    ) -> None:
        """Someone rewrites reserve's journaled output after approval: the wire is refused.

        The next stage's value comes from the journal, so the edit changes what the wire
        would receive; its hash no longer matches the approval and nothing is wired.
        """
        import sqlite3

        paused(runtime)
        runtime.approve_gate("refund-1", "wire", "alice")
        path = sqlite_url[len("sqlite:///") :]
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("DROP TRIGGER IF EXISTS sagacity_journal_no_update")
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            ).fetchall():
                db.execute(f'DROP TRIGGER "{name}"')
            (payload,) = db.execute(
                "SELECT payload FROM sagacity_journal WHERE saga_id = 'refund-1' AND seq = 4"
            ).fetchone()
            db.execute(
                "UPDATE sagacity_journal SET payload = ? WHERE saga_id = 'refund-1' AND seq = 4",
                (payload.replace("DE89370400440532013000", "GB00ATTACKER0000000000"),),
            )
        with pytest.raises(ApprovalHashMismatchError):
            runtime.resume("refund-1")
        assert ledger.lines() == ["reserve A-17 120.00"]
        assert not verify(sagacity.journal, "refund-1").ok


def test_start_refuses_an_input_the_first_stage_cannot_take(
    runtime: WorkflowRuntime, sagacity: Sagacity
) -> None:
    """An input that does not fit the first stage's annotation is refused before anything runs."""
    from sagacity.errors import SerializationError

    with pytest.raises(SerializationError, match="stage 'reserve_funds'"):
        runtime.start("refund-request", {"order_id": "A-1"}, run_id="refund-9")
    assert sagacity.history("refund-9") == []


def test_start_refuses_a_run_id_in_use(runtime: WorkflowRuntime) -> None:
    """A run id names one run: starting it again is refused with the way to go on."""
    from sagacity.errors import SagaStateError

    paused(runtime)
    with pytest.raises(SagaStateError, match="resume it with resume"):
        runtime.start("refund-request", REQUEST, run_id="refund-1")


def test_request_type_is_rebuilt(runtime: WorkflowRuntime, ledger: Ledger) -> None:
    """A dict input is rebuilt into the first stage's dataclass, whose fields it reads."""
    handle = runtime.start(
        "refund-request",
        {"order_id": "B-2", "amount": "10", "iban": "DE1"},
        run_id="refund-2",
    )
    assert handle.stages[0].output == {
        "reservation_id": "res-B-2",
        "order_id": "B-2",
        "amount": "10",
        "iban": "DE1",
    }
    assert ledger.lines() == ["reserve B-2 10"]  # `request.order_id`: a dataclass, not a dict


def test_rejected_where_the_workflow_is_not_registered(
    runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger, sqlite_url: str
) -> None:
    """A rejection where the workflow is not registered (the CLI) cannot undo the stages.

    It journals the rejection and leaves the undo, unjournaled, to where the workflow is
    registered: the run needs attention, and `compensate` there undoes the stages.
    """
    paused(runtime)
    elsewhere = Sagacity.from_url(sqlite_url)
    (request,) = elsewhere.pending("refund-1")
    elsewhere.reject("refund-1", approver="bob", reason="no", request_id=request.request_id)
    elsewhere.close()
    assert runtime.get("refund-1").status is WorkflowStatus.NEEDS_ATTENTION
    assert "COMPENSATION_FAILED" not in [e.phase.value for e in sagacity.history("refund-1")]
    assert ledger.lines() == ["reserve A-17 120.00"]
    sagacity.compensate("refund-1")
    handle = runtime.get("refund-1")
    assert handle.status is WorkflowStatus.COMPENSATED
    assert flow(handle)[0] == ("reserve_funds", "COMPENSATED")
    assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]


def test_the_core_resume_cannot_run_a_stage_alone(
    runtime: WorkflowRuntime, sagacity: Sagacity, ledger: Ledger
) -> None:
    """Sagacity.resume_saga without work refuses a run: its gated stage never runs alone.

    Run alone, the wire would end the saga COMPLETED with the notice never sent.
    """
    from sagacity import ConfigurationError

    paused(runtime)
    runtime.approve_gate("refund-1", "wire", "alice")
    with pytest.raises(ConfigurationError, match="is not wrapped by this Sagacity"):
        sagacity.resume_saga("refund-1")
    assert ledger.lines() == ["reserve A-17 120.00"]
    assert runtime.resume("refund-1").status is WorkflowStatus.COMPLETED


def test_the_starter_cannot_approve_the_gate(runtime: WorkflowRuntime, ledger: Ledger) -> None:
    """Four eyes: the principal who started the run is refused as the gate's approver."""
    from sagacity.errors import SelfApprovalError

    runtime.start("refund-request", REQUEST, run_id="refund-1", started_by="mallory")
    with pytest.raises(SelfApprovalError):
        runtime.approve_gate("refund-1", "wire", "mallory")
    runtime.approve_gate("refund-1", "wire", "alice")
    assert runtime.resume("refund-1").status is WorkflowStatus.COMPLETED
    assert len(ledger.lines()) == 3


def test_a_request_past_the_approval_ttl_is_asked_again(
    sqlite_url: str, clock: FakeClock, ledger: Ledger
) -> None:
    """With Sagacity(approval_ttl=...) shorter than the gate, resume asks for the gate again.

    The expired request cannot be approved; resuming asks anew for the same value, and
    that request is approved and runs.
    """
    sagacity = Sagacity.from_url(sqlite_url, clock=clock, approval_ttl=60)
    runtime = WorkflowRuntime(sagacity, [RefundWorkflow(ledger)])
    first = paused(runtime).gate
    assert first is not None
    clock.advance(61)
    with pytest.raises(ApprovalExpiredError):
        runtime.approve_gate("refund-1", "wire", "alice")
    again = runtime.resume("refund-1")
    assert again.status is WorkflowStatus.PAUSED_AT_GATE
    assert again.gate is not None
    assert again.gate.request_id != first.request_id
    assert again.gate.input_sha256 == first.input_sha256
    runtime.approve_gate("refund-1", "wire", "alice", sha256=first.input_sha256)
    assert runtime.resume("refund-1").status is WorkflowStatus.COMPLETED
    assert ledger.lines()[1] == "wire 120.00 to DE89370400440532013000"
    sagacity.close()
