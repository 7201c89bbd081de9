"""What the inbox's request and saga pages are drawn from, read off the stores.

A request page for a request no longer in the store says how it was settled, from the
journal (`NoLongerWaiting`), instead of a bare 404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson

from sagacity import ReconcileSubject
from sagacity._chain_kind import GRANT_STATUS
from sagacity._history import payload_of
from sagacity._ids import require_id
from sagacity._lease_view import Worker, is_stalled, workers_of
from sagacity._summary import iter_doubts, summary_of
from sagacity._verdicts import findings, verdict_text
from sagacity.approval import ApprovalRequest
from sagacity.audit import iter_entries, verify
from sagacity.errors import ConfigurationError, JournalError
from sagacity.journal import JournalEntry, Phase
from sagacity.saga import Sagacity
from sagacity.server._ui_http import Refusal
from sagacity.server._ui_inbox import (
    InboxItem,
    RunFlow,
    inbox_items,
    inbox_version,
    run_flow,
    timeline,
    visible,
)

__all__ = [
    "GLANCE_FIELDS",
    "NoLongerWaiting",
    "glance",
    "request_view",
    "saga_view",
    "tool_is_wrapped",
    "worker_text",
]


GLANCE_FIELDS = 3
"""How many of an input's fields the queue shows."""
_GLANCE_CHARS = 40


def glance(value: Any) -> list[tuple[str, str]]:
    """The first fields of an input, an `amount` first, for the queue: what is asked.

    Each value is cut at 40 characters (the request page shows it whole), and shown with
    every invisible or reordering character escaped, as the request page shows it.
    """
    if not isinstance(value, dict):
        return [("", visible(_cut(orjson.dumps(value).decode())))]
    keys = sorted(value, key=lambda key: key != "amount")[:GLANCE_FIELDS]
    shown = []
    for key in keys:
        field = value[key]
        text = field if isinstance(field, str) else orjson.dumps(field).decode()
        shown.append((visible(str(key)), visible(_cut(text))))
    return shown


def _cut(text: str) -> str:
    return text if len(text) <= _GLANCE_CHARS else text[: _GLANCE_CHARS - 1] + "…"


def worker_text(worker: Worker | None) -> str | None:
    """The worker of a saga that has not ended, in words (as `sagacity sagas` says it)."""
    return None if worker is None else worker.describe()


def tool_is_wrapped(sagacity: Sagacity, tool_name: str) -> bool:
    """Whether this server wraps `tool_name`: it can run an approved call itself."""
    try:
        sagacity.tool(tool_name)
    except ConfigurationError:
        return False
    return True


def request_view(
    sagacity: Sagacity, request_id: str
) -> tuple[ApprovalRequest, list[JournalEntry], list[InboxItem], RunFlow | None]:
    require_id(request_id, "request id")
    stored = sagacity.approvals.get(request_id)
    if stored is None:
        _raise_if_used(sagacity, request_id)
        raise Refusal(
            404,
            f"no pending approval request {request_id!r}: it was decided, used or never asked",
            heading="Not found",
        )
    # The journal is read before the requests: what the page shows is then at least as new
    # as the version it is drawn with, and the live stream never misses a change.
    entries = sagacity.history(stored.saga_id)
    items = inbox_items(sagacity, stored.saga_id)
    shown = next((r for r in sagacity.pending(stored.saga_id) if r.request_id == request_id), None)
    if shown is None:
        raise Refusal(404, f"no pending approval request {request_id!r}", heading="Not found")
    item = next((i for i in items if i.item_id == request_id), None)
    flow = None
    if item is not None and item.kind == "gate":
        flow = run_flow(sagacity, shown.saga_id, gate_stage=item.stage)
    return shown, entries, items, flow


class NoLongerWaiting(Exception):
    """A request the journal asked, and that was decided, used or closed since."""

    def __init__(self, message: str, saga_id: str, saga_status: str) -> None:
        super().__init__(message)
        self.message = message
        self.saga_id = saga_id
        self.saga_status = saga_status


def _raise_if_used(sagacity: Sagacity, request_id: str) -> None:
    """Raise `NoLongerWaiting` saying how a request the journal asked was settled.

    A bookmarked request page outlives its request (deleted once it is used, rejected or
    edited): the journal still has its AWAITING_APPROVAL, found by a scan of the journal
    (only on this path, for an id the store does not hold).
    """
    asked = next(
        (
            entry
            for entry in iter_entries(sagacity.journal)
            if entry.phase is Phase.AWAITING_APPROVAL
            and payload_of(entry).get("request_id") == request_id
        ),
        None,
    )
    if asked is None:
        return
    entries = sagacity.history(asked.saga_id)
    what: list[str] = []
    for entry in entries:
        payload = payload_of(entry)
        if entry.ref_seq == asked.seq and entry.phase is Phase.APPROVED:
            what.append(f"approved by {payload.get('approver')} at {entry.recorded_at}")
        elif entry.ref_seq == asked.seq and entry.phase is Phase.REJECTED:
            by = payload.get("rejected_by") or payload.get("approver") or payload.get("by")
            why = payload.get("reason")
            what.append(f"rejected by {by} at {entry.recorded_at}" + (f": {why}" if why else ""))
        elif entry.phase is Phase.INTENT and payload.get("request_id") == request_id:
            ran = next((e for e in entries if e.ref_seq == entry.seq), None)
            outcome = "no outcome yet" if ran is None else ran.phase.value
            what.append(f"its call ran at seq {entry.seq} ({outcome})")
    summary = summary_of(asked.saga_id, entries)
    message = (
        f"Request {request_id} for {asked.tool_name} (saga {asked.saga_id}) is no longer "
        "waiting for a decision" + (": " + "; ".join(what) if what else "") + "."
    )
    raise NoLongerWaiting(message, asked.saga_id, summary.status)


def saga_view(sagacity: Sagacity, saga_id: str, base: str) -> dict[str, Any]:
    if not saga_id:
        raise Refusal(422, "name a saga: ?id=<saga id>", heading="Which saga?")
    require_id(saga_id, "saga id (?id=)")
    policy = sagacity.approval.policy
    report = verify(
        sagacity.journal,
        saga_id,
        approval_public_keys=policy.public_keys.values() if policy.require_signed else (),
    )
    try:
        entries = sagacity.history(saga_id)
    except JournalError as error:
        entries = []
        read_error: str | None = str(error)
    else:
        read_error = None
    if not entries and read_error is None:
        raise Refusal(404, f"saga {saga_id!r} has no journal entries", heading="Not found")
    items = inbox_items(sagacity, saga_id)
    summary = summary_of(saga_id, entries) if entries else None
    status = summary.status if summary is not None else "UNREADABLE"
    worker = None
    if summary is not None:
        worker = workers_of(sagacity.journal, [summary], sagacity.now()).get(saga_id)
    doubts = list(iter_doubts(sagacity.journal, saga_id=saga_id)) if entries else []
    return {
        "saga_id": saga_id,
        "outcome": status,
        "worker": worker_text(worker),
        "stalled": summary is not None and is_stalled(summary, worker),
        "verified": report.ok,
        "problem": report.problems[0] if report.problems else None,
        "entry_count": report.entries,
        "started_by": summary.started_by if summary is not None else None,
        "pending": [
            {
                "url": base + item.url,
                "title": item.title,
                "state": item.state,
                "approvals": item.approvals,
                "approvers_required": item.approvers_required,
            }
            for item in items
        ],
        "doubts": doubts,
        "doubt_verdicts": [
            verdict_text(doubt.reconciled)
            if doubt.reconciled is not None
            or sagacity.has_reconciler(doubt.tool_name, ReconcileSubject(doubt.kind))
            else "none is declared in this server's process: a human settles it"
            for doubt in doubts
        ],
        "verdicts": [
            f"{found['subject']} {found['call_id']}: {verdict_text(found)}"
            for found in findings(entries)
        ],
        "can_compensate": status not in ("COMPLETED", GRANT_STATUS) and bool(entries),
        "timeline": timeline(entries, policy=sagacity.approval.policy),
        "error": read_error,
        "events": f"saga={quote(saga_id, safe='')}&v={inbox_version(items, entries)}",
    }
