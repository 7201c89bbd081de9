"""The workflow routes: runs and their stage flow, the gates that wait, decide, resume.

`workflow_router(runtime=None)` serves one `WorkflowRuntime`, or, without one, every
runtime built in this process on the `Sagacity` the server serves (the one
`sagacity.server.router` binds). Deciding is the approver's (the principal is journaled
as the approver, never a name from the body); resuming — which runs the stage — is the
operator's, as resuming an approved call is: a principal with both roles approves and
resumes in one request. A task started with the app expires timed-out
gates every `expire_interval` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, FastAPI, Path, Query, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict

from sagacity.errors import SagaBusyError, SagacityError, SagaNotFoundError
from sagacity.saga import Sagacity
from sagacity.server._auth import OPERATOR, sagacity_of
from sagacity.server._errors import ERROR_RESPONSES, SagacityRoute
from sagacity.server._models import ApproveBody, RejectBody
from sagacity.server._route import ID_PATTERN, Approver, Operator, Viewer
from sagacity.workflows import GateRequest, WorkflowHandle, WorkflowRuntime, WorkflowStatus
from sagacity.workflows._runtime import live_runtimes, runtimes_of

__all__ = ["GateModel", "RunModel", "StageModel", "workflow_router"]

_log = logging.getLogger("sagacity.server")

T = TypeVar("T")

_ID = {"min_length": 1, "max_length": 512, "pattern": ID_PATTERN}
RunId = Annotated[str, Path(description="the workflow run id (its saga id)", **_ID)]
StageName = Annotated[
    str, Path(description="the gated stage's name", pattern="^[A-Za-z0-9_-]{1,48}$")
]
RunStatus = Literal[
    "RUNNING",
    "PAUSED_AT_GATE",
    "COMPLETED",
    "COMPENSATED",
    "COMPENSATION_FAILED",
    "NEEDS_ATTENTION",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)


class StageModel(_Model):
    """One stage of a run, as its journal records it."""

    name: str
    """The stage's name (its call id in the run's journal)."""
    order: int
    """Its place: stages run in ascending order."""
    status: str
    """PENDING, CHECK_FAILED, AWAITING_APPROVAL, APPROVED, REJECTED, IN_DOUBT, EXECUTED,
    FAILED, COMPENSATED or COMPENSATION_FAILED."""
    gated: bool
    """Whether it waits for a human's approval before it runs."""
    output: Any = None
    """What it returned, as journaled."""
    reason: str | None = None
    """Why it failed, was refused or rejected."""


class GateApprovalModel(_Model):
    """One approver's approval of a gate."""

    approver: str
    approved_at: str
    seq: int


class GateModel(_Model):
    """A gate that waits: the exact value its stage will receive, and the hash to approve."""

    run_id: str
    workflow: str
    description: str
    stage: str
    request_id: str
    """The approval request behind the gate (also listed by `GET /sagacity/approvals`)."""
    value: Any = None
    """The exact value the stage will receive."""
    input: dict[str, Any]
    """The stage's input as journaled, `{parameter: value}`: what `input_sha256` is of."""
    input_sha256: str
    """What an approval is bound to: send it back to approve."""
    reason: str
    requested_at: str
    expires_at: str | None = None
    """When the gate times out (the run then fails and compensates); null: never."""
    state: str
    """`waiting`, `approved` or `tampered`."""
    approvals: list[GateApprovalModel]
    approvers_required: int


class RunModel(_Model):
    """A workflow run and its stage flow."""

    run_id: str
    workflow: str
    status: str
    """RUNNING, PAUSED_AT_GATE, COMPLETED, COMPENSATED, COMPENSATION_FAILED or
    NEEDS_ATTENTION."""
    current_stage: str | None = None
    """The first stage that has not run; null once every stage ran."""
    result: Any = None
    """The last stage's output, once COMPLETED."""
    error: str | None = None
    """What failed the run."""
    gate: GateModel | None = None
    """The gate the run waits at."""
    stages: list[StageModel]


def _run(handle: WorkflowHandle) -> RunModel:
    return RunModel.model_validate(handle.to_json())


def _gate(gate: GateRequest) -> GateModel:
    return GateModel.model_validate(gate.to_json())


def workflow_router(
    runtime: WorkflowRuntime | None = None,
    *,
    expire_interval: float | None = 30.0,
    route_class: type[APIRoute] = SagacityRoute,
) -> APIRouter:
    """The workflow routes, to include under `sagacity.server.router` (which binds auth).

    Args:
        runtime: The runtime to serve; None serves every runtime built in this process
            on the request's `Sagacity`.
        expire_interval: Seconds between two `expire_gates()` of the served runtimes,
            run while the app is up; None runs none (call `expire_gates` yourself).
        route_class: The routes' class; `sagacity.server.router` passes one that
            authenticates a request before it reads its body.
    """

    def served(sagacity: Sagacity) -> list[WorkflowRuntime]:
        return [runtime] if runtime is not None else runtimes_of(sagacity)

    def for_run(request: Request, run_id: str, act: Callable[[WorkflowRuntime], T]) -> T:
        """`act` on the runtime that has the run's workflow registered."""
        runtimes = served(sagacity_of(request))
        for candidate in runtimes:
            try:
                candidate.get(run_id)
            except SagaNotFoundError:
                continue
            return act(candidate)
        if not runtimes:
            raise SagaNotFoundError(
                f"run {run_id!r}: no WorkflowRuntime is built in this server's process; build "
                "one on the served Sagacity (or pass it to workflow_router)"
            )
        return act(runtimes[0])  # raises the runtime's own "not found", naming the run

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = None if expire_interval is None else asyncio.create_task(_expire_forever())
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _expire_forever() -> None:
        assert expire_interval is not None
        while True:
            await asyncio.sleep(expire_interval)
            for each in [runtime] if runtime is not None else live_runtimes():
                try:
                    await each.aexpire_gates()
                except SagacityError as error:  # one failing store must not stop the others
                    _log.error("expiring workflow gates failed: %s", error, exc_info=error)

    api = APIRouter(
        prefix="/sagacity",
        route_class=route_class,
        responses=ERROR_RESPONSES,
        tags=["workflows"],
        lifespan=lifespan,
    )

    @api.get("/workflows", response_model=list[RunModel])
    def list_runs(
        request: Request,
        _: Viewer,
        status: Annotated[RunStatus | None, Query(description="only runs in this status")] = None,
    ) -> list[RunModel]:
        """The workflow runs, with their stage flow; `status` filters."""
        seen: dict[str, RunModel] = {}
        wanted = None if status is None else WorkflowStatus(status)
        for each in served(sagacity_of(request)):
            for handle in each.list(wanted):
                seen.setdefault(handle.run_id, _run(handle))
        return sorted(seen.values(), key=lambda run: run.run_id)

    @api.get("/gates", response_model=list[GateModel])
    def list_gates(
        request: Request,
        _: Viewer,
        run_id: Annotated[str | None, Query(description="only this run", **_ID)] = None,
    ) -> list[GateModel]:
        """The gates that wait for a decision: stage, run, workflow, exact value and hash."""
        seen: dict[str, GateModel] = {}
        for each in served(sagacity_of(request)):
            for gate in each.pending_gates(run_id):
                seen.setdefault(gate.request_id, _gate(gate))
        return sorted(seen.values(), key=lambda gate: (gate.requested_at, gate.request_id))

    @api.post("/workflows/expire-gates", response_model=list[RunModel])
    def expire(request: Request, _: Operator) -> list[RunModel]:
        """Fail and compensate the runs whose gate timed out undecided, now."""
        return [_run(h) for each in served(sagacity_of(request)) for h in each.expire_gates()]

    @api.post("/workflows/{run_id:path}/gates/{stage}/approve", response_model=RunModel)
    def approve_gate(
        request: Request, run_id: RunId, stage: StageName, body: ApproveBody, principal: Approver
    ) -> RunModel:
        """Approve the value waiting at the gate, bound to the sha256 the approver saw.

        A principal who is also an operator resumes the run here once the gate is approved
        (by as many approvers as it needs): the response is the run after its stages ran.
        An approver only leaves it PAUSED_AT_GATE, approved, for an operator to resume
        (`.../resume`).
        """

        def approve(each: WorkflowRuntime) -> WorkflowHandle:
            handle = each.approve_gate(run_id, stage, principal.name, sha256=body.sha256, via="api")
            if OPERATOR not in principal.roles or handle.gate is None:
                return handle
            if handle.gate.state != "approved":  # more approvers needed
                return handle
            try:
                return each.resume(run_id)
            except SagaBusyError:  # another worker holds the run and moves it on
                return each.get(run_id)

        return _run(for_run(request, run_id, approve))

    @api.post("/workflows/{run_id:path}/gates/{stage}/reject", response_model=RunModel)
    def reject_gate(
        request: Request, run_id: RunId, stage: StageName, body: RejectBody, principal: Approver
    ) -> RunModel:
        """Reject the gate: the stage never runs and the run compensates."""
        return _run(
            for_run(
                request,
                run_id,
                lambda each: each.reject_gate(
                    run_id, stage, principal.name, body.reason, via="api"
                ),
            )
        )

    @api.post("/workflows/{run_id:path}/resume", response_model=RunModel)
    def resume(request: Request, run_id: RunId, _: Operator) -> RunModel:
        """Continue the run from its journal here, where its workflow is registered."""
        return _run(for_run(request, run_id, lambda each: each.resume(run_id)))

    @api.get("/workflows/{run_id:path}", response_model=RunModel)
    def run_detail(request: Request, run_id: RunId, _: Viewer) -> RunModel:
        """One run: its status, stage flow and the gate it waits at."""
        return _run(for_run(request, run_id, lambda each: each.get(run_id)))

    return api
