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
import datetime
import itertools
import uuid
import weakref
from collections.abc import Iterable
from typing import Any

from sagacity._history import SagaHistory, payload_of
from sagacity._ids import require_id, require_name
from sagacity._saga_run import run_coroutine
from sagacity.approval import ApprovalRequest
from sagacity.approval._check import journaled_request
from sagacity.errors import (
    ApprovalExpiredError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ConfigurationError,
    InDoubtError,
    ReplayMismatchError,
    SagaBusyError,
    SagaNotFoundError,
    SagaStateError,
)
from sagacity.journal import JsonValue, to_json
from sagacity.journal._rebuild import from_json
from sagacity.saga import Sagacity
from sagacity.workflows._declare import workflow_of
from sagacity.workflows._definition import (
    START_CALL,
    StageDefinition,
    WorkflowDefinition,
    define,
)
from sagacity.workflows._state import (
    GateRequest,
    WorkflowHandle,
    WorkflowStatus,
    gate_request,
    read_run,
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

GATE_TIMEOUT_APPROVER = "sagacity.expire_gates"
"""The name a timed-out gate's REJECTED entry records as its decider."""

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


class WorkflowRuntime:
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
        self.sagacity = sagacity
        """The `Sagacity` the runs are sagas of."""
        self._definitions: dict[str, WorkflowDefinition] = {}
        for source in workflows:
            cls = source if isinstance(source, type) else type(source)
            declared = workflow_of(cls)
            if declared is not None and declared.name in self._definitions:
                other = type(self._definitions[declared.name].instance).__qualname__
                raise ConfigurationError(
                    f"two workflows are named {declared.name!r} ({other} and "
                    f"{cls.__qualname__}); give each workflow its own name"
                )
            definition = define(sagacity, source)
            self._definitions[definition.name] = definition
        self.created = next(_CREATED)
        """Its place among the runtimes built in this process."""
        _LIVE.add(self)

    @property
    def workflows(self) -> tuple[str, ...]:
        """The names of the workflows this runtime runs."""
        return tuple(self._definitions)

    def definition(self, name: str) -> WorkflowDefinition:
        """The checked declarations of workflow `name`.

        Raises:
            ConfigurationError: No workflow of that name is registered here.
        """
        try:
            return self._definitions[name]
        except KeyError:
            raise ConfigurationError(
                f"no workflow named {name!r} is registered in this runtime; registered: "
                f"{sorted(self._definitions)}"
            ) from None

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

    # -- reading ----------------------------------------------------------------------------

    def get(self, run_id: str) -> WorkflowHandle:
        """How run `run_id` stands, read from the journal.

        Raises:
            SagaNotFoundError: No run of a workflow registered here has this id.
        """
        history = self._history(run_id)
        return self._read(self._definition_of(history), history, self.sagacity.pending(run_id))

    def list(self, status: WorkflowStatus | str | None = None) -> builtins.list[WorkflowHandle]:
        """The runs of the workflows registered here, oldest saga id first; or those in `status`.

        Reads every saga's journal: meant for an operator's page, not a hot loop.
        """
        wanted = None if status is None else WorkflowStatus(status)
        pending = self.sagacity.pending()
        found = []
        after: str | None = None
        while True:
            page = self.sagacity.journal.list_sagas(after=after, limit=200)
            for saga_id in page:
                history = SagaHistory.of(saga_id, self.sagacity.journal.entries(saga_id))
                definition = self._registered(history)
                if definition is None:
                    continue
                handle = self._read(definition, history, pending)
                if wanted is None or handle.status is wanted:
                    found.append(handle)
            if len(page) < 200:
                return found
            after = page[-1]

    def pending_gates(self, run_id: str | None = None) -> builtins.list[GateRequest]:
        """The gates waiting for a decision (of one run, or all), for an approval page.

        Each names its run, workflow and stage, the exact value the stage will receive
        (and the hash an approval is bound to), and when it was asked and times out.
        """
        return [gate_request(d, s, r) for d, s, r in self._open_gates(run_id)]

    # -- deciding ---------------------------------------------------------------------------

    def approve_gate(
        self, run_id: str, stage: str, approver: str, *, sha256: str | None = None
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
            run_id, approver=approver, request_id=request.request_id, expected_sha256=sha256
        )
        return self.get(run_id)

    def reject_gate(self, run_id: str, stage: str, approver: str, reason: str) -> WorkflowHandle:
        """Journal a rejection at `stage`'s gate: the run fails and compensates.

        Raises:
            ApprovalNotFoundError: No gate waits at that stage.
        """
        require_name(approver, "approver")
        _, _, request = self._waiting(run_id, stage)
        self.sagacity.reject(
            run_id, approver=approver, reason=reason, request_id=request.request_id
        )
        return self.get(run_id)

    def expire_gates(self) -> builtins.list[WorkflowHandle]:
        """Fail and compensate every run whose gate waited past its timeout undecided.

        A gate approved in time is not expired (its run goes on when resumed). The
        timeout is measured on the `Sagacity`'s clock from when the run paused; the gate's
        REJECTED entry names `GATE_TIMEOUT_APPROVER` and the timeout. Runs another worker
        holds right now are left for the next call. Returns the runs expired.
        """
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
        self, run_id: str, stage: str, approver: str, reason: str
    ) -> WorkflowHandle:
        """`reject_gate` from async code, off the event loop."""
        return await asyncio.to_thread(self.reject_gate, run_id, stage, approver, reason)

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

    def _history(self, run_id: str) -> SagaHistory:
        history = self.sagacity.approval.history(run_id)
        if not history.entries:
            raise SagaNotFoundError(f"run {run_id!r} has no journal entries")
        return history

    def _registered(self, history: SagaHistory) -> WorkflowDefinition | None:
        start = history.latest_call.get(START_CALL)
        if start is None or start.intent.seq != 1:
            return None
        return self._definitions.get(start.intent.tool_name or "")

    def _definition_of(self, history: SagaHistory) -> WorkflowDefinition:
        definition = self._registered(history)
        if definition is None:
            raise SagaNotFoundError(
                f"saga {history.saga_id!r} is not a run of a workflow registered here "
                f"({sorted(self._definitions)})"
            )
        return definition

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
            if _approved_late(self._history(run_id), declared, request):
                return definition, self._expire(definition, declared, request)
        return definition, None

    def _read(
        self,
        definition: WorkflowDefinition,
        history: SagaHistory,
        pending: builtins.list[ApprovalRequest],
    ) -> WorkflowHandle:
        """The run's handle; a gate whose request a crash kept from the store shows too."""
        known = {r.request_id for r in pending}
        lost = self._lost_requests(definition, history, known)
        return read_run(definition, history, [*pending, *lost])

    def _restore_gate(self, definition: WorkflowDefinition, history: SagaHistory) -> bool:
        """Store again the request of a gate whose store write a crash lost; True if one was.

        Call it holding the run's lease: nobody else asks, runs or consumes a gate
        meanwhile.
        """
        lost = self._lost_requests(definition, history)
        for request in lost:
            self.sagacity.approvals.save(request)
        return bool(lost)

    def _lost_requests(
        self,
        definition: WorkflowDefinition,
        history: SagaHistory,
        known: frozenset[str] | set[str] = frozenset(),
    ) -> builtins.list[ApprovalRequest]:
        """The requests of gates that wait in the journal and are missing from the store.

        A process killed between a gate's AWAITING_APPROVAL entry and its store write
        leaves such a gate: nobody could approve or reject it. The entry records all of
        the request (id, input, hash, reason, expiry, policy), which is rebuilt from it,
        asked at the entry's `recorded_at`.
        """
        lost: builtins.list[ApprovalRequest] = []
        if history.ended is not None:
            return lost
        for awaiting in history.open_requests():
            call_id = awaiting.call_id or ""
            if history.asked.get(call_id) is not awaiting:
                continue  # asked again since: the later request is the gate's
            declared = next((s for s in definition.stages if s.call_id == call_id), None)
            if declared is None or awaiting.tool_name != declared.tool.name:
                continue
            request = journaled_request(history.saga_id, awaiting)
            if request.request_id in known:
                continue  # pending: stored
            if self.sagacity.approvals.get(request.request_id) is None:
                lost.append(request)
        return lost

    def _lost_gate(self, definition: WorkflowDefinition, history: SagaHistory) -> bool:
        """Restore a lost gate request under the run's lease (see `_lost_requests`)."""
        if not self._lost_requests(definition, history):
            return False
        with self.sagacity.join(history.saga_id):
            return self._restore_gate(definition, self._history(history.saga_id))

    def _failed(self, definition: WorkflowDefinition, run_id: str) -> bool:
        return run_failed(self._history(run_id), builtins.list(self.get(run_id).stages))

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


def _approved_late(
    history: SagaHistory, declared: StageDefinition, request: ApprovalRequest
) -> bool:
    """Whether a gate's approval was recorded after its timeout: it timed out all the same.

    `approve_gate` refuses a late approval; `Sagacity.approve` (the tool approvals' route)
    does not know the gate's timeout, so the run checks when it goes on. Both times are
    the journal's own `recorded_at`, so one clock measures the wait.
    """
    if not declared.timeout_seconds or not request.approvals:
        return False
    awaiting = history.entry(request.seq)
    if awaiting is None:
        return False
    asked = datetime.datetime.fromisoformat(awaiting.recorded_at)
    decided = datetime.datetime.fromisoformat(request.approvals[-1].approved_at)
    return decided - asked > datetime.timedelta(seconds=declared.timeout_seconds)
