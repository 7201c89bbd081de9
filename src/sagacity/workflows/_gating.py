"""A run's gates: listing the waiting ones, approving, rejecting and expiring them.

A gate is the approval request a gated stage asks before it runs; deciding it journals
the decision through the saga core, and the run goes on when it is resumed.
"""

from __future__ import annotations

import asyncio
import builtins
import datetime

from sagacity._history import SagaHistory
from sagacity._ids import require_name
from sagacity._sweeping import Escalator
from sagacity.approval import ApprovalRequest
from sagacity.errors import (
    ApprovalExpiredError,
    ApprovalNotFoundError,
    SagaBusyError,
    SagaStateError,
)
from sagacity.workflows._definition import StageDefinition, WorkflowDefinition
from sagacity.workflows._runs import WorkflowRuns
from sagacity.workflows._state import GateRequest, WorkflowHandle, gate_request

__all__ = ["GATE_TIMEOUT_APPROVER", "WorkflowGates", "approved_late"]

GATE_TIMEOUT_APPROVER = "sagacity.expire_gates"
"""The name a timed-out gate's REJECTED entry records as its decider."""


class WorkflowGates(WorkflowRuns):
    """The gates of the runs (see `WorkflowRuns`): `WorkflowRuntime`'s deciding part."""

    def pending_gates(self, run_id: str | None = None) -> builtins.list[GateRequest]:
        """The gates waiting for a decision (of one run, or all), for an approval page.

        Each names its run, workflow and stage, the exact value the stage will receive
        (and the hash an approval is bound to), and when it was asked and times out.
        """
        return [gate_request(d, s, r) for d, s, r in self._open_gates(run_id)]

    # -- deciding ---------------------------------------------------------------------------

    def approve_gate(
        self,
        run_id: str,
        stage: str,
        approver: str,
        *,
        sha256: str | None = None,
        via: str | None = None,
    ) -> WorkflowHandle:
        """Journal `approver`'s approval of the value waiting at `stage`'s gate.

        The run does not go on by itself: `resume(run_id)` (in any process) runs the
        stage, after the same approval check an IRREVERSIBLE call passes.

        Args:
            run_id: The run.
            stage: The gated stage's name.
            approver: Who approves; recorded in the chain.
            sha256: The hash the approver was shown (`GateRequest.input_sha256`);
                refused if the gate now waits for another value.
            via: The channel the decision came through (see `Sagacity.approve`).

        Raises:
            ApprovalNotFoundError: No gate waits at that stage.
            ApprovalExpiredError: The gate's timeout passed: the run was failed and
                compensated instead.
            ApprovalError: Another check refused (see `Sagacity.approve`).
        """
        require_name(approver, "approver")
        definition, declared, request = self._waiting(run_id, stage)
        if self._timed_out(declared, request):
            self._expire(definition, declared, request)
            raise ApprovalExpiredError(
                f"run {run_id!r}: the gate before stage {stage!r} timed out "
                f"{declared.timeout_seconds:g}s after {request.requested_at.isoformat()}; the "
                "run was failed and compensated"
            )
        self.sagacity.approve(
            run_id,
            approver=approver,
            request_id=request.request_id,
            expected_sha256=sha256,
            via=via,
        )
        return self.get(run_id)

    def reject_gate(
        self, run_id: str, stage: str, approver: str, reason: str, *, via: str | None = None
    ) -> WorkflowHandle:
        """Journal a rejection at `stage`'s gate: the run fails and compensates.

        `via` is the channel the decision came through (see `Sagacity.approve`).

        Raises:
            ApprovalNotFoundError: No gate waits at that stage.
            ValueError: The approver names nobody, or the reason is not text.
        """
        require_name(approver, "approver")
        if not isinstance(reason, str):  # journaled and shown as the run's error
            raise ValueError(
                f"run {run_id!r}: a rejection's reason must be text, not {reason!r:.80}"
            )
        _, _, request = self._waiting(run_id, stage)
        self.sagacity.reject(
            run_id, approver=approver, reason=reason, request_id=request.request_id, via=via
        )
        return self.get(run_id)

    def expire_gates(self) -> builtins.list[WorkflowHandle]:
        """Fail and compensate every run whose gate waited past its timeout undecided.

        A gate approved in time is not expired (its run goes on when resumed). The
        timeout is measured on the `Sagacity`'s clock from when the run paused; the gate's
        REJECTED entry names `GATE_TIMEOUT_APPROVER` and the timeout. Runs another worker
        holds right now are left for the next call. Returns the runs expired.
        """
        # A gate that declares a reminder or a group is reminded and escalated first.
        Escalator(self.sagacity).sweep(deny=False)
        expired = []
        for definition, declared, request in self._open_gates():
            if not self._timed_out(declared, request):
                continue
            try:
                expired.append(self._expire(definition, declared, request))
            except SagaBusyError:
                continue  # a worker holds the run: it is expired on the next call
            except (ApprovalNotFoundError, SagaStateError):
                continue  # another worker decided the gate or ended the run meanwhile
        return expired

    async def aexpire_gates(self) -> builtins.list[WorkflowHandle]:
        """`expire_gates` from async code, off the event loop."""
        return await asyncio.to_thread(self.expire_gates)

    async def areject_gate(
        self, run_id: str, stage: str, approver: str, reason: str, *, via: str | None = None
    ) -> WorkflowHandle:
        """`reject_gate` from async code, off the event loop."""
        return await asyncio.to_thread(self.reject_gate, run_id, stage, approver, reason, via=via)

    # -- internals --------------------------------------------------------------------------

    def _open_gates(
        self, run_id: str | None = None
    ) -> builtins.list[tuple[WorkflowDefinition, StageDefinition, ApprovalRequest]]:
        """The pending requests of gated stages.

        `Sagacity.pending` leaves out those whose stage started: a used request is not a
        gate that waits.
        """
        found = []
        for request in self.sagacity.pending(run_id):
            stage = self._gate_stage(request)
            if stage is not None:
                found.append((stage[0], stage[1], request))
        return found

    def _gate_stage(
        self, request: ApprovalRequest
    ) -> tuple[WorkflowDefinition, StageDefinition] | None:
        workflow_name, _, stage_name = request.tool_name.partition(".")
        definition = self._definitions.get(workflow_name)
        if definition is None:
            return None
        for declared in definition.stages:
            if declared.name == stage_name and declared.call_id == request.call_id:
                return definition, declared
        return None

    def _waiting(
        self, run_id: str, stage: str
    ) -> tuple[WorkflowDefinition, StageDefinition, ApprovalRequest]:
        history = self._history(run_id)
        definition = self._definition_of(history)
        declared = next((s for s in definition.stages if s.name == stage), None)
        if declared is None:
            raise ApprovalNotFoundError(
                f"run {run_id!r} of workflow {definition.name!r} has no stage {stage!r}; its "
                f"stages are {[s.name for s in definition.stages]}"
            )
        for request in self.sagacity.pending(run_id):
            if request.call_id == declared.call_id and request.tool_name == declared.tool.name:
                return definition, declared, request
        if self._lost_gate(definition, history):
            return self._waiting(run_id, stage)
        raise ApprovalNotFoundError(
            f"run {run_id!r}: no gate waits before stage {stage!r} (the run is "
            f"{self.get(run_id).status.value})"
        )

    def _timed_out(self, declared: StageDefinition, request: ApprovalRequest) -> bool:
        if not declared.timeout_seconds or request.state == "approved":
            return False
        if request.escalate_to is not None:  # it fails at its group's expiry, not before
            return request.escalation is not None and request.expired(self.sagacity.now())
        deadline = request.requested_at + datetime.timedelta(seconds=declared.timeout_seconds)
        return self.sagacity.now() >= deadline

    def _expire(
        self, definition: WorkflowDefinition, declared: StageDefinition, request: ApprovalRequest
    ) -> WorkflowHandle:
        self.sagacity.reject(
            request.saga_id,
            approver=GATE_TIMEOUT_APPROVER,
            reason=(
                f"gate timed out: no decision within {declared.timeout_seconds:g}s of "
                f"{request.requested_at.isoformat()}"
            ),
            request_id=request.request_id,
        )
        return self.get(request.saga_id)


def approved_late(
    history: SagaHistory, declared: StageDefinition, request: ApprovalRequest
) -> bool:
    """Whether a gate's approval was recorded after its timeout: it timed out all the same.

    `approve_gate` refuses a late approval; `Sagacity.approve` (the tool approvals' route)
    does not know the gate's timeout, so the run checks when it goes on. Both times are
    the journal's own `recorded_at`, so one clock measures the wait.
    """
    if not declared.timeout_seconds or not request.approvals:
        return False
    if request.escalation is not None:  # its group's approvals were checked against its expiry
        return False
    awaiting = history.entry(request.seq)
    if awaiting is None:
        return False
    asked = datetime.datetime.fromisoformat(awaiting.recorded_at)
    decided = datetime.datetime.fromisoformat(request.approvals[-1].approved_at)
    return decided - asked > datetime.timedelta(seconds=declared.timeout_seconds)
