"""`sagacity pending`: the approval requests that wait, as an approver reads them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson

from sagacity._history import payload_of
from sagacity.approval import ApprovalRequest
from sagacity.audit._approvals import NOT_COUNTED, unsigned_approvals
from sagacity.cli._common import (
    EXIT_OK,
    age,
    emit_json,
    emit_table,
    opened,
    printable,
    require_saga,
)
from sagacity.cli._request_text import edit_lines, request_block, request_views, visible
from sagacity.errors import JournalError
from sagacity.journal import JournalEntry
from sagacity.saga import Sagacity

__all__ = ["pending"]


def pending(args: argparse.Namespace) -> int:
    """`sagacity pending`: a block per request on a terminal, a table or JSON otherwise."""
    with opened(args) as sagacity:
        if args.saga is not None:
            require_saga(sagacity, args.saga)
        views = request_views(sagacity, sagacity.pending(args.saga))
        uncounted = _uncounted(sagacity, [view.request for view in views])
        now = sagacity.now()
    if args.json:
        for view in views:
            document = view.to_json()
            document["not_counted"] = [
                {"seq": seq, "reason": why}
                for seq, why in uncounted.get(view.request.request_id, {}).items()
            ]
            emit_json(document)
        return EXIT_OK
    if views and sys.stdout.isatty():
        # A table squeezed to the terminal's width would cut the input and the hash an
        # approver must read whole: one block per request, long lines wrap.
        for number, view in enumerate(views):
            lines = request_block(view, now)
            lines += [
                f"  APPROVED at seq {seq}: {NOT_COUNTED} ({why})"
                for seq, why in uncounted.get(view.request.request_id, {}).items()
            ]
            sys.stdout.write(("\n" if number else "") + "\n".join(lines) + "\n")
        return EXIT_OK
    rows = []
    for view in views:
        request = view.request
        state = request.state
        if request.approvals:
            state += " by " + ", ".join(
                f"{a.approver} at {a.approved_at}" for a in request.approvals
            )
        for approval in request.approvals:
            if approval.via is not None:
                state += f" ({approval.approver} via {visible(approval.via)})"
            if approval.justification is not None:
                state += f" (why {approval.approver}: {visible(approval.justification)})"
        if request.problem is not None:
            state += f" (not approvable: {request.problem})"
        if view.edits:
            state += f" (edited by {view.edits[-1].editor} at {view.edits[-1].edited_at})"
        for seq in uncounted.get(request.request_id, {}):
            state += f" (APPROVED at seq {seq}: {NOT_COUNTED})"
        expires = "never" if view.expires_at is None else view.expires_at.isoformat()
        if view.expires_at is not None and view.expires_at <= now:
            expires += " (expired)"
        rows.append(
            (
                request.saga_id,
                request.request_id,
                request.tool_name,
                age(request.requested_at, now),
                expires,
                request.reason,
                state,
                request.input_sha256,
                orjson.dumps(request.input).decode(),
            )
        )
    emit_table(
        ("saga", "request", "tool", "age", "expires", "reason", "state", "sha256", "input"),
        rows,
        empty="no approval requests are waiting",
    )
    for view in views:  # under the table: what each edit changed, and the input before it
        for line in edit_lines(view.edits, "  "):
            sys.stdout.write(printable(f"request {view.request.request_id}: " + line) + "\n")
    return EXIT_OK


def _uncounted(
    sagacity: Sagacity, requests: Sequence[ApprovalRequest]
) -> dict[str, dict[int, str]]:
    """By request id: its APPROVED entries that do not count for their signature, with why.

    Read only where signatures are required; a saga whose journal cannot be read is left
    out (its requests show that problem already).
    """
    policy = sagacity.approval.policy
    if not policy.require_signed:
        return {}
    journals: dict[str, list[JournalEntry]] = {}
    found: dict[str, dict[int, str]] = {}
    for request in requests:
        if request.saga_id not in journals:
            try:
                journals[request.saga_id] = sagacity.journal.entries(request.saga_id)
            except JournalError:
                journals[request.saga_id] = []
        answering = [
            entry
            for entry in journals[request.saga_id]
            if entry.ref_seq == request.seq
            and payload_of(entry).get("request_id") == request.request_id
        ]
        unsigned = unsigned_approvals(policy, request.saga_id, answering)
        if unsigned:
            found[request.request_id] = unsigned
    return found
