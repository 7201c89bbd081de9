"""The one question a resume without work asks: which approved call may run now, and how.

`ApprovalLifecycle.resumable` answers from the journal, on every backend: the pending
request as its AWAITING_APPROVAL entry records it, or the refusal that says why nothing
can run. Asking journals nothing; the approvals are checked when the call runs.
"""

from __future__ import annotations

import dataclasses

import pytest

from sagacity import (
    ApprovalAlreadyUsedError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    Sagacity,
    SagaOutcome,
    SagaStateError,
)
from sagacity.approval import ResumableCall
from tests._shop import Shop, order_then_wire, tools_of

SAGA = "wire-1"
WIRE_INPUT = {"amount": "900.00", "to": "ACME"}


def waiting_wire(sagacity: Sagacity) -> Shop:
    """Run a saga that reserves stock and waits for approval of a wire transfer."""
    shop = Shop()
    result = sagacity.saga(SAGA, order_then_wire(tools_of(sagacity, shop)))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    return shop


class TestResumable:
    def test_the_answer_is_the_journaled_call(self, sagacity: Sagacity) -> None:
        """The answer names the waiting call, its tool and journaled input; nothing is appended."""
        waiting_wire(sagacity)
        before = sagacity.history(SAGA)
        awaiting = before[-1]
        call = sagacity.approval.resumable(SAGA, None)
        assert isinstance(call, ResumableCall)
        assert (call.request.seq, call.request.call_id, call.request.tool_name) == (
            awaiting.seq,
            awaiting.call_id,
            "send_wire_transfer",
        )
        assert call.request.input == WIRE_INPUT
        assert call.request.request_id == awaiting.payload["request_id"]
        assert sagacity.history(SAGA) == before
        with pytest.raises(dataclasses.FrozenInstanceError):
            call.request = call.request

    def test_an_unapproved_call_is_still_the_answer(self, sagacity: Sagacity) -> None:
        """Whether it is approved is for the run's check: resume_saga then refuses, nothing runs."""
        shop = waiting_wire(sagacity)
        assert sagacity.approval.resumable(SAGA, None).request.tool_name == "send_wire_transfer"
        with pytest.raises(ApprovalMissingError, match="no approval is journaled"):
            sagacity.resume_saga(SAGA)
        assert shop.calls["send_wire_transfer"] == 0

    def test_a_request_that_is_not_pending_is_not_found(self, sagacity: Sagacity) -> None:
        """A request id the saga does not have is named in the refusal."""
        waiting_wire(sagacity)
        with pytest.raises(ApprovalNotFoundError, match="no pending approval request 'nope'"):
            sagacity.approval.resumable(SAGA, "nope")

    def test_a_rejected_request_says_so(self, sagacity: Sagacity) -> None:
        """After a rejection ended the saga, the answer is the rejection, with who and why."""
        waiting_wire(sagacity)
        sagacity.reject(SAGA, approver="bob@treasury", reason="wrong beneficiary")
        with pytest.raises(ApprovalRejectedError, match="'bob@treasury': wrong beneficiary"):
            sagacity.approval.resumable(SAGA, None)

    def test_a_call_that_ran_says_so(self, sagacity: Sagacity) -> None:
        """After the approved call ran, the answer is that the approval was used."""
        shop = waiting_wire(sagacity)
        sagacity.approve(SAGA, approver="alice@treasury")
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        with pytest.raises(ApprovalAlreadyUsedError, match="already ran"):
            sagacity.approval.resumable(SAGA, None)
        assert shop.calls["send_wire_transfer"] == 1

    def test_a_saga_that_ended_otherwise_has_nothing_to_resume(self, sagacity: Sagacity) -> None:
        """A saga compensated while it waited ends with SagaStateError naming its outcome."""
        waiting_wire(sagacity)
        sagacity.compensate(SAGA)
        with pytest.raises(
            SagaStateError, match=r"ended COMPENSATED at seq \d+; there is nothing to resume"
        ):
            sagacity.approval.resumable(SAGA, None)


class TestRefuseIfSpent:
    def test_an_answer_read_before_another_run_is_refused_after_it(
        self, sagacity: Sagacity
    ) -> None:
        """The answer is checked again against the journal read under the lease."""
        waiting_wire(sagacity)
        sagacity.approve(SAGA, approver="alice@treasury")
        call = sagacity.approval.resumable(SAGA, None)
        call.refuse_if_spent(sagacity.approval.history(SAGA))  # unused yet: no refusal
        sagacity.resume_saga(SAGA)  # another worker runs it meanwhile
        with pytest.raises(ApprovalAlreadyUsedError, match="an approval is used once"):
            call.refuse_if_spent(sagacity.approval.history(SAGA))
