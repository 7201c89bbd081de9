"""The decisions a saga's journal records, and the one a worker has yet to act on.

Every decision is read through the approval check's own verification
(`approval._check`): an approval counts here exactly when it would let the call run (the
request's hash, four eyes, N of M, a signature that verifies where signatures are
required), so a row appended without a key under `require_signed_approvals` is no
decision, and wakes nobody.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Mapping

from sagacity._decisions import WORK, Decision, DecisionOutcome
from sagacity._history import CONTROL_FLOW, SagaHistory, payload_of
from sagacity.approval._check import approvals_of, journaled_request, verified_request
from sagacity.approval._policy import ApprovalPolicy
from sagacity.errors import ApprovalError
from sagacity.journal import JournalEntry

__all__ = ["EXPIRY", "DecisionLog", "awaiting_resume", "decisions_in"]

EXPIRY = "expiry"
"""The `source` of the REJECTED a worker journals for a request that expired undecided."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DecisionLog:
    """What reading decisions needs of a Sagacity: its approval policy, declared approvers."""

    policy: ApprovalPolicy
    """Which approvals count (signatures, keys)."""
    declared: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Approvers each tool's wrap declares, by tool name: a journal cannot ask fewer."""


def decisions_in(history: SagaHistory, log: DecisionLog, now: datetime.datetime) -> list[Decision]:
    """Every decision on every request of the saga, oldest first.

    An expiry counts from `now`: a request undecided past its `expires_at` in a saga still
    open is EXPIRED, with no seq.
    """
    found: list[Decision] = []
    for awaiting in sorted(history.awaiting.values(), key=lambda e: e.seq):
        decision = _decision_on(history, awaiting, log, now)
        if decision is not None:
            found.append(decision)
    return sorted(found, key=lambda d: (d.seq is None, d.seq or 0))


def awaiting_resume(
    history: SagaHistory, log: DecisionLog, now: datetime.datetime
) -> Decision | None:
    """The decision a worker has yet to act on in this saga; None when there is none.

    Only the saga's newest request can be: a run that went on past an approval and asked
    again waits for the new one. It is waiting when:

    - APPROVED, the saga is open, and its call did not start since, or started and has a
      known outcome while the saga did not end (a worker died mid-resume: the resume runs
      again and the journal replays the call). Not when the call is in doubt (a human
      resolves it first) or the framework paused the run itself afterwards.
    - REJECTED by a principal (or EXPIRED) and the saga is open; or the saga ended with
      its undo waiting for the tools (`compensation_waiting`: rejected where they are not).
    - EXPIRED: undecided past `expires_at`, the saga open.
    """
    if not history.awaiting:
        return None
    newest = max(history.awaiting.values(), key=lambda e: e.seq)
    decision = _decision_on(history, newest, log, now)
    if decision is None or decision.outcome is DecisionOutcome.EDITED:
        return None
    ended = history.ended
    if decision.outcome is DecisionOutcome.APPROVED:
        if ended is not None:
            return None
        spent = history.approval_spent(decision.call_id, newest.seq)
        if spent is None:
            return decision
        if spent.in_doubt or _paused_since(history, spent.intent.seq):
            return None
        return decision
    rejected = history.rejected(newest.seq)
    if rejected is not None and payload_of(rejected).get("source") not in (None, EXPIRY):
        return None  # the framework said no inside the run: it knows already
    if ended is None:
        return decision
    if rejected is not None and ended.seq > rejected.seq and _undo_waiting(ended):
        return decision
    return None


def _decision_on(
    history: SagaHistory, awaiting: JournalEntry, log: DecisionLog, now: datetime.datetime
) -> Decision | None:
    """The decision on the request `awaiting` asked; None while it waits."""
    request = journaled_request(history.saga_id, awaiting)
    decided = functools.partial(
        Decision,
        saga_id=history.saga_id,
        request_id=request.request_id,
        call_id=request.call_id,
        tool=request.tool_name,
        input=request.input,
        input_sha256=request.input_sha256,
        resumer=_resumer(awaiting),
    )
    rejected = history.rejected(awaiting.seq)
    if rejected is not None:
        said = payload_of(rejected)
        replaced_by = _replacement(history, request.request_id)
        source = said.get("source")
        if replaced_by is not None:
            outcome = DecisionOutcome.EDITED
        elif source == EXPIRY:
            outcome = DecisionOutcome.EXPIRED
        else:
            outcome = DecisionOutcome.REJECTED
        approver = said.get("approver")
        reason = said.get("reason")
        via = said.get("via")
        return decided(
            outcome=outcome,
            decided_by=approver if isinstance(approver, str) else None,
            decided_at=_time(rejected.recorded_at),
            seq=rejected.seq,
            reason=reason if isinstance(reason, str) else None,
            replaced_by=replaced_by,
            via=via if isinstance(via, str) else None,
        )
    try:
        verified = verified_request(request, history, log.policy)
    except ApprovalError:
        return None  # an entry the check refuses decides nothing (`verify` says why)
    required = max(verified.approvers_required, log.declared.get(verified.tool_name, 1))
    counted = approvals_of(verified, history, log.policy)
    if len(counted.valid) >= required:
        completing = counted.valid[required - 1]
        return decided(
            outcome=DecisionOutcome.APPROVED,
            decided_by=completing.approver,
            decided_at=_time(completing.approved_at),
            seq=completing.seq,
            approvers=tuple(a.approver for a in counted.valid),
            via=completing.via,
        )
    deadline = verified.deadline
    if deadline is not None and now >= deadline and history.ended is None:
        if history.approval_spent(verified.call_id, verified.seq) is not None:
            return None
        if verified.escalate_to is not None and verified.escalation is None:
            return None  # it escalates to its group, not denied (`Escalator.sweep`)
        return decided(
            outcome=DecisionOutcome.EXPIRED,
            decided_by=None,
            decided_at=deadline,
            seq=None,
            reason=f"request {verified.request_id} expired at {deadline.isoformat()} "
            "without the approvals it needed",
        )
    return None


def _replacement(history: SagaHistory, request_id: str) -> str | None:
    """The id of the request that replaced `request_id` (an edit), if one did."""
    for entry in history.awaiting.values():
        said = payload_of(entry)
        if said.get("replaces") == request_id and said.get("edited_by") is not None:
            replacement = said.get("request_id")
            return replacement if isinstance(replacement, str) else None
    return None


def _resumer(awaiting: JournalEntry) -> str:
    name = payload_of(awaiting).get("resumer")
    return name if isinstance(name, str) and name else WORK


def _paused_since(history: SagaHistory, seq: int) -> bool:
    """Whether the saga's newest call after `seq` is one the framework paused itself."""
    later = [call for call in history.calls.values() if call.intent.seq > seq]
    if not later:
        return False
    newest = max(later, key=lambda call: call.intent.seq)
    return newest.kind == CONTROL_FLOW


def _undo_waiting(ended: JournalEntry) -> bool:
    """An ENDED whose walk left compensations to a process with the tools."""
    return bool(payload_of(ended).get("compensation_waiting"))


def _time(text: str) -> datetime.datetime:
    value = datetime.datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
