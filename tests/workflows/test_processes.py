"""Crash safety across processes: SIGKILL at every stage boundary and inside stages.

A run is started (or resumed) in a child process that is killed at a chosen point; a
second process resumes it from the journal; a third approves the gate. A stage that
EXECUTED is never run again (the ledger shows each effect once); a stage in doubt is
not re-run and the run waits for a human.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity, verify
from sagacity.workflows import WorkflowRuntime, WorkflowStatus
from tests.processes._kill import ROOT, run_until_killed
from tests.workflows._receipt import ReceiptWorkflow
from tests.workflows._refund import Ledger, RefundWorkflow

pytestmark = pytest.mark.slow

RUN = "refund-7"
RESERVED = "reserve A-17 120.00"
WIRED = "wire 120.00 to DE89370400440532013000"
NOTIFIED = "notify wire-A-17"


def child(action: str, url: str, folder: Path) -> str:
    """Run the child to the end; return the status it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.workflows._child", action, url, str(folder), RUN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def kill_at(action: str, url: str, folder: Path, point: str) -> None:
    run_until_killed("tests.workflows._child", action, url, str(folder), RUN, point, when=point)


_opened: list[Sagacity] = []


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    """Close what `here` opened once the test ends."""
    yield
    while _opened:
        _opened.pop().close()


def here(url: str, folder: Path) -> tuple[Sagacity, WorkflowRuntime]:
    """This process, as the second one: it waits for the killed worker's lease."""
    sagacity = Sagacity.from_url(url, lease_wait=15)
    _opened.append(sagacity)
    ledger = Ledger(folder / "ledger.txt")
    return sagacity, WorkflowRuntime(sagacity, [RefundWorkflow(ledger), ReceiptWorkflow(ledger)])


def lines(folder: Path) -> list[str]:
    return Ledger(folder / "ledger.txt").lines()


class TestKilledWhileStarting:
    @pytest.mark.parametrize(
        "point",
        [
            "after:INTENT:workflow",  # the start's INTENT, before it is EXECUTED
            "after:EXECUTED:workflow",  # before the first stage
            "after:EXECUTED:reserve_funds",  # between the stages, before the check and gate
        ],
    )
    def test_resume_from_a_second_process_goes_on_to_the_gate(
        self, sqlite_url: str, tmp_path: Path, point: str
    ) -> None:
        """Killed at a boundary, the run resumes in another process and pauses at the gate."""
        kill_at("start", sqlite_url, tmp_path, point)
        sagacity, runtime = here(sqlite_url, tmp_path)
        handle = runtime.resume(RUN)
        assert handle.status is WorkflowStatus.PAUSED_AT_GATE
        assert handle.current_stage == "wire"
        assert lines(tmp_path) == [RESERVED]  # reserve ran once, before or after the kill
        # The start's result names the stages the run follows, even when resume settled it.
        (started,) = [
            e
            for e in sagacity.history(RUN)
            if e.phase is Phase.EXECUTED and e.call_id == "workflow"
        ]
        assert started.payload["result"]["workflow"] == "refund-request"
        assert started.payload["result"]["stages"] == ["reserve_funds", "wire", "notify"]
        assert verify(sagacity.journal, RUN).ok
        # Approved from a third process, finished from this one.
        assert child("approve", sqlite_url, tmp_path) == "PAUSED_AT_GATE"
        assert runtime.resume(RUN).status is WorkflowStatus.COMPLETED
        assert lines(tmp_path) == [RESERVED, WIRED, NOTIFIED]

    @pytest.mark.parametrize(
        ("point", "effects"),
        [
            ("after:INTENT:reserve_funds", []),  # before the effect
            ("inside:reserve_funds", [RESERVED]),  # after the effect, before EXECUTED
        ],
    )
    def test_a_stage_in_doubt_is_not_run_again(
        self, sqlite_url: str, tmp_path: Path, point: str, effects: list[str]
    ) -> None:
        """Killed inside a stage: NEEDS_ATTENTION, the stage is not re-run until a human says."""
        kill_at("start", sqlite_url, tmp_path, point)
        sagacity, runtime = here(sqlite_url, tmp_path)
        handle = runtime.resume(RUN)
        assert handle.status is WorkflowStatus.NEEDS_ATTENTION
        assert handle.stages[0].status.value == "IN_DOUBT"
        assert runtime.resume(RUN).status is WorkflowStatus.NEEDS_ATTENTION
        assert lines(tmp_path) == effects
        # A human finds the reservation was (or was not) made, and the run goes on.
        if effects:
            sagacity.resolve(
                RUN,
                "reserve_funds",
                executed=True,
                result={
                    "reservation_id": "res-A-17",
                    "order_id": "A-17",
                    "amount": "120.00",
                    "iban": "DE89370400440532013000",
                },
                by="operator-dana",
            )
        else:
            sagacity.resolve(RUN, "reserve_funds", executed=False, by="operator-dana")
        assert runtime.resume(RUN).status is WorkflowStatus.PAUSED_AT_GATE
        assert lines(tmp_path) == [RESERVED]


class TestKilledAfterTheGate:
    @pytest.fixture
    def approved(self, sqlite_url: str, tmp_path: Path) -> None:
        """A run paused at its gate by one process and approved by another."""
        assert child("start", sqlite_url, tmp_path) == "PAUSED_AT_GATE"
        assert child("approve", sqlite_url, tmp_path) == "PAUSED_AT_GATE"

    @pytest.mark.usefixtures("approved")
    @pytest.mark.parametrize(
        ("point", "effects"),
        [
            # between wire and notify; the wire's used request is still stored
            ("after:EXECUTED:wire", [RESERVED, WIRED]),
            ("after:EXECUTED:notify", [RESERVED, WIRED, NOTIFIED]),  # before ENDED
        ],
    )
    def test_resume_finishes_without_repeating_a_stage(
        self, sqlite_url: str, tmp_path: Path, point: str, effects: list[str]
    ) -> None:
        """Killed between stages after the approval: the next process completes the run."""
        kill_at("resume", sqlite_url, tmp_path, point)
        assert lines(tmp_path) == effects
        sagacity, runtime = here(sqlite_url, tmp_path)
        assert runtime.resume(RUN).status is WorkflowStatus.COMPLETED
        assert lines(tmp_path) == [RESERVED, WIRED, NOTIFIED]
        wires = [
            e for e in sagacity.history(RUN) if e.phase is Phase.INTENT and e.call_id == "wire"
        ]
        assert len(wires) == 1
        assert verify(sagacity.journal, RUN).ok

    @pytest.mark.usefixtures("approved")
    @pytest.mark.parametrize(
        ("point", "effects"),
        [
            ("after:INTENT:wire", [RESERVED]),
            ("inside:wire", [RESERVED, WIRED]),
        ],
    )
    def test_a_wire_in_doubt_is_never_sent_again(
        self, sqlite_url: str, tmp_path: Path, point: str, effects: list[str]
    ) -> None:
        """Killed inside the IRREVERSIBLE wire: the run needs attention; resume sends nothing."""
        kill_at("resume", sqlite_url, tmp_path, point)
        _, runtime = here(sqlite_url, tmp_path)
        handle = runtime.resume(RUN)
        assert handle.status is WorkflowStatus.NEEDS_ATTENTION
        assert handle.current_stage == "wire"
        assert lines(tmp_path) == effects
        assert child("resume", sqlite_url, tmp_path) == "NEEDS_ATTENTION"
        assert lines(tmp_path) == effects


class TestKilledWhileFailing:
    def test_killed_after_a_check_refused_the_wire(self, sqlite_url: str, tmp_path: Path) -> None:
        """Killed after the REFUSED entry, before the walk: the next process compensates."""
        (tmp_path / "low-budget").touch()
        kill_at("start", sqlite_url, tmp_path, "after:REFUSED:wire")
        assert lines(tmp_path) == [RESERVED]
        _, runtime = here(sqlite_url, tmp_path)
        assert runtime.get(RUN).status is WorkflowStatus.RUNNING
        handle = runtime.resume(RUN)
        assert handle.status is WorkflowStatus.COMPENSATED
        assert [(s.name, s.status.value) for s in handle.stages][:2] == [
            ("reserve_funds", "COMPENSATED"),
            ("wire", "CHECK_FAILED"),
        ]
        assert lines(tmp_path) == [RESERVED, "release res-A-17"]

    def test_killed_after_the_rejection(self, sqlite_url: str, tmp_path: Path) -> None:
        """Killed after REJECTED, before the walk: the next process compensates; no wire."""
        assert child("start", sqlite_url, tmp_path) == "PAUSED_AT_GATE"
        kill_at("reject", sqlite_url, tmp_path, "after:REJECTED:wire")
        sagacity, runtime = here(sqlite_url, tmp_path)
        assert runtime.resume(RUN).status is WorkflowStatus.COMPENSATED
        assert lines(tmp_path) == [RESERVED, "release res-A-17"]
        assert verify(sagacity.journal, RUN).ok


class TestKilledWhileFailingAfterTheGate:
    @pytest.mark.parametrize(
        "point",
        [
            "after:FAILED:notify",  # the stage after the approved wire failed; no walk yet
            "after:COMPENSATED:reserve_funds",  # the walk ran, the run is not ENDED
        ],
    )
    def test_the_next_process_undoes_once_and_never_wires_again(
        self, sqlite_url: str, tmp_path: Path, point: str
    ) -> None:
        """`notify` fails after the approved wire; killed in the failure, resumed elsewhere.

        The funds are released once, the wire (IRREVERSIBLE) is neither sent again nor
        undone, and `notify` is not tried again.
        """
        assert child("start", sqlite_url, tmp_path) == "PAUSED_AT_GATE"
        assert child("approve", sqlite_url, tmp_path) == "PAUSED_AT_GATE"
        (tmp_path / "fail-notify").touch()
        kill_at("resume", sqlite_url, tmp_path, point)
        sagacity, runtime = here(sqlite_url, tmp_path)
        handle = runtime.resume(RUN)
        assert handle.status is WorkflowStatus.COMPENSATED
        assert [(s.name, s.status.value) for s in handle.stages] == [
            ("reserve_funds", "COMPENSATED"),
            ("wire", "EXECUTED"),
            ("notify", "FAILED"),
        ]
        assert lines(tmp_path) == [RESERVED, WIRED, "release res-A-17"]
        assert runtime.resume(RUN) == handle
        assert lines(tmp_path) == [RESERVED, WIRED, "release res-A-17"]
        intents = [e.call_id for e in sagacity.history(RUN) if e.phase is Phase.INTENT]
        assert intents == ["workflow", "reserve_funds", "wire", "notify"]
        assert verify(sagacity.journal, RUN).ok


class TestKilledAfterAnOutputWithNoJsonForm:
    def test_the_resumed_run_fails_as_the_uninterrupted_one(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """Killed after a stage whose output has no JSON form: `file` never runs on null.

        Uninterrupted, the run fails at `issue`'s output and undoes it; resumed after a
        kill that followed `issue`'s EXECUTED, it fails the same way, with the same error.
        """
        alone = tmp_path / "uninterrupted"
        alone.mkdir()
        whole = Sagacity.from_url(f"sqlite:///{alone / 'sagacity.db'}")
        try:
            runtime = WorkflowRuntime(whole, [ReceiptWorkflow(Ledger(alone / "ledger.txt"))])
            uninterrupted = runtime.start("receipt", "R-1", run_id=RUN)
        finally:
            whole.close()
        assert uninterrupted.status is WorkflowStatus.COMPENSATED
        kill_at("start-receipt", sqlite_url, tmp_path, "after:EXECUTED:issue")
        assert lines(tmp_path) == ["note R-1", "issue R-1"]
        sagacity, runtime = here(sqlite_url, tmp_path)
        resumed = runtime.resume(RUN)
        assert resumed == uninterrupted
        assert resumed.error is not None
        assert resumed.error.startswith(
            "SerializationError: workflow 'receipt' stage 'issue' output has no JSON form"
        )
        assert "Receipt('R-1')" in resumed.error
        assert [(s.name, s.status.value) for s in resumed.stages] == [
            ("note", "COMPENSATED"),
            ("issue", "COMPENSATED"),
            ("file", "PENDING"),
        ]
        assert lines(tmp_path) == ["note R-1", "issue R-1", "void R-1"]
        assert lines(alone) == lines(tmp_path)
        assert verify(sagacity.journal, RUN).ok


class TestKilledWhileAskingAtTheGate:
    """Killed after the gate's AWAITING_APPROVAL entry, before its request was stored."""

    POINT = "after:AWAITING_APPROVAL:wire"

    def test_the_gate_read_from_the_journal_is_approved_and_the_run_completes(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """The run shows the gate the journal records; approved, another process finishes it."""
        kill_at("start", sqlite_url, tmp_path, self.POINT)
        sagacity, runtime = here(sqlite_url, tmp_path)
        (asked,) = [e for e in sagacity.history(RUN) if e.phase is Phase.AWAITING_APPROVAL]
        assert sagacity.pending(RUN) == []  # the store write never happened
        shown = runtime.get(RUN)
        assert shown.status is WorkflowStatus.PAUSED_AT_GATE
        assert shown.gate is not None
        assert (shown.gate.stage_name, shown.gate.request_id, shown.gate.input_sha256) == (
            "wire",
            asked.payload["request_id"],
            asked.payload["input_sha256"],
        )
        approved = runtime.approve_gate(RUN, "wire", "carol", sha256=shown.gate.input_sha256)
        assert approved.status is WorkflowStatus.PAUSED_AT_GATE
        assert [r.request_id for r in sagacity.pending(RUN)] == [asked.payload["request_id"]]
        assert child("resume", sqlite_url, tmp_path) == "COMPLETED"
        assert lines(tmp_path) == [RESERVED, WIRED, NOTIFIED]
        history = sagacity.history(RUN)
        assert [
            (e.payload["approver"], e.ref_seq) for e in history if e.phase is Phase.APPROVED
        ] == [("carol", asked.seq)]
        assert [e.seq for e in history if e.phase is Phase.AWAITING_APPROVAL] == [asked.seq]
        assert verify(sagacity.journal, RUN).ok

    def test_resume_stores_the_request_again(self, sqlite_url: str, tmp_path: Path) -> None:
        """`resume` pauses the run at the gate under its journaled request; none is asked anew."""
        kill_at("start", sqlite_url, tmp_path, self.POINT)
        sagacity, runtime = here(sqlite_url, tmp_path)
        (asked,) = [e for e in sagacity.history(RUN) if e.phase is Phase.AWAITING_APPROVAL]
        handle = runtime.resume(RUN)
        assert handle.status is WorkflowStatus.PAUSED_AT_GATE
        (request,) = sagacity.pending(RUN)
        assert (request.request_id, request.seq, request.input_sha256) == (
            asked.payload["request_id"],
            asked.seq,
            asked.payload["input_sha256"],
        )
        assert [g.request_id for g in runtime.pending_gates(RUN)] == [request.request_id]
        assert [e.seq for e in sagacity.history(RUN) if e.phase is Phase.AWAITING_APPROVAL] == [
            asked.seq
        ]
        assert lines(tmp_path) == [RESERVED]

    def test_the_lost_gate_can_be_rejected(self, sqlite_url: str, tmp_path: Path) -> None:
        """Rejected without a resume: the run compensates and the wire is never sent."""
        kill_at("start", sqlite_url, tmp_path, self.POINT)
        sagacity, runtime = here(sqlite_url, tmp_path)
        handle = runtime.reject_gate(RUN, "wire", "dave", "not this one")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert [(s.name, s.status.value) for s in handle.stages][:2] == [
            ("reserve_funds", "COMPENSATED"),
            ("wire", "REJECTED"),
        ]
        assert lines(tmp_path) == [RESERVED, "release res-A-17"]
        assert sagacity.pending(RUN) == []
        assert verify(sagacity.journal, RUN).ok


class TestKilledInsideAnUndoThatDoesNothing:
    @pytest.mark.parametrize(
        ("action", "point", "effects"),
        [
            # the budget check refuses the wire; the walk releases, then undoes the start
            ("start", "after:COMPENSATING:workflow", [RESERVED, "release res-A-17"]),
            # `issue`'s output fails the run; the walk voids it, then undoes `note`
            ("start-receipt", "after:COMPENSATING:note", ["note R-1", "issue R-1", "void R-1"]),
        ],
    )
    def test_resume_runs_it_again_and_the_run_compensates(
        self, sqlite_url: str, tmp_path: Path, action: str, point: str, effects: list[str]
    ) -> None:
        """The no-op undo of the start (or of a stage with no effect) is never in doubt."""
        (tmp_path / "low-budget").touch()
        kill_at(action, sqlite_url, tmp_path, point)
        sagacity, runtime = here(sqlite_url, tmp_path)
        handle = runtime.resume(RUN)
        assert handle.status is WorkflowStatus.COMPENSATED
        assert lines(tmp_path) == effects
        call_id = point.rsplit(":", 1)[1]
        assert [
            (e.phase, e.payload)
            for e in sagacity.history(RUN)
            if e.call_id == call_id and e.phase in (Phase.COMPENSATING, Phase.COMPENSATED)
        ] == [
            (Phase.COMPENSATING, {"attempt": 1}),
            (Phase.COMPENSATING, {"attempt": 2}),
            (Phase.COMPENSATED, None),
        ]
        (ended,) = [e for e in sagacity.history(RUN) if e.phase is Phase.ENDED]
        assert ended.payload["in_doubt"] == []
        assert verify(sagacity.journal, RUN).ok


def test_a_pause_survives_its_process(sqlite_url: str, tmp_path: Path) -> None:
    """The process that paused exits; another approves; a third finishes the run."""
    assert child("start", sqlite_url, tmp_path) == "PAUSED_AT_GATE"
    assert child("approve", sqlite_url, tmp_path) == "PAUSED_AT_GATE"
    assert child("resume", sqlite_url, tmp_path) == "COMPLETED"
    assert lines(tmp_path) == [RESERVED, WIRED, NOTIFIED]
    sagacity, _ = here(sqlite_url, tmp_path)
    approved = [e for e in sagacity.history(RUN) if e.phase is Phase.APPROVED]
    assert [e.payload["approver"] for e in approved] == ["carol"]
