"""`WorkflowRuntime`: start, pause, approve, resume and expire workflow runs.

A run is a saga whose id is the run id. Its work journals the start call, then calls
each stage's tool in order with the previous stage's journaled output: the saga core
does the journaling, the replay of stages that ran, the approval check of gates and the
compensation walk. This module decides when the work runs and reads how the run stands.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import itertools
import uuid
import weakref
from collections.abc import Iterable
from typing import Any

from sagacity._history import SagaHistory, payload_of
from sagacity._ids import require_id
from sagacity._saga_run import run_coroutine
from sagacity.errors import (
    ApprovalExpiredError,
    ApprovalMissingError,
    InDoubtError,
    ReplayMismatchError,
    SagaStateError,
)
from sagacity.journal import JsonValue, to_json
from sagacity.journal._rebuild import from_json
from sagacity.saga import Sagacity
from sagacity.workflows._definition import (
    START_CALL,
    WorkflowDefinition,
)
from sagacity.workflows._gating import GATE_TIMEOUT_APPROVER, WorkflowGates, approved_late
from sagacity.workflows._state import (
    GateRequest,
    WorkflowHandle,
    WorkflowStatus,
    run_failed,
    run_input,
)
from sagacity.workflows._work import awork_of, work_of

__all__ = [
    "GATE_TIMEOUT_APPROVER",
    "WorkflowRuntime",
    "live_runtimes",
    "pending_gates",
    "runtimes_of",
]

_CREATED = itertools.count()

_LIVE: weakref.WeakSet[WorkflowRuntime] = weakref.WeakSet()
"""Every runtime of this process, for the server's routes and its periodic expiry."""


def live_runtimes() -> builtins.list[WorkflowRuntime]:
    """The workflow runtimes alive in this process, oldest first."""
    return sorted(_LIVE, key=lambda runtime: runtime.created)


def runtimes_of(sagacity: Sagacity) -> builtins.list[WorkflowRuntime]:
    """The runtimes alive in this process whose runs are sagas of `sagacity`."""
    return [runtime for runtime in live_runtimes() if runtime.sagacity is sagacity]


def pending_gates(sagacity: Sagacity, run_id: str | None = None) -> builtins.list[GateRequest]:
    """The gates waiting on `sagacity`'s runs (of one run, or all), oldest first.

    For an approval page beside the tool approvals: each names the stage, run and
    workflow, the exact value the stage will receive and its sha256, and when it was
    asked and times out. Found through the runtimes built in this process on `sagacity`;
    none built, none found. Every gate is also a pending `ApprovalRequest` of
    `sagacity.pending()` (same `request_id`).
    """
    found: dict[str, GateRequest] = {}
    for runtime in runtimes_of(sagacity):
        for gate in runtime.pending_gates(run_id):
            found.setdefault(gate.request_id, gate)
    return sorted(found.values(), key=lambda gate: (gate.requested_at, gate.request_id))


_ENDED = frozenset(
    {WorkflowStatus.COMPLETED, WorkflowStatus.COMPENSATED, WorkflowStatus.COMPENSATION_FAILED}
)


class WorkflowRuntime(WorkflowGates):
    """Runs the workflows it is given on a `Sagacity`: each run is one saga.

    Args:
        sagacity: Whose journal, approval store and compensation walk the runs use.
        workflows: `workflow` classes (built with no arguments) or their instances (built
            with the services their stages use).

    Raises:
        ConfigurationError: A declaration is wrong: two stages with one order, a `by`
            that names nothing, a `gate` or `check` on a method that is not a stage, a
            stage that cannot take the previous output (the first: the run's input), a
            check that is not a `StageCheck`, or two workflows with one name.
    """

    def __init__(self, sagacity: Sagacity, workflows: Iterable[object]) -> None:
        super().__init__(sagacity, workflows)
        self.created = next(_CREATED)
        """Its place among the runtimes built in this process."""
        _LIVE.add(self)

    # -- starting and resuming ------------------------------------------------------------

    def start(
        self,
        name: str,
        input: Any,
        run_id: str | None = None,
        *,
        started_by: str | None = None,
    ) -> WorkflowHandle:
        """Start a run of workflow `name` with `input` and run it as far as it goes.

        Returns when the run completed, failed (compensated), paused at a gate, or
        stopped at a stage in doubt; the handle says which. A workflow with async stages
        or checks is run on an event loop of its own (use `astart` inside one).
        `started_by` names the principal who starts the run: journaled, and refused as
        an approver of its gates (four eyes), as for `Sagacity.saga`.

        Raises:
            ConfigurationError: No such workflow.
            SerializationError: The input cannot be made JSON, or the first stage cannot
                take it; nothing was journaled.
            SagaStateError: A saga with this run id exists already.
        """
        definition, run_id, input_json = self._prepare(name, input, run_id)
        if definition.is_async:
            _refuse_in_loop(f"workflow {name!r} has async stages or checks", "astart")
            return run_coroutine(
                self.astart(name, input, run_id, started_by=started_by), f"workflow {name!r}"
            )
        self.sagacity.saga(run_id, work_of(definition, run_id, input_json), started_by=started_by)
        return self.get(run_id)

    async def astart(
        self,
        name: str,
        input: Any,
        run_id: str | None = None,
        *,
        started_by: str | None = None,
    ) -> WorkflowHandle:
        """Start a run from async code (see `start`); async stages and checks are awaited."""
        definition, run_id, input_json = self._prepare(name, input, run_id)
        await self.sagacity.asaga(
            run_id, awork_of(definition, run_id, input_json), started_by=started_by
        )
        return self.get(run_id)

    def resume(self, run_id: str) -> WorkflowHandle:
        """Continue a run from its journal, in any process with the workflow registered.

        Stages that EXECUTED are not run again: their journaled output feeds the next
        stage. A run that ended, one with a stage in doubt (NEEDS_ATTENTION) and one
        waiting at a gate nobody approved yet are returned as they stand (a gate whose
        timeout passed is expired first). A run that failed but was not compensated (the
        process died on the way) is compensated now.

        A gate whose request a crash kept from the approval store is stored again from
        its journal entry. The stages registered here must be those the run was started
        with, by name and in order (their bodies and order numbers may differ).

        Raises:
            SagaNotFoundError: No run of a workflow registered here has this id.
            SagaBusyError: Another worker holds the run.
            ReplayMismatchError: The workflow registered here has other stages than the
                run was started with; nothing was run.
        """
        definition, handle = self._resumable(run_id)
        if handle is not None:
            return handle
        if definition.is_async:
            _refuse_in_loop(f"run {run_id!r} has async stages or checks", "aresume")
            return run_coroutine(self.aresume(run_id), f"run {run_id!r}")
        if self._failed(definition, run_id):
            self.sagacity.compensate(run_id)
            return self.get(run_id)
        input_json = run_input(self._history(run_id))
        # Another worker may have moved the run on since it was read: report how it stands.
        with contextlib.suppress(ApprovalExpiredError, ApprovalMissingError, InDoubtError):
            self.sagacity.resume_saga(run_id, work_of(definition, run_id, input_json))
        return self.get(run_id)

    async def aresume(self, run_id: str) -> WorkflowHandle:
        """Continue a run from async code (see `resume`)."""
        definition, handle = self._resumable(run_id)
        if handle is not None:
            return handle
        if self._failed(definition, run_id):
            await self.sagacity.acompensate(run_id)
            return self.get(run_id)
        input_json = run_input(self._history(run_id))
        with contextlib.suppress(ApprovalExpiredError, ApprovalMissingError, InDoubtError):
            await self.sagacity.aresume_saga(run_id, awork_of(definition, run_id, input_json))
        return self.get(run_id)

    # -- internals --------------------------------------------------------------------------

    def _prepare(
        self,
        name: str,
        input: Any,
        run_id: str | None,
    ) -> tuple[WorkflowDefinition, str, JsonValue]:
        definition = self.definition(name)
        run_id = run_id if run_id is not None else f"{name}-{uuid.uuid4().hex[:16]}"
        require_id(run_id, "run id")
        input_json = to_json(input, where=f"workflow {name!r} input")
        first = definition.stages[0]
        from_json(
            input_json,
            first.annotation,
            where=f"workflow {name!r} input (for stage {first.name!r} {first.parameter!r})",
        )
        if self.sagacity.history(run_id):
            raise SagaStateError(
                f"a saga {run_id!r} exists already; a run id is used once: resume it with "
                "resume(run_id), or start with another run id"
            )
        return definition, run_id, input_json

    def _resumable(self, run_id: str) -> tuple[WorkflowDefinition, WorkflowHandle | None]:
        """The run's workflow, and its handle when there is nothing to run now."""
        history = self._history(run_id)
        definition = self._definition_of(history)
        if history.ended is None:
            _refuse_other_stages(definition, history)
            # A stage another worker is running reads as in doubt (an INTENT, no outcome
            # yet): only a run nobody holds may be judged, so take its lease first.
            with self.sagacity.join(run_id):
                self._restore_gate(definition, self._history(run_id))
            history = self._history(run_id)
        start = history.latest_call[START_CALL]
        if start.outcome is None and history.ended is None:
            # The start call records the input and has no effect: it ran. Its result names
            # the stages the run follows from now on: those of this definition.
            self.sagacity.resolve(
                run_id,
                START_CALL,
                executed=True,
                result=definition.start_result,
                by="sagacity.workflows",
            )
        handle = self.get(run_id)
        if handle.status in _ENDED or handle.status is WorkflowStatus.NEEDS_ATTENTION:
            return definition, handle
        if handle.gate is not None:
            declared = definition.stage(handle.gate.stage_name)
            request = self.sagacity.approval.pending_request(run_id, handle.gate.request_id)
            if handle.gate.state != "approved":
                if self._timed_out(declared, request):
                    return definition, self._expire(definition, declared, request)
                if request.expired(self.sagacity.now()):
                    return definition, None  # the run asks again (`Sagacity(approval_ttl=…)`)
                return definition, handle
            if approved_late(self._history(run_id), declared, request):
                return definition, self._expire(definition, declared, request)
        return definition, None

    def _failed(self, definition: WorkflowDefinition, run_id: str) -> bool:
        return run_failed(self._history(run_id), builtins.list(self.get(run_id).stages))


def _refuse_other_stages(definition: WorkflowDefinition, history: SagaHistory) -> None:
    """Refuse to go on with a definition whose stages are not those the run was started with.

    The start's result names the run's stages in order; a stage inserted, removed,
    renamed or moved since would run a stage the run never recorded (say, between a
    gate's approval and the approved stage), or skip one. A run whose start has no
    result yet has run no stage: it follows this definition.

    Raises:
        ReplayMismatchError: The stages differ; names the run and the first difference.
    """
    start = history.latest_call.get(START_CALL)
    if start is None or start.outcome is None or not start.executed:
        return
    recorded = payload_of(start.outcome).get("result")
    stages = recorded.get("stages") if isinstance(recorded, dict) else None
    if not isinstance(stages, builtins.list) or stages == definition.stage_names:
        return
    here = definition.stage_names
    at = next(
        (i for i, (was, now) in enumerate(zip(stages, here, strict=False)) if was != now),
        min(len(stages), len(here)),
    )
    was = repr(stages[at]) if at < len(stages) else "no stage"
    now = repr(here[at]) if at < len(here) else "no stage"
    raise ReplayMismatchError(
        f"run {history.saga_id!r} of workflow {definition.name!r} was started with the "
        f"stages {stages}, but the workflow registered here has {here}: stage {at + 1} of the "
        f"run is {was}, here it is {now}. Nothing was run; resume the run where the "
        "definition it was started with is registered"
    )


def _refuse_in_loop(what: str, instead: str) -> None:
    """Refuse to run async parts on a loop of their own from a thread that runs one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise SagaStateError(f"{what} and an event loop is running here: await runtime.{instead}")
