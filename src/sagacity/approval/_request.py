"""Approval requests and the store that keeps the pending ones."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Protocol, runtime_checkable

from sagacity.journal import JsonValue

__all__ = ["ApprovalRequest", "ApprovalStore"]


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

    def to_json(self) -> dict[str, JsonValue]:
        """Return the request as a JSON object, for a framework's pause or an approval UI."""
        return {
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
        }

    def expired(self, now: datetime.datetime) -> bool:
        """Tell whether the request has expired at `now`."""
        return self.expires_at is not None and now >= self.expires_at


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
