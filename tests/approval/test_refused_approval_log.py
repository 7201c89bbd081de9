"""A refused `approve` journals nothing, so it is logged: one WARNING on the `sagacity` logger.

The line names the saga, the approver and why (`docs/observability.md`):
`saga 'wire-1': approval by 'mallory' refused (self_approval): <the refusal's message>`.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sagacity import (
    ApprovalAlreadyGivenError,
    ApprovalAlreadyUsedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ConfigurationError,
    Phase,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    SelfApprovalError,
)
from sagacity.audit import generate_key
from sagacity.testing import FakeClock
from sagacity.workflows import WorkflowRuntime
from tests._shop import Shop, order_then_wire, tools_of
from tests.approval._policy import OpenSagacity
from tests.approval.test_approval import SAGA, Waiting, tamper, waiting_saga
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow

Refused = Callable[[], object]


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The WARNING records of the `sagacity` logger tree."""
    with caplog.at_level(logging.WARNING, logger="sagacity"):
        yield caplog


@pytest.fixture
def waiting(sagacity: Sagacity) -> Waiting:
    """A saga waiting for approval of a wire transfer, on each backend."""
    return waiting_saga(sagacity)


def refused_line(
    caplog: pytest.LogCaptureFixture,
    approve: Refused,
    error: type[Exception],
    *,
    saga_id: str = SAGA,
    approver: str,
    reason: str,
) -> str:
    """Run the refused `approve`; return its log line after checking its fields."""
    caplog.clear()
    with pytest.raises(error) as refused:
        approve()
    (record,) = [r for r in caplog.records if r.name.startswith("sagacity")]
    assert (record.name, record.levelno) == ("sagacity", logging.WARNING)
    assert record.args == (saga_id, approver, reason, refused.value)
    line = record.getMessage()
    assert line == f"saga {saga_id!r}: approval by {approver!r} refused ({reason}): {refused.value}"
    return line


class TestRefusedApprovalsAreLogged:
    def test_a_hash_the_request_does_not_have(
        self, waiting: Waiting, warnings: pytest.LogCaptureFixture
    ) -> None:
        """The approver was shown another hash: `hash_mismatch`, and nothing journaled."""
        line = refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="alice", expected_sha256="ab" * 32),
            ApprovalHashMismatchError,
            approver="alice",
            reason="hash_mismatch",
        )
        assert "the approver was shown sha256 abababababab…" in line
        assert Phase.APPROVED not in [e.phase for e in waiting.sagacity.history(SAGA)]

    def test_a_request_the_saga_does_not_have(
        self, waiting: Waiting, warnings: pytest.LogCaptureFixture
    ) -> None:
        """A wrong request id, or a saga with no request: `request_not_found`."""
        line = refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="alice", request_id="nope"),
            ApprovalNotFoundError,
            approver="alice",
            reason="request_not_found",
        )
        assert line.endswith("has no pending approval request 'nope'")
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve("order-9", approver="alice"),
            ApprovalNotFoundError,
            saga_id="order-9",
            approver="alice",
            reason="request_not_found",
        )

    def test_self_approval(self, sagacity: Sagacity, warnings: pytest.LogCaptureFixture) -> None:
        """The saga's starter approving its own request: `self_approval`."""
        tools = tools_of(sagacity, Shop())
        started = sagacity.saga(SAGA, order_then_wire(tools), started_by="mallory")
        assert started.outcome is SagaOutcome.AWAITING_APPROVAL
        line = refused_line(
            warnings,
            lambda: sagacity.approve(SAGA, approver="mallory"),
            SelfApprovalError,
            approver="mallory",
            reason="self_approval",
        )
        assert "'mallory' started the saga" in line

    def test_approved_already(self, waiting: Waiting, warnings: pytest.LogCaptureFixture) -> None:
        """A second approval of a request that has the one it needs: `already_approved`."""
        waiting.sagacity.approve(SAGA, approver="alice")
        assert warnings.records == []  # an approval that is recorded logs no warning
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="bob"),
            ApprovalAlreadyGivenError,
            approver="bob",
            reason="already_approved",
        )

    def test_used_already(self, waiting: Waiting, warnings: pytest.LogCaptureFixture) -> None:
        """The approved call ran: `already_used`."""
        waiting.approve_and_resume_once()
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="bob"),
            ApprovalAlreadyUsedError,
            approver="bob",
            reason="already_used",
        )

    def test_rejected(self, waiting: Waiting, warnings: pytest.LogCaptureFixture) -> None:
        """The request was rejected: `rejected`; put back in the store: `saga_ended`."""
        waiting.sagacity.reject(SAGA, approver="carol", reason="no")
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="bob"),
            ApprovalRejectedError,
            approver="bob",
            reason="rejected",
        )
        waiting.sagacity.approvals.save(waiting.request)
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="bob"),
            SagaStateError,
            approver="bob",
            reason="saga_ended",
        )

    def test_expired(self, open_sagacity: OpenSagacity, warnings: pytest.LogCaptureFixture) -> None:
        """Approved too late: `expired`."""
        clock = FakeClock()
        waiting = waiting_saga(open_sagacity(approval_ttl=60, clock=clock))
        clock.advance(60)
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="bob"),
            ApprovalExpiredError,
            approver="bob",
            reason="expired",
        )

    def test_a_stored_request_that_was_changed(
        self, open_sagacity: OpenSagacity, store_url: str, warnings: pytest.LogCaptureFixture
    ) -> None:
        """The store disagrees with the journal: `request_changed`."""
        waiting = waiting_saga(open_sagacity(approval_ttl=60, clock=FakeClock()))
        assert waiting.request.expires_at is not None
        later = waiting.request.expires_at + datetime.timedelta(days=30)
        tamper(waiting.sagacity, store_url, waiting.request, expires_at=later)
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="bob"),
            ApprovalMissingError,
            approver="bob",
            reason="request_changed",
        )

    def test_a_process_that_cannot_sign(
        self, open_sagacity: OpenSagacity, warnings: pytest.LogCaptureFixture
    ) -> None:
        """Signatures required and no signing key here: `cannot_sign`."""
        key = generate_key()
        waiting = waiting_saga(
            open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        )
        refused_line(
            warnings,
            lambda: waiting.sagacity.approve(SAGA, approver="bob"),
            ConfigurationError,
            approver="bob",
            reason="cannot_sign",
        )

    def test_every_refusal_is_an_approval_error_logged_once(
        self, waiting: Waiting, warnings: pytest.LogCaptureFixture
    ) -> None:
        """Refused twice, logged twice: one line per refusal, none for the approval itself."""
        for _ in range(2):
            with pytest.raises(ApprovalError):
                waiting.sagacity.approve(SAGA, approver="alice", request_id="nope")
        waiting.sagacity.approve(SAGA, approver="alice")
        assert [r.args[2] for r in warnings.records if isinstance(r.args, tuple)] == [
            "request_not_found",
            "request_not_found",
        ]


class TestWorkflowGate:
    def test_a_gate_approved_for_another_value_is_logged_with_the_run(
        self, sagacity: Sagacity, tmp_path: Path, warnings: pytest.LogCaptureFixture
    ) -> None:
        """`approve_gate` with a hash the gate does not wait for: the run id is the saga."""
        runtime = WorkflowRuntime(sagacity, [RefundWorkflow(Ledger(tmp_path / "ledger.txt"))])
        assert runtime.start("refund-request", REQUEST, run_id="refund-3").gate is not None
        refused_line(
            warnings,
            lambda: runtime.approve_gate("refund-3", "wire", "carol", sha256="cd" * 32),
            ApprovalHashMismatchError,
            saga_id="refund-3",
            approver="carol",
            reason="hash_mismatch",
        )
