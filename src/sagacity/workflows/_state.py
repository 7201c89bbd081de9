"""How a workflow run stands, read from its journal: status, stage flow, pending gate.

Nothing here is kept anywhere but in the journal (and the approval store for the gate's
pending request), so every process reads the same state.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any

from sagacity._history import CallState, SagaHistory, payload_of
from sagacity.approval import Approval, ApprovalRequest
from sagacity.errors import SagaStateError
from sagacity.journal import JournalEntry, JsonValue, Phase
from sagacity.workflows._definition import START_CALL, StageDefinition, WorkflowDefinition

__all__ = [
    "CHECK_FAILED",
    "CheckFailedError",
    "GateRequest",
    "StageState",
    "StageStatus",
    "WorkflowHandle",
    "WorkflowStatus",
    "check_refusals",
    "read_run",
    "run_input",
    "stage_status",
]

CHECK_FAILED = "check_failed"
"""The reason of the REFUSED entry a failed pre-flight check journals for its stage."""


class CheckFailedError(SagaStateError):
    """A stage's pre-flight check failed: the stage did not run and the run compensated."""


class WorkflowStatus(enum.Enum):
    """How a workflow run stands, read from its journal."""

    RUNNING = "RUNNING"
    """Started and not finished: running now, or stopped between stages (a crash) and
    waiting for `resume`."""
    PAUSED_AT_GATE = "PAUSED_AT_GATE"
    """Waiting for a human's decision at a gate (approved but not yet resumed, too)."""
    COMPLETED = "COMPLETED"
    """Every stage ran."""
    COMPENSATED = "COMPENSATED"
    """A stage failed, a check failed, a gate was rejected or timed out, and every
    declared compensation ran."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """The run failed and at least one compensation raised."""
    NEEDS_ATTENTION = "NEEDS_ATTENTION"
    """A stage may have run and nobody knows its result: it is not run again; a human
    settles it with `Sagacity.resolve(run_id, stage, ...)`, then `resume` goes on."""


class StageStatus(enum.Enum):
    """Where one stage of a run stands."""

    PENDING = "PENDING"
    """Not reached."""
    CHECK_FAILED = "CHECK_FAILED"
    """A pre-flight check refused it; it never ran."""
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """Its gate waits for a decision."""
    APPROVED = "APPROVED"
    """Its gate was approved; it runs on `resume`."""
    REJECTED = "REJECTED"
    """Its gate was rejected (or timed out); it never ran."""
    IN_DOUBT = "IN_DOUBT"
    """It started and its outcome is unknown (a crash in the middle of it)."""
    EXECUTED = "EXECUTED"
    """It ran; its output fed the next stage."""
    FAILED = "FAILED"
    """It raised."""
    COMPENSATED = "COMPENSATED"
    """It ran and its compensation undid it."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """It ran and its compensation raised."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StageState:
    """One stage of a run, as the journal records it."""

    name: str
    """The stage."""
    order: int
    """Its order."""
    status: StageStatus
    """Where it stands."""
    gated: bool
    """Whether it waits for approval before it runs (a gate, or IRREVERSIBLE)."""
    output: JsonValue = None
    """What it returned, as journaled (None until it ran)."""
    reason: str | None = None
    """Why it failed, was refused or rejected."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GateRequest:
    """A gate waiting for a human: what the approval page shows beside tool approvals."""

    run_id: str
    """The run (its saga id)."""
    workflow_name: str
    """The workflow."""
    description: str
    """The workflow's description."""
    stage_name: str
    """The stage that waits."""
    request_id: str
    """The approval request behind the gate."""
    value: JsonValue
    """The exact value the stage will receive, as JSON."""
    input: dict[str, JsonValue]
    """The stage's input as journaled, `{parameter: value}`: what `input_sha256` is of."""
    input_sha256: str
    """`sha256(JCS(input))`: what an approval is bound to."""
    reason: str
    """The gate's reason."""
    requested_at: datetime.datetime
    """When the run paused at the gate."""
    expires_at: datetime.datetime | None
    """When the gate times out (or its request expires); None: never."""
    state: str
    """`waiting`, `approved` or `tampered` (see `ApprovalRequest.state`)."""
    approvals: tuple[Approval, ...] = ()
    """Who approved so far."""
    approvers_required: int = 1
    """How many different principals must approve."""

    def to_json(self) -> dict[str, JsonValue]:
        """The gate as a JSON object, for the server and the approval page."""
        return {
            "run_id": self.run_id,
            "workflow": self.workflow_name,
            "description": self.description,
            "stage": self.stage_name,
            "request_id": self.request_id,
            "value": self.value,
            "input": self.input,
            "input_sha256": self.input_sha256,
            "reason": self.reason,
            "requested_at": self.requested_at.isoformat(),
            "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
            "state": self.state,
            "approvals": [
                {"approver": a.approver, "approved_at": a.approved_at, "seq": a.seq}
                for a in self.approvals
            ],
            "approvers_required": self.approvers_required,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowHandle:
    """A workflow run as it stands: what `start`, `get`, `resume` and the gates return."""

    run_id: str
    """The run (its saga id: `Sagacity.history(run_id)` is its journal)."""
    workflow_name: str
    """The workflow."""
    status: WorkflowStatus
    """How it stands."""
    current_stage: str | None
    """The first stage that has not run (the one running, paused, failed or refused);
    None once every stage ran."""
    result: JsonValue = None
    """The last stage's output as journaled, once COMPLETED; else None."""
    stages: tuple[StageState, ...] = ()
    """The stage flow, in order."""
    gate: GateRequest | None = None
    """The gate the run waits at, when PAUSED_AT_GATE."""
    error: str | None = None
    """What failed the run: the stage's error, the check's or the rejection's reason."""

    def to_json(self) -> dict[str, JsonValue]:
        """The run as a JSON object, for the server."""
        return {
            "run_id": self.run_id,
            "workflow": self.workflow_name,
            "status": self.status.value,
            "current_stage": self.current_stage,
            "result": self.result,
            "error": self.error,
            "gate": None if self.gate is None else self.gate.to_json(),
            "stages": [
                {
                    "name": s.name,
                    "order": s.order,
                    "status": s.status.value,
                    "gated": s.gated,
                    "output": s.output,
                    "reason": s.reason,
                }
                for s in self.stages
            ],
        }


def run_input(history: SagaHistory) -> JsonValue:
    """The run's input, from the journaled start call."""
    start = history.latest_call.get(START_CALL)
    assert start is not None
    journaled = payload_of(start.intent).get("input")
    return journaled.get("input") if isinstance(journaled, dict) else None


def read_run(
    definition: WorkflowDefinition,
    history: SagaHistory,
    pending: list[ApprovalRequest],
) -> WorkflowHandle:
    """Read a run's status and stage flow from its journal and its pending requests."""
    waiting = {r.call_id: r for r in pending if r.saga_id == history.saga_id}
    refused = check_refusals(history)
    states = []
    for declared in definition.stages:
        stands, output, reason = stage_status(
            history, declared.call_id, waiting.get(declared.call_id), refused
        )
        states.append(
            StageState(
                name=declared.name,
                order=declared.order,
                status=stands,
                gated=declared.waits_for_approval,
                output=output,
                reason=reason,
            )
        )
    gate = None
    for declared, state in zip(definition.stages, states, strict=True):
        request = waiting.get(declared.call_id)
        if request is not None and state.status in (
            StageStatus.AWAITING_APPROVAL,
            StageStatus.APPROVED,
        ):
            gate = gate_request(definition, declared, request)
            break
    status = _status(history, states, gate)
    current = next(
        (
            s.name
            for s in states
            if s.status
            not in (StageStatus.EXECUTED, StageStatus.COMPENSATED, StageStatus.COMPENSATION_FAILED)
        ),
        None,
    )
    return WorkflowHandle(
        run_id=history.saga_id,
        workflow_name=definition.name,
        status=status,
        current_stage=current,
        result=states[-1].output if status is WorkflowStatus.COMPLETED else None,
        stages=tuple(states),
        gate=gate if status is WorkflowStatus.PAUSED_AT_GATE else None,
        error=_error(history, states),
    )


def gate_request(
    definition: WorkflowDefinition, declared: StageDefinition, request: ApprovalRequest
) -> GateRequest:
    """The gate view of a stage's pending approval request."""
    expires_at = request.expires_at
    if request.escalation is not None:  # escalated at the timeout: its group's expiry holds
        expires_at = request.deadline
    elif declared.timeout_seconds:
        deadline = request.requested_at + datetime.timedelta(seconds=declared.timeout_seconds)
        expires_at = deadline if expires_at is None else min(expires_at, deadline)
    return GateRequest(
        run_id=request.saga_id,
        workflow_name=definition.name,
        description=definition.description,
        stage_name=declared.name,
        request_id=request.request_id,
        value=request.input.get(declared.parameter),
        input=request.input,
        input_sha256=request.input_sha256,
        reason=request.reason,
        requested_at=request.requested_at,
        expires_at=expires_at,
        state=request.state,
        approvals=request.approvals,
        approvers_required=request.approvers_required,
    )


def check_refusals(history: SagaHistory) -> dict[str | None, JournalEntry]:
    """The REFUSED entries failed pre-flight checks journaled, by the stage's call id."""
    return {
        e.call_id: e
        for e in history.entries
        if e.phase is Phase.REFUSED and payload_of(e).get("reason") == CHECK_FAILED
    }


def stage_status(
    history: SagaHistory,
    call_id: str,
    request: ApprovalRequest | None,
    refused: dict[str | None, JournalEntry],
) -> tuple[StageStatus, JsonValue, str | None]:
    """Where the stage journaled as `call_id` stands: its status, output and reason.

    `request` is its pending approval request (None: none) and `refused` the run's
    `check_refusals`. It needs only the journal, so a process without the workflow's
    definition reads the same status as the runtime does.
    """
    call = history.latest_call.get(call_id)
    if call is not None and call.executed:
        assert call.outcome is not None
        output = payload_of(call.outcome).get("result")
        if call.compensation is not None and call.compensation.phase is Phase.COMPENSATED:
            return StageStatus.COMPENSATED, output, None
        if call.compensation is not None:
            return StageStatus.COMPENSATION_FAILED, output, _message(call.compensation)
        return StageStatus.EXECUTED, output, None
    if call is not None and history.may_have_run(call):
        return StageStatus.IN_DOUBT, None, None
    if call is not None and _failed(call):
        assert call.outcome is not None
        return StageStatus.FAILED, None, _message(call.outcome)
    refusal = refused.get(call_id)
    if refusal is not None:
        return StageStatus.CHECK_FAILED, None, str(payload_of(refusal).get("detail"))
    asked = history.asked.get(call_id)
    if asked is not None:
        rejected = history.rejected(asked.seq)
        if rejected is not None:
            return StageStatus.REJECTED, None, str(payload_of(rejected).get("reason"))
        if request is not None:
            approved = request.state == "approved"
            status = StageStatus.APPROVED if approved else StageStatus.AWAITING_APPROVAL
            return status, None, None
    return StageStatus.PENDING, None, None


def _failed(call: CallState) -> bool:
    return call.outcome is not None and payload_of(call.outcome).get("kind") == "failure"


def _message(entry: Any) -> str | None:
    error = payload_of(entry).get("error")
    if isinstance(error, dict):
        return f"{error.get('type')}: {error.get('message')}"
    return None if error is None else str(error)


def _status(
    history: SagaHistory, states: list[StageState], gate: GateRequest | None
) -> WorkflowStatus:
    if history.ended is not None:
        try:
            return WorkflowStatus(history.outcome)
        except ValueError:
            return WorkflowStatus.NEEDS_ATTENTION  # an ENDED entry this code cannot read
    if any(s.status is StageStatus.IN_DOUBT for s in states):
        return WorkflowStatus.NEEDS_ATTENTION
    if gate is not None and not run_failed(history, states):
        return WorkflowStatus.PAUSED_AT_GATE
    return WorkflowStatus.RUNNING


def run_failed(history: SagaHistory, states: list[StageState]) -> bool:
    """Whether the run failed (a stage, a check, a gate) and must be compensated."""
    return history.has_failed_call() or any(
        s.status in (StageStatus.CHECK_FAILED, StageStatus.REJECTED) for s in states
    )


def _error(history: SagaHistory, states: list[StageState]) -> str | None:
    for s in states:
        if s.status in (StageStatus.FAILED, StageStatus.CHECK_FAILED, StageStatus.REJECTED):
            return s.reason
    if history.ended is not None:
        return _message(history.ended)
    return None
