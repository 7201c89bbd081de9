"""The fail-closed checks of the approval lifecycle: every refusal, read from the journal.

The request store is working state that anyone with database access can edit; the
journal is chained evidence. Every check reads what it rests on from the journal and
treats the stored request as a pointer to it.
"""

from __future__ import annotations

import dataclasses
import datetime

from sagacity._history import SagaHistory, payload_of
from sagacity.approval._request import Approval, ApprovalRequest
from sagacity.errors import (
    ApprovalAlreadyUsedError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalMissingError,
    ApprovalRejectedError,
)
from sagacity.journal import JournalEntry, Phase, sha256_hex

__all__ = ["approvals_of", "check_approved", "check_unused", "verified_request"]


def verified_request(request: ApprovalRequest, history: SagaHistory) -> ApprovalRequest:
    """Return `request` as its AWAITING_APPROVAL entry records it, with its approvals.

    Raises:
        ApprovalMissingError: No AWAITING_APPROVAL entry matches the request's saga,
            seq, id, call, tool and expiry.
        ApprovalHashMismatchError: The stored input or hash differs from the journal's.
    """
    saga, rid = history.saga_id, request.request_id
    awaiting = history.entry(request.seq)
    if (
        request.saga_id != saga
        or awaiting is None
        or awaiting.phase is not Phase.AWAITING_APPROVAL
        or payload_of(awaiting).get("request_id") != rid
        or awaiting.call_id != request.call_id
        or awaiting.tool_name != request.tool_name
        or _journaled_expiry(awaiting) != request.expires_at
    ):
        raise ApprovalMissingError(
            f"saga {saga!r}: approval request {rid} names seq {request.seq}, but the journal "
            "has no AWAITING_APPROVAL entry there that matches its saga, call, tool and "
            "expiry; the stored request was changed: reject it"
        )
    journaled = payload_of(awaiting)
    journaled_input = journaled.get("input")
    journaled_sha = journaled.get("input_sha256")
    if not isinstance(journaled_input, dict) or sha256_hex(journaled_input) != journaled_sha:
        raise ApprovalHashMismatchError(
            f"saga {saga!r}: the AWAITING_APPROVAL entry at seq {awaiting.seq} does not hash "
            "its own input to the hash it records; verify the journal"
        )
    if journaled_sha != request.input_sha256 or sha256_hex(request.input) != journaled_sha:
        raise ApprovalHashMismatchError(
            f"saga {saga!r}: the stored approval request {rid} for tool {request.tool_name!r} "
            f"now hashes to {sha256_hex(request.input)[:12]}… (its sha256 field: "
            f"{request.input_sha256[:12]}…), but the journal recorded {str(journaled_sha)[:12]}… "
            f"at seq {request.seq}; the stored request was changed: reject it"
        )
    return dataclasses.replace(
        request,
        input=journaled_input,
        input_sha256=journaled_sha,
        approvals=approvals_of(request, history),
    )


def approvals_of(request: ApprovalRequest, history: SagaHistory) -> tuple[Approval, ...]:
    """The journaled approvals of exactly this request, oldest first."""
    return tuple(
        Approval(
            approver=str(payload_of(entry).get("approver")),
            approved_at=entry.recorded_at,
            seq=entry.seq,
        )
        for entry in _approvals_of(request, history)
        # An approval that did not record what it approved is no approval.
        if payload_of(entry).get("input_sha256") == request.input_sha256
    )


def _approvals_of(request: ApprovalRequest, history: SagaHistory) -> list[JournalEntry]:
    """The APPROVED entries naming exactly this request, whatever they recorded."""
    return [
        entry
        for entry in history.approvals(request.seq)
        if entry.call_id == request.call_id
        and entry.tool_name == request.tool_name
        and payload_of(entry).get("request_id") == request.request_id
    ]


def check_unused(request: ApprovalRequest, history: SagaHistory) -> None:
    """Refuse if the request was rejected, or its call started after it was asked.

    Raises:
        ApprovalRejectedError: A REJECTED entry answers the request.
        ApprovalAlreadyUsedError: The call's INTENT follows the request.
    """
    saga, tool, rid = request.saga_id, request.tool_name, request.request_id
    rejected = history.rejected(request.seq)
    if rejected is not None:
        by = payload_of(rejected).get("approver") or payload_of(rejected).get("source")
        raise ApprovalRejectedError(
            f"saga {saga!r}: request {rid} for tool {tool!r} was rejected by {by!r}: "
            f"{payload_of(rejected).get('reason')}"
        )
    call = history.latest_call.get(request.call_id)
    if call is not None and call.intent.seq > request.seq:
        raise ApprovalAlreadyUsedError(
            f"saga {saga!r}: the approved call {request.call_id!r} of tool {tool!r} already "
            f"ran (INTENT at seq {call.intent.seq}); an approval is used once"
        )


def check_approved(
    request: ApprovalRequest,
    history: SagaHistory,
    *,
    input_sha256: str,
    now: datetime.datetime,
) -> JournalEntry:
    """Refuse unless the verified `request` may run now with input hashing to `input_sha256`.

    Returns the APPROVED entry that lets it run. Each refusal raises an `ApprovalError`
    subclass and executes nothing, so the saga can still be approved properly.
    """
    saga, tool, rid = request.saga_id, request.tool_name, request.request_id
    check_unused(request, history)
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
    approvals = _approvals_of(request, history)
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
