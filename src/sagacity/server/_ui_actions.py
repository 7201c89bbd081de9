"""The inbox's decisions and operations: each form post, run in a thread, then a redirect.

Approve, reject and edit need the `approver` role (a workflow gate is approved as a
tool's request is: the same core approval); resume (a call, or a workflow run),
compensate and resolve the `operator` role. The name journaled is always the session's
principal: the forms carry no approver, and a field of that name is ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from sagacity.errors import SagacityError
from sagacity.saga import Sagacity, SagaOutcome, SagaResult
from sagacity.server._auth import APPROVER, OPERATOR, sagacity_of
from sagacity.server._ui_http import (
    InboxSite,
    Refusal,
    form_field,
    json_field,
    refusal_of,
    secured,
)
from sagacity.server._ui_inbox import request_path, run_flow, saga_path, workflow_of_request
from sagacity.server._ui_sessions import Session

__all__ = ["add_actions"]


def add_actions(router: APIRouter, site: InboxSite) -> None:
    """Register every form post of the inbox on `router`."""
    _decisions(router, site)
    _operations(router, site)


Action = Callable[[Sagacity, Session, FormData], str]


def _action(router: APIRouter, site: InboxSite, path: str, role: str) -> Callable[[Action], Action]:
    """Register a POST that runs `action` (in a thread) and redirects where it says."""

    def register(action: Action) -> Action:
        async def handler(request: Request) -> Response:
            session: Session | None = None
            try:
                session, form = await site.actor(request, role)
                target = await run_in_threadpool(action, sagacity_of(request), session, form)
            except Refusal as refusal:
                return site.refusal(request, refusal, session)
            except SagacityError as error:
                return site.refusal(request, refusal_of(error), session)
            return secured(RedirectResponse(site.base(request) + target, status_code=303))

        router.add_api_route(path, handler, methods=["POST"], name=f"sagacity_ui_{action.__name__}")
        return action

    return register


def _saga_of_request(sagacity: Sagacity, request_id: str) -> str:
    stored = sagacity.approvals.get(request_id)
    if stored is None:
        raise Refusal(
            404,
            f"no pending approval request {request_id!r}: it was decided, used or never asked",
            heading="Not found",
        )
    return stored.saga_id


def _decisions(router: APIRouter, site: InboxSite) -> None:
    @_action(router, site, "/requests/approve", APPROVER)
    def approve(sagacity: Sagacity, session: Session, form: FormData) -> str:
        request_id = form_field(form, "request_id")
        sha256 = form_field(form, "sha256")
        justification = form_field(form, "justification", required=False) or None
        saga_id = _saga_of_request(sagacity, request_id)
        name = session.principal.name
        sagacity.approve(
            saga_id,
            approver=name,
            request_id=request_id,
            expected_sha256=sha256,
            justification=justification,
            via=session.channel_of(request_id),
        )
        session.flash.append(f"Approved by {name}: sha256 {sha256[:12]}…")
        return request_path(request_id)

    @_action(router, site, "/requests/reject", APPROVER)
    def reject(sagacity: Sagacity, session: Session, form: FormData) -> str:
        request_id = form_field(form, "request_id")
        reason = form_field(form, "reason").strip()
        saga_id = _saga_of_request(sagacity, request_id)
        result = sagacity.reject(
            saga_id,
            approver=session.principal.name,
            reason=reason,
            request_id=request_id,
            via=session.channel_of(request_id),
        )
        if _report_walk(session, result):
            session.flash.append(f"Rejected by {session.principal.name}.")
        else:
            session.flash.append(
                f"Rejected by {session.principal.name}; the saga ended {result.outcome.value}."
            )
        return saga_path(saga_id)

    @_action(router, site, "/requests/edit", APPROVER)
    def edit(sagacity: Sagacity, session: Session, form: FormData) -> str:
        request_id = form_field(form, "request_id")
        new_input = json_field(form, "input")
        if not isinstance(new_input, dict):
            raise Refusal(422, "the form field 'input' must be a JSON object of arguments")
        saga_id = _saga_of_request(sagacity, request_id)
        stored = sagacity.approvals.get(request_id)
        if stored is not None and workflow_of_request(sagacity, stored) is not None:
            raise Refusal(
                409,
                f"request {request_id!r} is the gate before stage {stored.call_id!r} of run"
                f" {saga_id!r}: the stage receives the previous stage's output, which is not"
                " edited here; reject the gate instead",
                heading="Not editable",
            )
        new = sagacity.edit(
            saga_id, approver=session.principal.name, request_id=request_id, new_input=new_input
        )
        session.flash.append(
            f"Edited by {session.principal.name}: a new request with sha256"
            f" {new.input_sha256[:12]}… waits for approval."
        )
        return request_path(new.request_id)


def _operations(router: APIRouter, site: InboxSite) -> None:
    @_action(router, site, "/sagas/resume", OPERATOR)
    def resume(sagacity: Sagacity, session: Session, form: FormData) -> str:
        saga_id = form_field(form, "saga_id")
        request_id = form_field(form, "request_id", required=False) or None
        result = sagacity.resume_saga(saga_id, request_id=request_id)
        session.flash.append(f"Resumed by {session.principal.name}: {result.outcome.value}.")
        return saga_path(saga_id)

    @_action(router, site, "/workflows/resume", OPERATOR)
    def resume_run(sagacity: Sagacity, session: Session, form: FormData) -> str:
        # The same `WorkflowRuntime.resume` as `POST /sagacity/workflows/{run_id}/resume`:
        # the rest of the run goes on here, where its workflow is registered.
        run_id = form_field(form, "run_id")
        flow = run_flow(sagacity, run_id)
        if flow is None or flow.runtime is None:
            raise Refusal(
                409,
                f"run {run_id!r}: its workflow is not registered in this server's process;"
                " resume it where it is registered",
                heading="Not here",
            )
        handle = flow.runtime.resume(run_id)
        session.flash.append(f"Resumed by {session.principal.name}: {handle.status.value}.")
        return saga_path(run_id)

    @_action(router, site, "/sagas/compensate", OPERATOR)
    def compensate(sagacity: Sagacity, session: Session, form: FormData) -> str:
        saga_id = form_field(form, "saga_id")
        result = sagacity.compensate(saga_id)
        if not _report_walk(session, result):
            session.flash.append(f"Compensated: the saga ended {result.outcome.value}.")
        return saga_path(saga_id)

    @_action(router, site, "/sagas/resolve", OPERATOR)
    def resolve(sagacity: Sagacity, session: Session, form: FormData) -> str:
        saga_id = form_field(form, "saga_id")
        call_id = form_field(form, "call_id")
        executed = form_field(form, "executed")
        if executed not in ("true", "false"):
            raise Refusal(422, "the form field 'executed' must be 'true' or 'false'")
        name, done = session.principal.name, executed == "true"
        found = {
            key: form_field(form, key, required=False).strip() or None
            for key in ("reason", "evidence", "evidence_sha256")
        }
        try:
            if form_field(form, "kind", required=False) == "compensation":
                sagacity.resolve_compensation(saga_id, call_id, compensated=done, by=name, **found)
                what = "the compensation of call"
            else:
                result = json_field(form, "result")
                sagacity.resolve(saga_id, call_id, executed=done, result=result, by=name, **found)
                what = "call"
        except ValueError as error:  # evidence without its digest, or a malformed one
            raise Refusal(422, str(error), heading="Incomplete evidence") from None
        session.flash.append(
            f"Recorded by {name}: {what} {call_id} " + ("ran." if done else "did not run.")
        )
        return saga_path(saga_id)


def _report_walk(session: Session, result: SagaResult) -> bool:
    """Warn, instead of a success banner, of a walk that left the saga dirty; True if so."""
    report = result.compensation
    saga = result.saga_id
    if report is not None and report.waiting:
        first = report.waiting[0]
        session.warnings.append(
            f"The undo has not run: no compensation for tool {first.tool_name!r} (call "
            f"{first.call_id!r}) is registered in this server, so nothing was undone and "
            f"no failure was journaled; the saga is {result.outcome.value}. The undo runs "
            f"where the tools are: 'sagacity compensate {saga} --tools MODULE:OBJECT', a "
            "worker that wraps them, or this server started with --tools MODULE:OBJECT."
        )
        return True
    if result.outcome in (SagaOutcome.COMPENSATION_FAILED, SagaOutcome.NEEDS_ATTENTION):
        session.warnings.append(
            f"The saga ended {result.outcome.value}: it is still dirty. "
            + (
                "A compensation failed; fix its cause and compensate again."
                if result.outcome is SagaOutcome.COMPENSATION_FAILED
                else "A call or compensation is in doubt; resolve it, then compensate again."
            )
        )
        return True
    return False
