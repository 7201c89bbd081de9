"""What the approval inbox shows: its items, a journal as a timeline, payloads as text.

`inbox_items` is the one list of things waiting for a human: tool approvals (kind
`"tool"`) and workflow gates (kind `"gate"`, named by workflow and stage). A gate is a
core approval request, so it is approved, rejected and edited as a tool's is; its page
adds the run's stage flow (`run_flow`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any
from urllib.parse import quote

from sagacity._history import SagaHistory
from sagacity._request_view import InputEdit, edits_of, gate_deadline
from sagacity._unicode import escape_for_display, principal_key
from sagacity.adapter import payload_of
from sagacity.approval import ApprovalRequest
from sagacity.approval._edit import started_workflow
from sagacity.approval._escalation import Escalation
from sagacity.approval._policy import ApprovalPolicy
from sagacity.audit._approvals import NOT_COUNTED, unsigned_approvals
from sagacity.errors import SagaNotFoundError
from sagacity.journal import JournalEntry, sha256_hex
from sagacity.saga import Sagacity
from sagacity.workflows import StageStatus, WorkflowRuntime
from sagacity.workflows._definition import START_CALL
from sagacity.workflows._runtime import runtimes_of
from sagacity.workflows._state import check_refusals, stage_status

__all__ = [
    "FlowStage",
    "InboxItem",
    "RunFlow",
    "TimelineRow",
    "age",
    "expiry",
    "inbox_items",
    "pretty_json",
    "run_flow",
    "timeline",
    "workflow_of_request",
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InboxItem:
    """One thing that waits for a human's decision."""

    kind: str
    """`"tool"` for an IRREVERSIBLE call's approval request, `"gate"` for a workflow gate."""
    item_id: str
    """The request id."""
    saga_id: str
    """The saga (or workflow run) that waits."""
    title: str
    """What waits: the tool's name, or `<workflow> · <stage>` for a gate."""
    reason: str
    """Why it needs approval, as the tool declared it."""
    requested_at: datetime.datetime
    """When it was asked."""
    expires_at: datetime.datetime | None
    """When it stops being usable; None for never."""
    state: str
    """`waiting`, `approved` or `tampered` (see `ApprovalRequest.state`)."""
    approvals: tuple[str, ...]
    """Who approved so far."""
    approvers_required: int
    """How many distinct approvers it needs."""
    url: str
    """The item's page, relative to the inbox."""
    saga_url: str
    """The saga's page, relative to the inbox."""
    workflow: str | None = None
    """The gate's workflow; None for a tool."""
    stage: str | None = None
    """The gate's stage; None for a tool."""
    edits: tuple[InputEdit, ...] = ()
    """The edits that made its input, oldest first; empty when nobody edited it."""
    input: Any = None
    """The input it would run with (for the queue's glance at its first fields)."""
    started_by: str | None = None
    """Who started its saga, as the journal records it: who asked."""
    warn_at: datetime.datetime | None = None
    """When its next reminder is due (`compensable(remind_before=)`); None for none."""
    escalate_to: str | None = None
    """The approver group it escalates to at expiry; None: it is denied then."""
    escalation: Escalation | None = None
    """Its escalation once it expired: the group whose members alone approve it now."""


def approvers_required(request: ApprovalRequest) -> int:
    """How many distinct approvers the request needs."""
    return max(1, request.approvers_required)


def started_by(request: ApprovalRequest) -> str | None:
    """Who started the request's saga, as the journal records it; None if nobody said."""
    return request.started_by


def not_in_group(request: ApprovalRequest, name: str) -> str | None:
    """Why `name` cannot approve a request escalated to a group they are not in; else None."""
    escalation = request.escalation
    if escalation is None or principal_key(name) in {principal_key(m) for m in escalation.members}:
        return None
    return (
        f"This request escalated to the group {escalation.group}: only its members "
        f"({', '.join(escalation.members)}) may approve it now."
    )


def request_path(request_id: str) -> str:
    """The path of a request's page below the inbox."""
    return f"/requests/{quote(request_id, safe='')}"


def saga_path(saga_id: str) -> str:
    """The path of a saga's page below the inbox (the id goes in the query: any id works)."""
    return f"/saga?id={quote(saga_id, safe='')}"


def inbox_items(sagacity: Sagacity, saga_id: str | None = None) -> list[InboxItem]:
    """Everything waiting for a decision, of one saga or of all, oldest first."""
    starts: dict[str, str | None] = {}
    journals: dict[str, list[JournalEntry]] = {}
    items = []
    for request in sagacity.pending(saga_id):
        workflow = workflow_of_request(sagacity, request, starts)
        stage = request.call_id if workflow is not None else None
        expires_at, edits = _review(sagacity, request, workflow, journals)
        items.append(
            InboxItem(
                kind="tool" if workflow is None else "gate",
                item_id=request.request_id,
                saga_id=request.saga_id,
                title=request.tool_name if workflow is None else f"{workflow} · {stage}",
                reason=request.reason,
                requested_at=request.requested_at,
                expires_at=expires_at,
                state=request.state,
                approvals=tuple(a.approver for a in request.approvals),
                approvers_required=approvers_required(request),
                url=request_path(request.request_id),
                saga_url=saga_path(request.saga_id),
                workflow=workflow,
                stage=stage,
                edits=edits,
                input=request.input,
                started_by=request.started_by,
                warn_at=request.warn_at,
                escalate_to=request.escalate_to,
                escalation=request.escalation,
            )
        )
    items.sort(key=lambda item: (item.requested_at, item.item_id))
    return items


def _review(
    sagacity: Sagacity,
    request: ApprovalRequest,
    workflow: str | None,
    journals: dict[str, list[JournalEntry]],
) -> tuple[datetime.datetime | None, tuple[InputEdit, ...]]:
    """A request's real deadline (a gate's timeout counts) and the edits of its input.

    Only an edited request or a gate needs its saga's journal; each is read once.
    """
    if request.edited_by is None and workflow is None:
        return request.deadline, ()
    if request.saga_id not in journals:
        journals[request.saga_id] = sagacity.history(request.saga_id)
    entries = journals[request.saga_id]
    edits = tuple(edits_of(entries, request)) if request.edited_by is not None else ()
    if workflow is None:
        return request.deadline, edits
    # The runtime that serves the workflow expires the gate by its declared timeout: its
    # deadline is the one that holds. Without it, the timeout the run's start journaled.
    for runtime in runtimes_of(sagacity):
        for gate in runtime.pending_gates(request.saga_id):
            if gate.request_id == request.request_id:
                return gate.expires_at, edits
    return gate_deadline(entries, request), edits


def edit_view(edit: InputEdit) -> dict[str, Any]:
    """An edit as the pages show it: who, when, each field before and after, the input before.

    Values are JSON text with every invisible or reordering character escaped.
    """
    return {
        "editor": visible(edit.editor),
        "edited_at": edit.edited_at,
        "changes": [
            {
                "field": visible(change.field),
                "kind": change.kind,
                "before": "" if change.kind == "added" else _json_line(change.before),
                "after": "" if change.kind == "removed" else _json_line(change.after),
            }
            for change in edit.changes
        ],
        "before": pretty_json(edit.before),
        "before_sha256": edit.before_sha256,
    }


def _json_line(value: Any) -> str:
    return visible(json.dumps(value, ensure_ascii=False))


def workflow_of_request(
    sagacity: Sagacity, request: ApprovalRequest, starts: dict[str, str | None] | None = None
) -> str | None:
    """The workflow whose gate `request` is, or None for a tool's request.

    A gate's request is for the tool `<workflow>.<stage>` with the stage as its call id,
    in a saga whose first entry starts that workflow (the run's start call). The journal
    says so whether or not a runtime is built in this process. `starts` caches each
    saga's workflow across calls.
    """
    workflow, dot, stage = request.tool_name.partition(".")
    if not dot or not workflow or stage != request.call_id:
        return None
    cache = {} if starts is None else starts
    if request.saga_id not in cache:
        cache[request.saga_id] = _started_workflow(sagacity, request.saga_id)
    return workflow if cache[request.saga_id] == workflow else None


def _started_workflow(sagacity: Sagacity, saga_id: str) -> str | None:
    return started_workflow(sagacity.history(saga_id))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FlowStage:
    """One stage of a run's flow, as its request page shows it."""

    name: str
    status: str
    """`done`, `waiting at the gate`, `approved`, `not started`, `failed`, `check
    failed`, `rejected`, `in doubt`, `compensated` or `compensation failed`."""
    gated: bool
    current: bool
    """Whether it is the stage the gate holds."""
    reason: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFlow:
    """A workflow run's stage flow, in order."""

    run_id: str
    workflow: str
    status: str
    """The run's `WorkflowStatus` value; `UNKNOWN` when only the journal was read."""
    stages: tuple[FlowStage, ...]
    runtime: WorkflowRuntime | None
    """The runtime of this process that has the workflow registered; None: read from the
    journal alone (stages not reached yet are then not known)."""


_LABELS = {
    StageStatus.EXECUTED: "done",
    StageStatus.AWAITING_APPROVAL: "waiting at the gate",
    StageStatus.APPROVED: "approved",
    StageStatus.PENDING: "not started",
    StageStatus.FAILED: "failed",
    StageStatus.CHECK_FAILED: "check failed",
    StageStatus.REJECTED: "rejected",
    StageStatus.IN_DOUBT: "in doubt",
    StageStatus.COMPENSATED: "compensated",
    StageStatus.COMPENSATION_FAILED: "compensation failed",
}


def run_flow(sagacity: Sagacity, run_id: str, gate_stage: str | None = None) -> RunFlow | None:
    """Run `run_id`'s stage flow: from the runtime that has its workflow, else the journal.

    None when the saga is no workflow run. `gate_stage` marks the stage the page is about.
    """
    for runtime in runtimes_of(sagacity):
        try:
            handle = runtime.get(run_id)
        except SagaNotFoundError:
            continue
        return RunFlow(
            run_id=run_id,
            workflow=handle.workflow_name,
            status=handle.status.value,
            stages=tuple(
                FlowStage(
                    name=s.name,
                    status=_LABELS[s.status],
                    gated=s.gated,
                    current=s.name == gate_stage,
                    reason=s.reason,
                )
                for s in handle.stages
            ),
            runtime=runtime,
        )
    return _journal_flow(sagacity, run_id, gate_stage)


def _journal_flow(sagacity: Sagacity, run_id: str, gate_stage: str | None) -> RunFlow | None:
    """The stages the journal names, in the order they were reached, with their status."""
    workflow = _started_workflow(sagacity, run_id)
    if workflow is None:
        return None
    history = SagaHistory.of(run_id, sagacity.history(run_id))
    waiting = {r.call_id: r for r in sagacity.pending(run_id)}
    names: list[str] = []
    for entry in history.entries:
        name = entry.call_id
        is_stage = name and name != START_CALL and entry.tool_name == f"{workflow}.{name}"
        if is_stage and name not in names:
            names.append(str(name))
    refused = check_refusals(history)
    stages = []
    for name in names:
        status, _, reason = stage_status(history, name, waiting.get(name), refused)
        stages.append(
            FlowStage(
                name=name,
                status=_LABELS[status],
                gated=name in history.asked,
                current=name == gate_stage,
                reason=reason,
            )
        )
    return RunFlow(
        run_id=run_id,
        workflow=workflow,
        status=history.outcome or "UNKNOWN",
        stages=tuple(stages),
        runtime=None,
    )


def inbox_version(items: list[InboxItem], entries: list[JournalEntry] | None = None) -> str:
    """A digest of what a page shows: it changes when an item or the saga's journal does.

    `items` are the page's items (all of them for the queue, the saga's for a saga or
    request page) and `entries` the saga's journal (None for the queue); the live-update
    stream computes the same digest from the stores, so a page drawn from them is current.
    """
    shown: list[Any] = [[i.kind, i.item_id, i.state, list(i.approvals)] for i in items]
    if entries is not None:
        shown.append([len(entries), entries[-1].hash if entries else None])
    return sha256_hex(shown)[:32]


def age(since: datetime.datetime, now: datetime.datetime) -> str:
    """How long ago, roughly: `45s`, `12m`, `3h`, `2d`."""
    return _span((now - since).total_seconds())


def expiry(expires_at: datetime.datetime | None, now: datetime.datetime) -> str:
    """`never`, `expired`, or `in 12m`."""
    if expires_at is None:
        return "never"
    left = (expires_at - now).total_seconds()
    return "expired" if left <= 0 else f"in {_span(left)}"


def _span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def pretty_json(value: Any) -> str:
    """`value` as indented JSON, with every invisible or reordering character escaped."""
    return visible(json.dumps(value, indent=2, ensure_ascii=False))


def visible(text: str) -> str:
    """`text` with every invisible or reordering character (a bidi override) escaped."""
    return escape_for_display(text)


def hash_matches(request: ApprovalRequest) -> bool:
    """Whether the input shown hashes to the hash shown (the core checks it too)."""
    return sha256_hex(request.input) == request.input_sha256


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TimelineRow:
    """One journal entry as the timeline shows it."""

    seq: int
    phase: str
    tool_name: str | None
    call_id: str | None
    recorded_at: str
    summary: str
    payload: str
    highlight: bool


def timeline(
    entries: list[JournalEntry],
    *,
    highlight: int | None = None,
    policy: ApprovalPolicy | None = None,
) -> list[TimelineRow]:
    """The saga's entries, oldest first, each with a one-line summary and its payload.

    Under a `policy` that requires signed approvals, an APPROVED entry whose signature
    does not verify is summarised as `unsigned: not counted`, never as approved by the
    name it carries.
    """
    unsigned = (
        {}
        if policy is None or not entries
        else unsigned_approvals(policy, entries[0].saga_id, entries)
    )
    return [
        TimelineRow(
            seq=entry.seq,
            phase=entry.phase.value,
            tool_name=None if entry.tool_name is None else visible(entry.tool_name),
            call_id=None if entry.call_id is None else visible(entry.call_id),
            recorded_at=entry.recorded_at,
            summary=visible(
                f"{NOT_COUNTED} ({unsigned[entry.seq]})"
                if entry.seq in unsigned
                else _summary(entry)
            ),
            payload="" if entry.payload is None else pretty_json(entry.payload),
            highlight=entry.seq == highlight,
        )
        for entry in entries
    ]


def _summary(entry: JournalEntry) -> str:
    payload = payload_of(entry)
    phase = entry.phase.value
    parts: list[str] = []
    if phase == "REJECTED" and isinstance(payload.get("edited_to"), str):
        # The close of an edited request: no decision against the call, which now waits
        # under the new request.
        return (
            f"request {payload.get('request_id')} closed: its input was edited by "
            f"{payload.get('approver')}; the call now waits as request {payload['edited_to']}"
        )
    if phase in ("APPROVED", "REJECTED") and isinstance(payload.get("approver"), str):
        parts.append(
            f"{'approved' if phase == 'APPROVED' else 'rejected'} by {payload['approver']}"
        )
    if phase == "AWAITING_APPROVAL" and isinstance(payload.get("request_id"), str):
        parts.append(f"request {payload['request_id']}")
        if isinstance(payload.get("edited_by"), str):
            parts.append(f"input edited by {payload['edited_by']}")
        if isinstance(payload.get("replaces"), str):
            parts.append(f"replaces request {payload['replaces']}")
    for key in ("reason", "error", "outcome", "resolved_by", "started_by"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            parts.append(f"{key.replace('_', ' ')}: {value}")
    if phase == "EXECUTED" and "result" in payload:
        result = json.dumps(payload["result"], ensure_ascii=False)
        parts.append(f"result: {result if len(result) <= 120 else result[:117] + '...'}")
    return "; ".join(parts)
