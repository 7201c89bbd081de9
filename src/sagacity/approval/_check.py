"""The fail-closed checks of the approval lifecycle: every refusal, read from the journal.

The request store is working state that anyone with database access can edit; the
journal is chained evidence. Every check reads what it rests on from the journal and
treats the stored request as a pointer to it.
"""

from __future__ import annotations

import dataclasses
import datetime

from sagacity._history import NOT_RUN, SagaHistory, payload_of
from sagacity.approval._escalation import counts_after_escalation, escalation_in
from sagacity.approval._policy import (
    ApprovalPolicy,
    Counted,
    approvers_required_of,
    count_approvals,
    recorded_starter,
)
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import (
    ApprovalAlreadyUsedError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ApprovalSignatureError,
)
from sagacity.journal import JournalEntry, Phase, sha256_hex

__all__ = [
    "approvals_of",
    "check_approved",
    "check_current",
    "check_unused",
    "explain_unusable",
    "journaled_request",
    "verified_request",
]


def verified_request(
    request: ApprovalRequest, history: SagaHistory, policy: ApprovalPolicy
) -> ApprovalRequest:
    """Return `request` as its AWAITING_APPROVAL entry records it, with its approvals.

    Its starter, editor and the number of approvers it needs come from the journal, never
    from the store.

    Raises:
        ApprovalMissingError: No AWAITING_APPROVAL entry matches the request's saga,
            seq, id, call, tool and expiry, or it records an unreadable policy.
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
    required = approvers_required_of(journaled)
    started_by, edited_by = journaled.get("started_by"), journaled.get("edited_by")
    if (
        required is None
        or not isinstance(started_by, str | None)
        or not isinstance(edited_by, str | None)
    ):
        raise ApprovalMissingError(
            f"saga {saga!r}: the AWAITING_APPROVAL entry at seq {awaiting.seq} records an "
            "unreadable approval policy (approvers_required, started_by or edited_by); "
            "verify the journal, and reject the request"
        )
    # The saga's earliest record of its starter wins: a later entry cannot change it.
    starter = recorded_starter(history)
    if started_by is not None and starter is not None and started_by != starter:
        raise ApprovalMissingError(
            f"saga {saga!r}: the AWAITING_APPROVAL entry at seq {awaiting.seq} names "
            f"{started_by!r} as the saga's starter, but the journal recorded {starter!r} "
            "first; verify the journal, and reject the request"
        )
    escalate_to = journaled.get("escalate_to")
    verified = dataclasses.replace(
        request,
        input=journaled_input,
        input_sha256=journaled_sha,
        started_by=starter or started_by,
        approvers_required=required,
        edited_by=edited_by,
        remind_at=_time(journaled.get("remind_at")),
        escalate_to=escalate_to if isinstance(escalate_to, str) else None,
        escalation=escalation_in(history, awaiting, policy.groups),
    )
    return dataclasses.replace(verified, approvals=approvals_of(verified, history, policy).valid)


def approvals_of(request: ApprovalRequest, history: SagaHistory, policy: ApprovalPolicy) -> Counted:
    """The journaled approvals of exactly this (verified) request, sorted by whether they count."""
    return count_approvals(request, _approvals_of(request, history), policy)


def _approvals_of(request: ApprovalRequest, history: SagaHistory) -> list[JournalEntry]:
    """The APPROVED entries naming exactly this request, whatever they recorded.

    Once the request escalated, only those journaled after it by the group's members.
    """
    return [
        entry
        for entry in history.approvals(request.seq)
        if entry.call_id == request.call_id
        and entry.tool_name == request.tool_name
        and payload_of(entry).get("request_id") == request.request_id
        and counts_after_escalation(request.escalation, entry)
    ]


def check_unused(request: ApprovalRequest, history: SagaHistory) -> None:
    """Refuse if the request was rejected, or a run of its call spent its approval.

    An INTENT of the call after the request spends it unless the journal says that
    attempt did not run: FAILED `not_started` (cancelled before the tool started), or
    FAILED `not_run` (a human resolved it so). Resolved as executed, it is spent.

    Raises:
        ApprovalRejectedError: A REJECTED entry answers the request.
        ApprovalAlreadyUsedError: An attempt of the call that may have run follows the
            request.
    """
    saga, tool, rid = request.saga_id, request.tool_name, request.request_id
    rejected = history.rejected(request.seq)
    if rejected is not None:
        by = payload_of(rejected).get("approver") or payload_of(rejected).get("source")
        raise ApprovalRejectedError(
            f"saga {saga!r}: request {rid} for tool {tool!r} was rejected by {by!r}: "
            f"{payload_of(rejected).get('reason')}"
        )
    spent = history.approval_spent(request.call_id, request.seq)
    if spent is None:
        return
    if spent.in_doubt:
        raise ApprovalAlreadyUsedError(
            f"saga {saga!r}: the approved call {request.call_id!r} of tool {tool!r} already ran "
            f"or may have (INTENT at seq {spent.intent.seq}, no outcome known); an approval is "
            f"used once. If it did not run, record that with Sagacity.resolve({saga!r}, "
            f"{request.call_id!r}, executed=False, by=...): the approval then stands for the "
            "next run"
        )
    raise ApprovalAlreadyUsedError(
        f"saga {saga!r}: the approved call {request.call_id!r} of tool {tool!r} already "
        f"ran (INTENT at seq {spent.intent.seq}); an approval is used once"
    )


def check_current(request: ApprovalRequest, history: SagaHistory) -> None:
    """Refuse a request that a newer one for the same call replaced (asked again, edited).

    A call always checks the newest request of its id, so deciding on an older one would
    decide nothing; this says so instead.

    Raises:
        ApprovalNotFoundError: A newer AWAITING_APPROVAL asks for the same call.
    """
    newest = history.asked.get(request.call_id)
    if newest is not None and newest.seq != request.seq:
        raise ApprovalNotFoundError(
            f"saga {request.saga_id!r}: request {request.request_id} for call "
            f"{request.call_id!r} was replaced by request "
            f"{payload_of(newest).get('request_id')} (seq {newest.seq}); decide on that one"
        )


def check_approved(
    request: ApprovalRequest,
    history: SagaHistory,
    *,
    input_sha256: str,
    now: datetime.datetime,
    policy: ApprovalPolicy,
) -> JournalEntry:
    """Refuse unless the verified `request` may run now with input hashing to `input_sha256`.

    Returns the newest APPROVED entry that lets it run: `request.approvers_required`
    different principals, none of them the saga's starter or the input's editor, each
    approving the request's hash (with a signature that verifies, where required). Each
    refusal raises an `ApprovalError` subclass and executes nothing, so the saga can
    still be approved properly.
    """
    saga, tool, rid = request.saga_id, request.tool_name, request.request_id
    check_unused(request, history)
    started = history.latest_call.get(request.call_id)
    if policy.require_signed and started is not None and started.intent.seq > request.seq:
        # Unused only by its FAILED `not_started` or `not_run`, which nobody signs: under
        # signed approvals, a row anyone with database access could append gives nothing
        # back.
        said = (
            f"a human ({payload_of(started.outcome).get('resolved_by')!r}) resolved it as not run"
            if started.kind == NOT_RUN and started.outcome is not None
            else "it was not started"
        )
        raise ApprovalAlreadyUsedError(
            f"saga {saga!r}: the approved call {request.call_id!r} of tool {tool!r} has an "
            f"INTENT at seq {started.intent.seq} whose FAILED says {said}; under "
            "require_signed_approvals that unsigned entry does not give the approval back: "
            "reject the request, and run the call in a new saga"
        )
    if input_sha256 != request.input_sha256:
        raise ApprovalHashMismatchError(
            f"saga {saga!r}: request {rid} for tool {tool!r} was made for sha256 "
            f"{request.input_sha256[:12]}…, but the input now hashes to {input_sha256[:12]}…; "
            "the call is not run: reject the request, or run the input that was requested"
        )
    if request.expired(now):
        raise ApprovalExpiredError(
            f"saga {saga!r}: request {rid} for tool {tool!r} expired at {request.deadline}"
        )
    counted = approvals_of(request, history, policy)
    required = request.approvers_required
    if len(counted.valid) >= required:
        assert counted.last_valid is not None
        return counted.last_valid
    progress = counted.describe(required)
    if counted.unsigned:
        entry, why = counted.unsigned[-1]
        raise ApprovalSignatureError(
            f"saga {saga!r}: request {rid} for tool {tool!r} has {progress}; the APPROVED "
            f"entry at seq {entry.seq} does not count: {why}. Approvals must be signed with a "
            "trusted key: approve through a Sagacity that has approval_signing_key"
        )
    if counted.other_hash:
        entry = counted.other_hash[-1]
        approved_sha = str(payload_of(entry).get("input_sha256"))
        raise ApprovalHashMismatchError(
            f"saga {saga!r}: approval for request {rid} at seq {entry.seq} was recorded for "
            f"sha256 {approved_sha[:12]}…, but the request holds {request.input_sha256[:12]}…; "
            "approve the request's input or reject it"
        )
    if counted.no_hash and not counted.valid:
        raise ApprovalMissingError(
            f"saga {saga!r}: the approval of request {rid} at seq {counted.no_hash[-1].seq} "
            "recorded no input hash; an approval that does not say what it approved is refused"
        )
    if not counted.valid and not counted.barred:
        raise ApprovalMissingError(
            f"saga {saga!r}: no approval is journaled for request {rid} (tool {tool!r}, "
            f"call {request.call_id!r}; {progress}); approve it with Sagacity.approve first"
        )
    barred = ""
    if counted.barred:
        names = sorted({str(payload_of(e).get("approver")) for e in counted.barred})
        barred = (
            f"; the approval by {', '.join(map(repr, names))} does not count: the saga's "
            "starter and the input's editor cannot approve it (four eyes)"
        )
    raise ApprovalMissingError(
        f"saga {saga!r}: request {rid} for tool {tool!r} (call {request.call_id!r}) has "
        f"{progress}{barred}; it runs once {required} different principals approved it: "
        "approve it with Sagacity.approve"
    )


def _journaled_expiry(awaiting: JournalEntry) -> datetime.datetime | str | None:
    """The expiry the AWAITING_APPROVAL entry recorded (compared as a time, not as text)."""
    value = payload_of(awaiting).get("expires_at")
    if value is None:
        return None
    try:
        return datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return "unreadable"  # matches no stored expiry: refused


def journaled_request(saga_id: str, awaiting: JournalEntry) -> ApprovalRequest:
    """The request as its AWAITING_APPROVAL entry records it."""
    payload = payload_of(awaiting)
    raw_input = payload.get("input")
    expires_at = payload.get("expires_at")
    return ApprovalRequest(
        request_id=str(payload.get("request_id")),
        saga_id=saga_id,
        seq=awaiting.seq,
        call_id=awaiting.call_id or "",
        tool_name=awaiting.tool_name or "",
        input=raw_input if isinstance(raw_input, dict) else {},
        input_sha256=str(payload.get("input_sha256")),
        reason=str(payload.get("reason")),
        requested_at=_time(awaiting.recorded_at) or datetime.datetime.min,
        expires_at=_time(expires_at),
    )


def _time(value: object) -> datetime.datetime | None:
    try:
        return None if value is None else datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return None  # an unreadable time: the checks against the store refuse it


def explain_unusable(history: SagaHistory, request_id: str | None) -> None:
    """Raise why the newest (or the named) request of a saga can no longer run, if known."""
    for awaiting in sorted(history.awaiting.values(), key=lambda e: e.seq, reverse=True):
        if request_id not in (None, payload_of(awaiting).get("request_id")):
            continue
        check_unused(journaled_request(history.saga_id, awaiting), history)
        if request_id is None:
            return  # only the newest request says why the saga cannot resume
