r"""A pending request as a human reads it on a terminal: whole, never cut to fit.

`sagacity pending` prints one block per request on a terminal and `sagacity approve`
shows the same block before it asks for a confirmation. Nothing is truncated: a line
longer than the terminal wraps. Characters that hide or reorder text (a bidi override,
a zero-width joiner) are shown as JSON escapes (`\u202e`), as the inbox shows them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Container, Sequence

from sagacity._request_view import InputEdit, edits_of, gate_deadline
from sagacity._unicode import escape_for_display
from sagacity.approval import ApprovalRequest
from sagacity.approval._provenance import AGENT_FIELDS
from sagacity.cli._common import age
from sagacity.errors import JournalError
from sagacity.journal import JournalEntry, JsonValue, Phase
from sagacity.saga import Sagacity

__all__ = [
    "RequestView",
    "decision_lines",
    "edit_lines",
    "escalation_lines",
    "expiry_text",
    "initiator_text",
    "input_line",
    "request_block",
    "request_views",
    "state_text",
    "visible",
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RequestView:
    """A pending request with what its saga's journal adds: its edits and real deadline."""

    request: ApprovalRequest
    """The request, as `Sagacity.pending` read it."""
    expires_at: datetime.datetime | None
    """When it stops being usable: a workflow gate's timeout counts; None for never."""
    edits: tuple[InputEdit, ...]
    """The edits that made its input, oldest first."""

    def to_json(self) -> dict[str, JsonValue]:
        """The request's JSON, with `expires_at` the real deadline and its `edits`."""
        document = self.request.provenance_json()
        document["expires_at"] = None if self.expires_at is None else self.expires_at.isoformat()
        document["edits"] = [edit.to_json() for edit in self.edits]
        return document


def request_views(sagacity: Sagacity, requests: Sequence[ApprovalRequest]) -> list[RequestView]:
    """Each request with its edits and deadline, reading each saga's journal once at most.

    Only a request that was edited (`edited_by`) or may be a workflow gate (a tool named
    `<workflow>.<stage>`) needs its journal.
    """
    entries: dict[str, list[JournalEntry]] = {}
    views = []
    for request in requests:
        needs_journal = request.edited_by is not None or "." in request.tool_name
        if needs_journal and request.saga_id not in entries:
            try:
                entries[request.saga_id] = sagacity.journal.entries(request.saga_id)
            except JournalError:  # an unreadable saga: its requests say so already
                entries[request.saga_id] = []
        journal = entries.get(request.saga_id, [])
        views.append(
            RequestView(
                request=request,
                expires_at=gate_deadline(journal, request) if journal else request.deadline,
                edits=tuple(edits_of(journal, request)) if request.edited_by else (),
            )
        )
    return views


def visible(text: str) -> str:
    """`text` on one line, every invisible or reordering character shown as a JSON escape."""
    return escape_for_display(text, keep_newlines=False)


def input_line(value: JsonValue) -> str:
    """A JSON value on one line, whole, every hidden character escaped."""
    return visible(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))


def _pretty(value: JsonValue) -> list[str]:
    # JSON escapes a newline inside a string: each line of the dump is a line of the value.
    return [visible(line) for line in json.dumps(value, ensure_ascii=False, indent=2).split("\n")]


def state_text(request: ApprovalRequest) -> str:
    """`waiting, 1 of 2 approvals (bob at …)`, or why it cannot be approved."""
    required = max(1, request.approvers_required)
    text = f"{request.state}, {len(request.approvals)} of {required} approval"
    text += "" if required == 1 else "s"
    if request.approvals:
        text += " (" + ", ".join(f"{a.approver} at {a.approved_at}" for a in request.approvals)
        text += ")"
    if request.problem is not None:
        text += f"; not approvable: {request.problem}"
    return text


def initiator_text(initiated: dict[str, JsonValue]) -> str:
    """`the agent (pydantic_ai, model gpt-4o, run id 01j…)`, `alice` or `code (work)`."""
    by = initiated.get("by")
    if by == "agent":
        known = [visible(str(initiated.get("adapter")))]
        known += [
            f"{name.replace('_', ' ')} {visible(str(initiated[name]))}"
            for name in AGENT_FIELDS
            if isinstance(initiated.get(name), str)
        ]
        return f"the agent ({', '.join(known)})"
    if by == "human":
        return visible(str(initiated.get("principal")))
    return f"code ({visible(str(initiated.get('via')))})"


def decision_lines(entries: Sequence[JournalEntry], not_counted: Container[int]) -> list[str]:
    """Each request and decision of a saga with its provenance: what asked, who, when, why.

    An approval whose signature does not count (`not_counted`, by seq) is never shown as
    a decision by the approver it names.
    """
    lines = []
    for entry in entries:
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        if entry.phase is Phase.AWAITING_APPROVAL:
            initiated = payload.get("initiated_by")
            by = initiator_text(initiated) if isinstance(initiated, dict) else "not recorded"
            lines.append(f"seq {entry.seq} asked for {visible(str(entry.tool_name))}, by {by}")
        elif entry.phase is Phase.INTENT and isinstance(
            grant := payload.get("approval_grant"), dict
        ):
            lines.append(f"seq {entry.seq} {_granted_text(entry, grant)}")
        elif entry.phase is Phase.INTENT and isinstance(rule := payload.get("approval_rule"), dict):
            lines.append(
                f"seq {entry.seq} {visible(str(entry.tool_name))} ran without asking: its rule "
                f"'{visible(str(rule.get('rule')))}' did not ask a human"
            )
        elif entry.phase is Phase.REMINDED:
            lines.append(f"seq {entry.seq} reminded of the expiry at {payload.get('expires_at')}")
        elif entry.phase is Phase.ESCALATED:
            group, until = visible(str(payload.get("group"))), payload.get("expires_at")
            lines.append(f"seq {entry.seq} escalated to {group} until {until}")
        elif entry.phase is Phase.APPROVED and entry.seq in not_counted:
            lines.append(f"seq {entry.seq} an approval that does not count (unsigned)")
        elif entry.phase in (Phase.APPROVED, Phase.REJECTED):
            who, done = payload.get("approver"), entry.phase.value.lower()
            line = f"seq {entry.seq} {done} by {visible(str(who))} at {entry.recorded_at}"
            if isinstance(payload.get("via"), str):
                line += f" via {visible(str(payload['via']))}"
            why = payload.get("justification", payload.get("reason"))
            if isinstance(why, str):
                line += f": {visible(why)}"
            lines.append(line)
    return lines


def _granted_text(entry: JournalEntry, grant: dict[str, JsonValue]) -> str:
    """Why a call ran without asking: the standing grant, its use, and who granted it."""
    return (
        f"{visible(str(entry.tool_name))} ran without asking: covered by grant "
        f"{visible(str(grant.get('grant_id')))} of {visible(str(grant.get('grantor')))} "
        f"(use {grant.get('use')}, GRANT_USED at seq {grant.get('grant_seq')} of its chain)"
    )


def escalation_lines(request: ApprovalRequest, now: datetime.datetime, label: int) -> list[str]:
    """Its reminder, where it escalates, and its escalation: who may approve it now."""
    lines = []
    if request.warn_at is not None:
        lines.append(
            "reminder".ljust(label)
            + expiry_text(request.warn_at, now).replace("(expired)", "(due)")
        )
    escalation = request.escalation
    if escalation is not None:
        members = ", ".join(visible(m) for m in escalation.members)
        lines.append(
            "group".ljust(label)
            + f"escalated to {visible(escalation.group)} ({members}) at "
            + f"{escalation.escalated_at.isoformat()} (seq {escalation.seq}): only their "
            + "approvals count"
        )
    elif request.escalate_to is not None:
        lines.append(
            "group".ljust(label) + f"escalates to {visible(request.escalate_to)} at expiry"
        )
    return lines


def expiry_text(expires_at: datetime.datetime | None, now: datetime.datetime) -> str:
    """`never`, or the time with how long is left (`in 59s`) or `(expired)`."""
    if expires_at is None:
        return "never"
    if expires_at <= now:
        return f"{expires_at.isoformat()} (expired)"
    return f"{expires_at.isoformat()} ({age(expires_at, now)})"


def edit_lines(edits: Sequence[InputEdit], indent: str) -> list[str]:
    """Each edit: who and when, then each field it changed, then the input before it."""
    lines = []
    for edit in edits:
        lines.append(f"edited by {visible(edit.editor)} at {edit.edited_at}")
        for change in edit.changes:
            if change.kind == "added":
                what = f"added {input_line(change.after)}"
            elif change.kind == "removed":
                what = f"removed (was {input_line(change.before)})"
            else:
                what = f"{input_line(change.before)} -> {input_line(change.after)}"
            lines.append(f"{indent}{visible(change.field)}: {what}")
        lines.append(f"{indent}before: {input_line(edit.before)}")
    return lines


def request_block(view: RequestView, now: datetime.datetime) -> list[str]:
    """A request as lines: saga, tool, state, times, reason, hash, the whole input, edits."""
    request = view.request
    label = 9  # the width of the longest label, "approvals", plus one
    pad = " " * (2 + label)
    lines = [f"request {visible(request.request_id)} of saga {visible(request.saga_id)}"]

    def field(name: str, value: str) -> None:
        lines.append(f"  {name.ljust(label)}{value}")

    field("tool", visible(request.tool_name))
    field("reason", visible(request.reason))
    field("state", state_text(request))
    field("asked", f"{request.requested_at.isoformat()} ({age(request.requested_at, now)} ago)")
    field("expires", expiry_text(view.expires_at, now))
    lines.extend(f"  {line}" for line in escalation_lines(request, now, label))
    if request.started_by is not None:
        field("started", f"by {visible(request.started_by)}")
    if request.initiated_by is not None:
        field("initiated", initiator_text(request.initiated_by))
    if request.justification_required:
        field("justify", "required: approve with --justification")
    for approval in request.approvals:
        if approval.justification is not None:
            field("why", f"{visible(approval.approver)}: {visible(approval.justification)}")
    lines.extend("  " + line for line in edit_lines(view.edits, "  "))
    field("sha256", request.input_sha256)
    first, *rest = _pretty(request.input)
    field("input", first)
    lines.extend(pad + line for line in rest)
    return lines
