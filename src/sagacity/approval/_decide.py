"""Deciding on a request: approve, reject, and a framework's own decline inside a run.

Each decision is journaled by a conditional append on the saga's last seq: a writer that
appended first (another approver, the approved call's INTENT) makes it decide again on
what that writer wrote, so a rejection never lands after the call started.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Protocol

from sagacity import _telemetry
from sagacity._history import SagaHistory
from sagacity._unicode import principal_key
from sagacity.approval._check import check_current, check_unused, journaled_request
from sagacity.approval._pending import PendingRequests
from sagacity.approval._policy import refuse_self_approval
from sagacity.approval._provenance import checked_justification, checked_via, initiated_of
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import (
    AppendConflictError,
    ApprovalAlreadyGivenError,
    ApprovalAlreadyUsedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ConfigurationError,
    JournalError,
    SagaStateError,
    SelfApprovalError,
)
from sagacity.journal import JournalEntry, JsonValue, Phase

__all__ = ["LeaseHolder", "RequestDecisions", "refuse_ended"]


class LeaseHolder(Protocol):
    """Fences a history's appends by a saga lease (`sagacity._leasing.LeaseKeeper`)."""

    def hold(self, history: SagaHistory) -> SagaHistory:
        """Make `history`'s appends fenced by the lease."""
        ...


_DECISION_RETRIES = 8
"""How often a decision re-reads the saga after another writer appended first."""


class RequestDecisions(PendingRequests):
    """Approving, rejecting and declining requests: part of `ApprovalLifecycle`."""

    now: Callable[[], datetime.datetime]

    def approve(
        self,
        saga_id: str,
        *,
        approver: str,
        request_id: str | None,
        expected_sha256: str | None,
        justification: str | None = None,
        via: str | None = None,
    ) -> JournalEntry:
        """Journal APPROVED for a pending request, after every check (see `Sagacity.approve`).

        A `justification` is journaled with it, and covered by its signature; a tool that
        requires one refuses an approval without it (`ApprovalError`). `via`, the channel
        it came through ("python" when None), is journaled and signed too (`ValueError`
        when it is not a short lowercase name).

        Refused, with nothing journaled, for the saga's starter or the input's editor
        (`SelfApprovalError`), for an approver whose approval counts already, and once the
        request has all the approvals it needs (`ApprovalAlreadyGivenError`). Each refusal
        is logged as a WARNING naming the saga, the approver and why: it leaves no entry.
        """
        channel = checked_via(via)
        try:
            return self._approve(
                saga_id,
                approver=approver,
                request_id=request_id,
                expected_sha256=expected_sha256,
                justification=justification,
                via=channel,
            )
        except (ApprovalError, SagaStateError, ConfigurationError) as refusal:
            _approval_refused(saga_id, approver, refusal)
            raise

    def _approve(
        self,
        saga_id: str,
        *,
        approver: str,
        request_id: str | None,
        expected_sha256: str | None,
        justification: str | None,
        via: str,
    ) -> JournalEntry:
        for _ in range(_DECISION_RETRIES):
            history = self.history(saga_id)
            request = self._pending(history, request_id)
            refuse_ended(history)
            check_unused(request, history)
            check_current(request, history)
            refuse_self_approval(request, approver)
            counted = request.approvals
            me = principal_key(approver)
            mine = next((a for a in counted if principal_key(a.approver) == me), None)
            if mine is not None:
                raise ApprovalAlreadyGivenError(
                    f"saga {saga_id!r}: request {request.request_id} for tool "
                    f"{request.tool_name!r} was approved by {approver!r} at {mine.approved_at} "
                    f"(seq {mine.seq}); an approver approves a request once"
                )
            if len(counted) >= request.approvers_required:
                first = counted[0]
                raise ApprovalAlreadyGivenError(
                    f"saga {saga_id!r}: request {request.request_id} for tool "
                    f"{request.tool_name!r} was approved by {first.approver!r} at "
                    f"{first.approved_at} (seq {first.seq})"
                    + (
                        f" and {len(counted) - 1} more, {len(counted)} of "
                        f"{request.approvers_required} needed"
                        if len(counted) > 1
                        else ""
                    )
                    + "; a request is approved once"
                )
            if request.expired(self.now()):
                raise ApprovalExpiredError(
                    f"saga {saga_id!r}: request {request.request_id} expired at "
                    f"{request.expires_at}; resume the saga to ask again, or reject it"
                )
            if expected_sha256 is not None and expected_sha256 != request.input_sha256:
                raise ApprovalHashMismatchError(
                    f"saga {saga_id!r}: the approver was shown sha256 {expected_sha256[:12]}…, "
                    f"but request {request.request_id} is for {request.input_sha256[:12]}…; "
                    "show the approver the current input"
                )
            given = checked_justification(
                request, history, justification, self.justification_required
            )
            payload: dict[str, JsonValue] = {
                "request_id": request.request_id,
                "approver": approver,
                "input_sha256": request.input_sha256,
            }
            if given is not None:  # left out when none: an entry reads as it did before
                payload["justification"] = given
            payload["via"] = via
            initiated = initiated_of(history, request)
            if initiated is not None:  # what asked, copied so the decision reads alone
                payload["initiated_by"] = initiated
            payload.update(self.policy.signature(saga_id, request, approver, given, via))
            try:
                entry = history.append(
                    self.journal,
                    Phase.APPROVED,
                    tool_name=request.tool_name,
                    call_id=request.call_id,
                    ref_seq=request.seq,
                    payload=payload,
                    expected_seq=history.last_seq,
                )
            except AppendConflictError:
                continue  # another writer appended: decide again on what it wrote
            _telemetry.approval_event(
                saga_id, "approval.approve", request_id=request.request_id, tool=request.tool_name
            )
            return entry
        raise _lost_races(saga_id, "approval")

    def reject(
        self,
        saga_id: str,
        *,
        approver: str,
        reason: str,
        request_id: str | None,
        keeper: LeaseHolder | None = None,
        via: str | None = None,
    ) -> SagaHistory:
        """Journal REJECTED and consume the request; return the saga's history after it.

        `via`, the channel the rejection came through ("python" when None), is journaled.

        A request whose stored copy was changed can still be rejected: the rejection
        names the journal's AWAITING_APPROVAL entry.

        Raises:
            ApprovalAlreadyUsedError: The approved call started running.
        """
        channel = checked_via(via)
        for _ in range(_DECISION_RETRIES):
            history = self.history(saga_id)
            if keeper is not None:
                keeper.hold(history)
            stored = self._stored(saga_id, request_id)
            refuse_ended(history)
            awaiting = history.awaiting.get(stored.request_id)
            if awaiting is None:
                raise ApprovalNotFoundError(
                    f"saga {saga_id!r}: request {stored.request_id} has no AWAITING_APPROVAL "
                    "entry in the journal; there is nothing to reject"
                )
            request = journaled_request(saga_id, awaiting)
            check_unused(request, history)
            try:
                self._append_rejection(
                    history, request, approver=approver, reason=reason, via=channel
                )
            except AppendConflictError:
                continue
            self._close(stored, "rejected")
            _telemetry.approval_event(
                saga_id, "approval.reject", request_id=request.request_id, tool=request.tool_name
            )
            return history
        raise _lost_races(saga_id, "rejection")

    def decline(
        self, history: SagaHistory, request: ApprovalRequest, *, source: str, reason: str
    ) -> JournalEntry:
        """Journal a framework's own rejection of a call inside a run, and consume it.

        The call is not run, whatever sagacity holds; the saga goes on (the framework
        tells its model). `source` names where the "no" came from.
        """
        check_unused(request, history)
        entry = self._append_rejection(
            history, request, approver=None, source=source, reason=reason, guarded=False
        )
        self._close(request, "declined")
        return entry

    def _append_rejection(
        self,
        history: SagaHistory,
        request: ApprovalRequest,
        *,
        approver: str | None,
        reason: str,
        source: str | None = None,
        guarded: bool = True,
        via: str | None = None,
    ) -> JournalEntry:
        # Guarded, a rejection is appended only if the journal is as it was read: a worker
        # that journals the approved call's INTENT first wins, and the rejection is refused.
        payload: dict[str, JsonValue] = {"request_id": request.request_id, "approver": approver}
        if source is not None:
            payload["source"] = source
        payload["reason"] = reason
        if via is not None:  # a framework's own decline names its `source` instead
            payload["via"] = via
        initiated = initiated_of(history, request)
        if initiated is not None:
            payload["initiated_by"] = initiated
        return history.append(
            self.journal,
            Phase.REJECTED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload=payload,
            expected_seq=history.last_seq if guarded else None,
        )


def refuse_ended(history: SagaHistory) -> None:
    """A saga that ended has no requests left to decide (a stale stored one included)."""
    if history.ended is not None:
        raise SagaStateError(
            f"saga {history.saga_id!r} ended {history.outcome} at seq {history.ended.seq}; "
            "its requests can no longer be decided"
        )


_REFUSAL_REASONS: dict[type[Exception], str] = {
    ApprovalNotFoundError: "request_not_found",
    ApprovalMissingError: "request_changed",
    ApprovalHashMismatchError: "hash_mismatch",
    SelfApprovalError: "self_approval",
    ApprovalAlreadyGivenError: "already_approved",
    ApprovalAlreadyUsedError: "already_used",
    ApprovalRejectedError: "rejected",
    ApprovalExpiredError: "expired",
    SagaStateError: "saga_ended",
    ConfigurationError: "cannot_sign",
    ApprovalError: "refused",
}
"""The `reason` a refused approval is logged with, by the refusal's class (or its base)."""


def _approval_refused(saga_id: str, approver: str, refusal: Exception) -> None:
    """Log a refused `approve` at WARNING: nothing is journaled, so the log is its trace."""
    reason = next(
        (_REFUSAL_REASONS[c] for c in type(refusal).__mro__ if c in _REFUSAL_REASONS), "refused"
    )
    _telemetry.logger.warning(
        "saga %r: approval by %r refused (%s): %s",
        saga_id,
        approver,
        reason,
        refusal,
        extra={"refused_approval": reason},
    )


def _lost_races(saga_id: str, what: str) -> JournalError:
    return JournalError(
        f"saga {saga_id!r}: the {what} lost {_DECISION_RETRIES} races with other writers of "
        "the saga and was not recorded; decide again"
    )
