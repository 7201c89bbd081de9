r"""What an approval message shows of a request, as text no input can turn into markup.

The e-mail and the Slack message show the same facts: the tool, the saga, the reason,
the exact input as canonical JSON (RFC 8785: the bytes whose SHA-256 the approval is
bound to) and that hash. Every value that a model, a tool or a caller wrote passes
through `one_line`: one line (a newline, a carriage return or any other control or
invisible character becomes its JSON escape, `\u000a`), so it cannot add a header, a
line or a paragraph of its own. JSON escapes leave the input's JSON value unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime

from sagacity._unicode import escape_for_display
from sagacity.approval import ApprovalRequest
from sagacity.journal import canonical_bytes

__all__ = ["RequestFacts", "one_line"]


def one_line(text: str, limit: int | None = None) -> str:
    """`text` on one line, every control or invisible character as its JSON escape.

    Cut to `limit` characters (with `…`) when given.
    """
    shown = escape_for_display(text, keep_newlines=False)
    if limit is not None and len(shown) > limit:
        return shown[: max(limit - 1, 0)] + "…"
    return shown


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RequestFacts:
    """A request's facts, each already safe to show on one line."""

    tool: str
    """The tool that waits."""
    saga_id: str
    """The saga that asked."""
    request_id: str
    """The request's id."""
    reason: str
    """Why approval is needed."""
    input_json: str
    """The exact input, canonical JSON (RFC 8785), invisible characters escaped."""
    input_sha256: str
    """`sha256(JCS(input))`."""
    requested_at: str
    """When it was asked (RFC 3339)."""
    expires_at: str | None
    """When it expires (RFC 3339; its escalation's expiry once escalated), None for never."""
    escalation: str | None
    """Whom it escalated to, once it did (only their approvals count); None before."""
    approvals: str
    """How many approvals it has of how many it needs ("0 of 2")."""
    started_by: str | None
    """Who started the saga (they cannot approve), when recorded."""
    edited_by: str | None
    """Who edited the input, for a request that asks for an edit instead of the call's
    own input (they cannot approve it); None for the call's own ask."""

    @classmethod
    def of(cls, request: ApprovalRequest) -> RequestFacts:
        """The facts of `request`."""
        return cls(
            tool=one_line(request.tool_name),
            saga_id=one_line(request.saga_id),
            request_id=one_line(request.request_id),
            reason=one_line(request.reason),
            input_json=one_line(canonical_bytes(request.input).decode("utf-8")),
            input_sha256=request.input_sha256,
            requested_at=_when(request.requested_at),
            expires_at=None if request.deadline is None else _when(request.deadline),
            escalation=None
            if request.escalation is None
            else one_line(
                f"to {request.escalation.group} ({', '.join(request.escalation.members)}): "
                "only their approvals count"
            ),
            approvals=f"{len(request.approvals)} of {request.approvers_required}",
            started_by=None if request.started_by is None else one_line(request.started_by),
            edited_by=None if request.edited_by is None else one_line(request.edited_by),
        )


def _when(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
