"""What an approver is shown about a pending request besides the request: edits, deadline.

Both are read from the saga's journal, so the CLI and the server show the same thing
whether or not the tools or the workflow are loaded where they run:

- `edits_of`: how the input came to be what it is. An edit (`Sagacity.edit`) journals a
  new AWAITING_APPROVAL (`replaces` the old request, `edited_by` the editor) and a
  REJECTED closing the old request with `edited_to` naming the new one. A request renewed
  after it expired `replaces` its predecessor too, with the same input: not an edit.
- `gate_deadline`: when a workflow gate times out. A run's start records each gate's
  timeout (`gate_timeouts`); the gate's deadline is `timeout` seconds after it was asked,
  earlier if the request itself expires first.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

from sagacity._history import payload_of
from sagacity._ids import WORKFLOW_START_CALL
from sagacity.approval import ApprovalRequest
from sagacity.journal import JournalEntry, JsonValue, Phase

__all__ = ["FieldChange", "InputEdit", "edits_of", "gate_deadline", "gate_timeout", "input_changes"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FieldChange:
    """One field of an input that an edit added, removed or changed."""

    field: str
    """The field's path: a top-level name, or `outer.inner` inside an object."""
    kind: str
    """`"changed"`, `"added"` or `"removed"`."""
    before: JsonValue = None
    """Its value before the edit (None when added)."""
    after: JsonValue = None
    """Its value after the edit (None when removed)."""

    def to_json(self) -> dict[str, JsonValue]:
        """The change as JSON: `before` is left out when added, `after` when removed."""
        shown: dict[str, JsonValue] = {"field": self.field, "kind": self.kind}
        if self.kind != "added":
            shown["before"] = self.before
        if self.kind != "removed":
            shown["after"] = self.after
        return shown


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InputEdit:
    """One journaled edit of a request's input."""

    editor: str
    """Who edited it."""
    edited_at: str
    """When: the new request's AWAITING_APPROVAL `recorded_at` (RFC 3339 UTC)."""
    replaced: str
    """The id of the request the edit closed."""
    request_id: str
    """The id of the request the edit asked."""
    before: dict[str, JsonValue]
    """The input before the edit."""
    before_sha256: str
    """Its hash."""
    changes: tuple[FieldChange, ...]
    """What the edit changed, field by field."""

    def to_json(self) -> dict[str, JsonValue]:
        """The edit as JSON, for `sagacity pending --json` and the API."""
        return {
            "edited_by": self.editor,
            "edited_at": self.edited_at,
            "replaced": self.replaced,
            "request_id": self.request_id,
            "before": self.before,
            "before_sha256": self.before_sha256,
            "changes": [change.to_json() for change in self.changes],
        }


_ABSENT: Any = object()


def input_changes(before: dict[str, JsonValue], after: dict[str, JsonValue]) -> list[FieldChange]:
    """The fields that differ between two inputs, in the order of `before` then `after`.

    Objects are compared field by field (`beneficiary.iban`); any other value, lists
    included, as a whole. Values are compared as JSON: `1` and `1.0` differ, as their
    hashes do.
    """
    changes: list[FieldChange] = []
    _compare("", before, after, changes)
    return changes


def _compare(prefix: str, before: Any, after: Any, changes: list[FieldChange]) -> None:
    for key in [*before, *(k for k in after if k not in before)]:
        path = f"{prefix}{key}"
        old, new = before.get(key, _ABSENT), after.get(key, _ABSENT)
        if old is _ABSENT:
            changes.append(FieldChange(field=path, kind="added", after=new))
        elif new is _ABSENT:
            changes.append(FieldChange(field=path, kind="removed", before=old))
        elif isinstance(old, dict) and isinstance(new, dict):
            _compare(f"{path}.", old, new, changes)
        elif not _same(old, new):
            changes.append(FieldChange(field=path, kind="changed", before=old, after=new))


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: `True` is not `1`, `1` is not `1.0`."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def edits_of(entries: Sequence[JournalEntry], request: ApprovalRequest) -> list[InputEdit]:
    """The edits that led to `request`'s input, oldest first; empty when none did.

    Followed back through the requests each one `replaces`: an edit is a replacement whose
    old request was closed by a REJECTED naming the new one in `edited_to`.
    """
    asked: dict[str, JournalEntry] = {}
    edited_to: dict[str, str] = {}
    for entry in entries:
        payload = payload_of(entry)
        request_id = payload.get("request_id")
        if not isinstance(request_id, str):
            continue
        if entry.phase is Phase.AWAITING_APPROVAL:
            asked[request_id] = entry
        elif entry.phase is Phase.REJECTED and isinstance(payload.get("edited_to"), str):
            edited_to[request_id] = payload["edited_to"]
    edits: list[InputEdit] = []
    current = asked.get(request.request_id)
    seen: set[str] = set()
    while current is not None:
        payload = payload_of(current)
        current_id, replaces = str(payload.get("request_id")), payload.get("replaces")
        if not isinstance(replaces, str) or replaces in seen:
            break
        seen.add(replaces)
        previous = asked.get(replaces)
        if previous is None:
            break
        if edited_to.get(replaces) == current_id:
            before, after = _input(previous), _input(current)
            edits.append(
                InputEdit(
                    editor=str(payload.get("edited_by")),
                    edited_at=current.recorded_at,
                    replaced=replaces,
                    request_id=current_id,
                    before=before,
                    before_sha256=str(payload_of(previous).get("input_sha256")),
                    changes=tuple(input_changes(before, after)),
                )
            )
        current = previous
    edits.reverse()
    return edits


def _input(entry: JournalEntry) -> dict[str, JsonValue]:
    value = payload_of(entry).get("input")
    return value if isinstance(value, dict) else {}


def gate_timeout(entries: Sequence[JournalEntry], request: ApprovalRequest) -> float | None:
    """The timeout, in seconds, of the workflow gate `request` is; None for no timeout.

    None too for a request that is no gate, and for a run started before runs recorded
    their gates' timeouts.
    """
    start = next((e for e in entries[:1] if e.call_id == WORKFLOW_START_CALL), None)
    if start is None or start.phase is not Phase.INTENT:
        return None
    workflow = start.tool_name
    if request.tool_name != f"{workflow}.{request.call_id}":
        return None
    started = next(
        (
            e
            for e in entries
            if e.phase is Phase.EXECUTED
            and e.call_id == WORKFLOW_START_CALL
            and e.tool_name == workflow
        ),
        None,
    )
    if started is None:
        return None
    result = payload_of(started).get("result")
    timeouts = result.get("gate_timeouts") if isinstance(result, dict) else None
    timeout = timeouts.get(request.call_id) if isinstance(timeouts, dict) else None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        return None
    return float(timeout)


def gate_deadline(
    entries: Sequence[JournalEntry], request: ApprovalRequest
) -> datetime.datetime | None:
    """When `request` stops being usable: its expiry, or its gate's timeout if earlier.

    Once it escalated (`ApprovalRequest.escalation`), its group's expiry.
    """
    if request.escalation is not None:
        return request.deadline
    timeout = gate_timeout(entries, request)
    if timeout is None:
        return request.expires_at
    deadline = request.requested_at + datetime.timedelta(seconds=timeout)
    return deadline if request.expires_at is None else min(request.expires_at, deadline)
