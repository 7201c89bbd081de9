"""Approval requests and the store that keeps the pending ones."""

from __future__ import annotations

import dataclasses
import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sagacity.journal import JsonValue

if TYPE_CHECKING:
    from sagacity.approval._escalation import Escalation

__all__ = ["Approval", "ApprovalRequest", "ApprovalStore"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Approval:
    """One approver's journaled approval of a request."""

    approver: str
    """Who approved."""
    approved_at: str
    """When: the APPROVED entry's `recorded_at`."""
    seq: int
    """The seq of the APPROVED entry."""
    key_id: str | None = None
    """The id of the key that signed it; None for an unsigned approval."""
    justification: str | None = None
    """Why the approver approved, in their words; None when they gave none."""
    via: str | None = None
    """The channel it came through (`cli`, `inbox`, …); None when not recorded."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequest:
    """An IRREVERSIBLE call waiting for a human, bound to the hash of its exact input."""

    request_id: str
    """The request's id, unique across sagas."""
    saga_id: str
    """The saga that asked."""
    seq: int
    """The seq of the saga's AWAITING_APPROVAL entry for this request."""
    call_id: str
    """The call that waits: running it later reuses this id."""
    tool_name: str
    """The tool that waits."""
    input: dict[str, JsonValue]
    """The exact arguments that will run once approved."""
    input_sha256: str
    """`sha256(JCS(input))`: what an approval is bound to."""
    reason: str
    """Why approval is needed, shown to the approver."""
    requested_at: datetime.datetime
    """When the request was made (UTC)."""
    expires_at: datetime.datetime | None
    """When it stops being usable (UTC); None for never."""
    # The policy is read from the journal (a store may not keep it): two copies of one
    # request compare equal whether or not they were read against the journal.
    started_by: str | None = dataclasses.field(default=None, compare=False)
    """The principal who started the saga, as its journal records it; None when the saga
    was started without one. They cannot approve this request (four eyes)."""
    approvers_required: int = dataclasses.field(default=1, compare=False)
    """How many different principals must approve before the call runs, as journaled."""
    edited_by: str | None = dataclasses.field(default=None, compare=False)
    """Who edited the input this request asks for (`Sagacity.edit`); None when the call
    asked it itself. Like the starter, the editor cannot approve it."""
    # A view of the journal, not part of the request: two copies of one request compare
    # equal whatever each was shown with.
    approvals: tuple[Approval, ...] = dataclasses.field(default=(), compare=False)
    """The approvals that count so far, one per principal, oldest first (an approval by
    the starter or the editor, for another hash, or with a signature that does not
    verify where signatures are required, does not count); filled in by
    `Sagacity.pending`, empty from a store."""
    problem: str | None = dataclasses.field(default=None, compare=False)
    """Why the request cannot be approved (the stored copy disagrees with the journal);
    None when it can. Filled in by `Sagacity.pending`."""
    initiated_by: dict[str, JsonValue] | None = dataclasses.field(default=None, compare=False)
    """What made the call, as its AWAITING_APPROVAL records it: `{"by": "agent",
    "adapter": …}`, `{"by": "human", "principal": …}` or `{"by": "code", "via": …}`; None
    for a request journaled before sagacity recorded it. Filled in by `Sagacity.pending`."""
    justification_required: bool = dataclasses.field(default=False, compare=False)
    """Whether an approval must give a justification (`compensable(justification_required=)`)."""
    remind_at: datetime.datetime | None = dataclasses.field(default=None, compare=False)
    """When a reminder goes out (UTC), as its AWAITING_APPROVAL records it; None for none
    (`compensable(remind_before=)`). Filled in from the journal."""
    escalate_to: str | None = dataclasses.field(default=None, compare=False)
    """The approver group the request escalates to at expiry, as journaled; None: it is
    denied at expiry (`compensable(escalate_to=)`). Filled in from the journal."""
    escalation: Escalation | None = dataclasses.field(default=None, compare=False)
    """Its escalation, once journaled (ESCALATED): the group, its members and the new
    expiry; only their approvals after it count. Filled in from the journal."""

    @property
    def deadline(self) -> datetime.datetime | None:
        """When the request stops being usable: its escalation's expiry once it escalated."""
        return self.expires_at if self.escalation is None else self.escalation.expires_at

    @property
    def warn_at(self) -> datetime.datetime | None:
        """When the next reminder is due: before `deadline`; None for no reminder."""
        return self.remind_at if self.escalation is None else self.escalation.remind_at

    @property
    def state(self) -> str:
        """`"waiting"`, `"approved"` or `"tampered"`, as `Sagacity.pending` read it.

        `"waiting"` until `approvers_required` different principals approved (see
        `approvals` for the progress), then `"approved"`.
        """
        if self.problem is not None:
            return "tampered"
        return "approved" if len(self.approvals) >= self.approvers_required else "waiting"

    def to_json(self) -> dict[str, JsonValue]:
        """Return the request as a JSON object, for a framework's pause or an approval UI.

        An approval's `justification` is left out when it gave none. The request's
        provenance (`initiated_by`, `justification_required`) is in `provenance_json`:
        a framework's pause carries this object as it always did.
        """
        shown: dict[str, JsonValue] = {
            "request_id": self.request_id,
            "saga_id": self.saga_id,
            "seq": self.seq,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "input": self.input,
            "input_sha256": self.input_sha256,
            "reason": self.reason,
            "requested_at": self.requested_at.isoformat(),
            "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
            "started_by": self.started_by,
            "approvers_required": self.approvers_required,
            "edited_by": self.edited_by,
            "state": self.state,
            "approvals": [
                {
                    "approver": a.approver,
                    "approved_at": a.approved_at,
                    "seq": a.seq,
                    "key_id": a.key_id,
                    **({} if a.justification is None else {"justification": a.justification}),
                    **({} if a.via is None else {"via": a.via}),
                }
                for a in self.approvals
            ],
            "problem": self.problem,
        }
        return shown

    def provenance_json(self) -> dict[str, JsonValue]:
        """`to_json` with provenance and escalation (`escalation_json`): for approvers' views."""
        return {
            **self.to_json(),
            "initiated_by": self.initiated_by,
            "justification_required": self.justification_required,
            **self.escalation_json(),
        }

    def expired(self, now: datetime.datetime) -> bool:
        """Tell whether the request has expired at `now` (its escalation's expiry, if any)."""
        deadline = self.deadline
        return deadline is not None and now >= deadline

    def escalation_json(self) -> dict[str, JsonValue]:
        """When the request is reminded, where it escalates, and its escalation, as JSON."""
        return {
            "remind_at": None if self.remind_at is None else self.remind_at.isoformat(),
            "escalate_to": self.escalate_to,
            "escalation": None if self.escalation is None else self.escalation.to_json(),
        }


@runtime_checkable
class ApprovalStore(Protocol):
    """Working state for pending approvals; the evidence itself is in the journal."""

    def save(self, request: ApprovalRequest) -> None:
        """Store a new request."""
        ...

    def get(self, request_id: str) -> ApprovalRequest | None:
        """Return the request, or None when there is none (or it was consumed)."""
        ...

    def pending(self, saga_id: str | None = None) -> list[ApprovalRequest]:
        """Return the stored requests, of one saga or of all, oldest first."""
        ...

    def delete(self, request_id: str) -> None:
        """Consume a request; deleting one that is gone is not an error."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
