"""Acting at a request's time points: its reminder, its escalation; a gate's declaration.

Part of `ApprovalLifecycle`, run by `Escalator.sweep` under the saga's lease: what is due
is read from the journal (`due`), and each step appends only if the journal is as it
was read. When nothing is due, `next_check` says from the same reading when something
may be, so a sweep need not read that journal again before then.
"""

from __future__ import annotations

import datetime
from typing import Protocol

from sagacity import _telemetry
from sagacity._history import SagaHistory
from sagacity.approval._escalation import ToolEscalation, gate_escalation, reminded_for
from sagacity.approval._policy import ApprovalHook, ApprovalPolicy
from sagacity.approval._request import ApprovalRequest
from sagacity.journal import JournalEntry, Phase, SideEffectJournal

__all__ = ["GateTimes", "RequestEscalation"]


class GateTimes(Protocol):
    """What `declare_gate` reads of a workflow gate's declaration."""

    @property
    def timeout_seconds(self) -> float:
        """Seconds the gate waits; 0 for ever."""
        ...

    @property
    def remind_before(self) -> datetime.timedelta | float | None:
        """How long before the timeout a reminder goes out."""
        ...

    @property
    def escalate_to(self) -> str | None:
        """The group it escalates to at the timeout."""
        ...


class RequestEscalation:
    """Reminding and escalating requests, and declaring gates': part of `ApprovalLifecycle`."""

    journal: SideEffectJournal
    policy: ApprovalPolicy
    escalations: dict[str, ToolEscalation]
    declared_approvers: dict[str, int]
    on_reminder: ApprovalHook | None

    def declare_gate(self, name: str, gate: GateTimes | None, *, where: str) -> None:
        """Remember a workflow gate's reminder and escalation (`gate(remind_before=, ...)`).

        Raises:
            ConfigurationError: They cannot apply (see `gate_escalation`).
        """
        found = None
        if gate is not None:
            found = gate_escalation(
                name,
                gate.remind_before,
                gate.escalate_to,
                timeout_seconds=gate.timeout_seconds,
                groups=self.policy.groups,
                where=where,
                approvers=self.declared_approvers.get(name, 1),
            )
        if found is None:
            self.escalations.pop(name, None)
        else:
            self.escalations[name] = found

    def due(
        self, request: ApprovalRequest, history: SagaHistory, now: datetime.datetime
    ) -> str | None:
        """What is due for the verified, pending `request` at `now`, read from the journal.

        `"remind"` at its warning time if no REMINDED warned of this expiry yet;
        `"escalate"` once it expired undecided, if it names a group and has not escalated;
        `"deny"` once it expired undecided otherwise; None when nothing is due.
        """
        if history.ended is not None or len(request.approvals) >= request.approvers_required:
            return None
        awaiting = history.entry(request.seq)
        if awaiting is None or awaiting not in history.open_requests():
            return None
        if request.expired(now):
            if request.escalate_to is not None and request.escalation is None:
                return "escalate"
            return "deny"
        warn_at = request.warn_at
        not_yet = warn_at is None or now < warn_at
        if not not_yet and reminded_for(history, awaiting, request.deadline) is None:
            return "remind"
        return None

    def next_check(
        self, request: ApprovalRequest, history: SagaHistory, now: datetime.datetime
    ) -> datetime.datetime | None:
        """The earliest time something may be due for `request`, as `history` reads it.

        None when nothing ever will be: the saga ended, the request is closed or has its
        approvals (approvals only accumulate; a REJECTED closes it for good). Otherwise
        its next warning time not yet reminded, or its expiry; `now` once it expired.
        Nothing another process journals can bring a time point forward: an escalation
        comes at or after the expiry (by its own clock) and sets a later one, and its
        reminder comes after it; a REMINDED or a decision only leaves less to do. So a
        sweep that reads this journal again at that time, and not before, misses
        nothing.
        """
        if history.ended is not None or len(request.approvals) >= request.approvers_required:
            return None
        awaiting = history.entry(request.seq)
        if awaiting is None or awaiting not in history.open_requests():
            return None
        deadline = request.deadline
        if deadline is None:
            return None
        if request.expired(now):
            return now
        warn_at = request.warn_at
        if (
            warn_at is not None
            and warn_at < deadline
            and reminded_for(history, awaiting, deadline) is None
        ):
            return warn_at
        return deadline

    def remind(self, history: SagaHistory, request: ApprovalRequest) -> JournalEntry:
        """Journal REMINDED for `request`'s coming expiry.

        Appended only if the journal is as `history` read it (`AppendConflictError`
        otherwise), so of two sweepers one reminds. `on_reminder` is not told here: the
        sweep tells it once the saga's lease is released (`Escalator.sweep`), so a slow
        hook never holds the saga.
        """
        deadline = request.deadline
        warn_at = request.warn_at
        entry = history.append(
            self.journal,
            Phase.REMINDED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload={
                "request_id": request.request_id,
                "remind_at": None if warn_at is None else warn_at.isoformat(),
                "expires_at": None if deadline is None else deadline.isoformat(),
                "group": None if request.escalation is None else request.escalation.group,
            },
            expected_seq=history.last_seq,
        )
        _telemetry.approval_event(
            request.saga_id,
            "approval.reminder",
            request_id=request.request_id,
            tool=request.tool_name,
        )
        return entry

    def escalate(
        self, history: SagaHistory, request: ApprovalRequest, now: datetime.datetime
    ) -> JournalEntry | None:
        """Journal ESCALATED: `request` now waits for its group, until a new expiry.

        Returns None, journaling nothing, when this process has no such group (another
        process configured with it escalates the request). Appended only if the journal
        is as `history` read it.
        """
        name = request.escalate_to
        group = None if name is None else self.policy.groups.get(name)
        if group is None:
            _telemetry.logger.warning(
                "saga %r: request %s for tool %r escalates to approver group %r, which this "
                "Sagacity does not configure; it is left to a process that does",
                request.saga_id,
                request.request_id,
                request.tool_name,
                name,
            )
            return None
        # Journaled in UTC whatever the clock's zone, as the entry's readers expect.
        now = now.astimezone(datetime.UTC)
        expires_at = now + group.ttl
        escalation = self.escalations.get(request.tool_name)
        remind_at = None
        before = None if escalation is None else escalation.remind_before
        if before is not None and before < group.ttl:
            remind_at = expires_at - before
        return history.append(
            self.journal,
            Phase.ESCALATED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload={
                "request_id": request.request_id,
                "group": group.name,
                "members": list(group.members),
                "expired_at": None if request.deadline is None else request.deadline.isoformat(),
                "escalated_at": now.isoformat(),
                "expires_at": expires_at.isoformat(),
                "remind_at": None if remind_at is None else remind_at.isoformat(),
            },
            expected_seq=history.last_seq,
        )
