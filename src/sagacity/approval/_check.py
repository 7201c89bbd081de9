"""The fail-closed check an approved call must pass before it runs."""

from __future__ import annotations

import datetime

from sagacity._history import SagaHistory, payload_of
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import (
    ApprovalAlreadyUsedError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalMissingError,
    ApprovalRejectedError,
)
from sagacity.journal import JournalEntry, Phase

__all__ = ["check_approved", "check_request_matches_journal"]


def check_request_matches_journal(request: ApprovalRequest, history: SagaHistory) -> JournalEntry:
    """Return the request's AWAITING_APPROVAL entry, refusing if the two disagree.

    The request store is working state that anyone with database access can edit; the
    journal entry is chained evidence. Every field the decision rests on must agree.
    """
    saga = history.saga_id
    awaiting = history.entry(request.seq)
    if (
        request.saga_id != history.saga_id
        or awaiting is None
        or awaiting.phase is not Phase.AWAITING_APPROVAL
        or payload_of(awaiting).get("request_id") != request.request_id
        or awaiting.call_id != request.call_id
        or awaiting.tool_name != request.tool_name
        or _journaled_expiry(awaiting) != request.expires_at
    ):
        raise ApprovalMissingError(
            f"saga {saga!r}: approval request {request.request_id} names seq {request.seq}, "
            "but the journal has no AWAITING_APPROVAL entry there that matches its saga, call, "
            "tool and expiry; the stored request was changed: reject it"
        )
    journaled_sha = payload_of(awaiting).get("input_sha256")
    if journaled_sha != request.input_sha256:
        raise ApprovalHashMismatchError(
            f"saga {saga!r}: approval request {request.request_id} for tool "
            f"{request.tool_name!r} holds sha256 {request.input_sha256[:12]}…, but the journal "
            f"recorded {str(journaled_sha)[:12]}… at seq {request.seq}; the stored request was "
            "changed; reject it"
        )
    return awaiting


def check_approved(
    request: ApprovalRequest,
    history: SagaHistory,
    *,
    input_sha256: str,
    now: datetime.datetime,
) -> JournalEntry:
    """Refuse unless `request` may run now with input hashing to `input_sha256`.

    Returns the APPROVED entry. Each refusal raises an `ApprovalError` subclass, and
    leaves the saga as it was, so it can still be approved properly.
    """
    saga, tool, rid = request.saga_id, request.tool_name, request.request_id
    awaiting = check_request_matches_journal(request, history)
    rejected = history.rejected(awaiting.seq)
    if rejected is not None:
        raise ApprovalRejectedError(
            f"saga {saga!r}: request {rid} for tool {tool!r} was rejected by "
            f"{payload_of(rejected).get('approver')!r}: {payload_of(rejected).get('reason')}"
        )
    call = history.latest_call.get(request.call_id)
    if call is not None and call.intent.seq > awaiting.seq:
        raise ApprovalAlreadyUsedError(
            f"saga {saga!r}: the approved call {request.call_id!r} of tool {tool!r} already "
            f"ran (INTENT at seq {call.intent.seq}); an approval is used once"
        )
    if input_sha256 != request.input_sha256:
        raise ApprovalHashMismatchError(
            f"saga {saga!r}: request {rid} for tool {tool!r} was made for sha256 "
            f"{request.input_sha256[:12]}…, but the input now hashes to {input_sha256[:12]}…; "
            "the call is not run: reject the request, or run the input that was requested"
        )
    if request.expired(now):
        raise ApprovalExpiredError(
            f"saga {saga!r}: request {rid} for tool {tool!r} expired at {request.expires_at}"
        )
    approvals = [
        a
        for a in history.approvals(awaiting.seq)
        if a.call_id == request.call_id
        and a.tool_name == tool
        and payload_of(a).get("request_id") == rid
    ]
    if not approvals:
        raise ApprovalMissingError(
            f"saga {saga!r}: no approval is journaled for request {rid} (tool {tool!r}, "
            f"call {request.call_id!r}); approve it with Sagacity.approve first"
        )
    approval = approvals[-1]
    approved_sha = payload_of(approval).get("input_sha256")
    if not isinstance(approved_sha, str):
        raise ApprovalMissingError(
            f"saga {saga!r}: the approval of request {rid} at seq {approval.seq} recorded no "
            "input hash; an approval that does not say what it approved is refused"
        )
    if approved_sha != request.input_sha256:
        raise ApprovalHashMismatchError(
            f"saga {saga!r}: approval for request {rid} was recorded for sha256 "
            f"{approved_sha[:12]}…, but the request holds {request.input_sha256[:12]}…; "
            "approve the request's input or reject it"
        )
    return approval


def _journaled_expiry(awaiting: JournalEntry) -> datetime.datetime | str | None:
    """The expiry the AWAITING_APPROVAL entry recorded (compared as a time, not as text)."""
    value = payload_of(awaiting).get("expires_at")
    if value is None:
        return None
    try:
        return datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return "unreadable"  # matches no stored expiry: refused
