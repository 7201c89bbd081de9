"""The approval inbox at `/sagacity/ui`: server-rendered pages over the `Sagacity` facade.

Pages: sign-in, the queue, a request (its exact journaled input, its sha256, the saga's
journal, approve / edit / reject), a saga (timeline, outcome, verification, in-doubt
calls, compensate). Every form posts a per-session CSRF token and is refused from
another site; every decision is journaled under the signed-in principal.

Templates are Jinja2 with autoescaping on for every template: whatever a model or tool
wrote (payloads, reasons, tool names, ids, approver names, error messages) reaches the
page as text. A strict Content-Security-Policy (no inline script, nothing from another
origin) backs that up. The page's own script and style are served from `static/`.

Here: the router and its pages. `_ui_http` holds who is asking, cookies and the CSRF
and cross-site checks; `_ui_actions` the form posts; `_ui_inbox` what the pages show and
`_ui_views` what the request and saga pages are drawn from; `_ui_signin` signing in and
out; `_ui_events` the live updates; `_ui_sessions` the sessions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from sagacity._ids import require_id
from sagacity._lease_view import STALLED, is_stalled, workers_of
from sagacity._summary import STATUSES, list_summaries
from sagacity._unicode import principal_key
from sagacity.errors import SagacityError
from sagacity.server._auth import APPROVER, OPERATOR, sagacity_of
from sagacity.server._ui_actions import add_actions
from sagacity.server._ui_events import add_events
from sagacity.server._ui_grants import add_grants
from sagacity.server._ui_http import (
    InboxSite,
    Refusal,
    refusal_of,
    secured,
)
from sagacity.server._ui_inbox import (
    age,
    approvers_required,
    edit_view,
    expiry,
    hash_matches,
    inbox_items,
    inbox_version,
    not_in_group,
    pretty_json,
    saga_path,
    started_by,
    timeline,
)
from sagacity.server._ui_sessions import SessionStore
from sagacity.server._ui_signin import add_sign_in
from sagacity.server._ui_views import (
    GLANCE_FIELDS,
    NoLongerWaiting,
    glance,
    request_view,
    saga_view,
    tool_is_wrapped,
    worker_text,
)

if TYPE_CHECKING:
    from sagacity.server._links import ApprovalLinks

__all__ = ["ui_router"]

_HERE = Path(__file__).parent
_STATIC = {"inbox.css": "text/css; charset=utf-8", "inbox.js": "text/javascript; charset=utf-8"}

_LISTED_STATUSES = (
    "AWAITING_APPROVAL",
    "NEEDS_ATTENTION",
    "COMPENSATION_FAILED",
    STALLED,
    "OPEN",
    "SUSPENDED",
    "UNREADABLE",
    "COMPENSATED",
    "COMPLETED",
)
"""The statuses the sagas page filters by, those that need a human first."""


def ui_router(
    *,
    prefix: str = "/sagacity/ui",
    session_lifetime: float = 8 * 3600.0,
    session_idle: float = 3600.0,
    secure_cookies: bool | None = None,
    poll_interval: float = 2.0,
    trusted_origins: tuple[str, ...] = (),
    links: ApprovalLinks | None = None,
) -> APIRouter:
    """The approval inbox, for `sagacity.server.router()` to include.

    Its routes find their `Sagacity` and authenticator through the including router.

    Args:
        prefix: Where the inbox lives.
        session_lifetime: Seconds a sign-in lasts, however active.
        session_idle: Seconds a session lasts without a request.
        secure_cookies: Mark cookies `Secure`; None marks them when the request came over
            https (behind a TLS-terminating proxy, pass True or run uvicorn with
            `--proxy-headers`).
        poll_interval: Seconds between the live-update stream's looks at the stores.
        trusted_origins: Origins (`https://inbox.example.com`) whose form posts are taken
            as same-site although they differ from the `Host` header (a rewriting proxy).
        links: Open the one-time signed links of approval e-mails (`{prefix}/links/…`)
            made with this `ApprovalLinks` (its secret); None: no link opens anything.
    """
    inbox = InboxSite(
        sessions=SessionStore(lifetime=session_lifetime, idle=session_idle),
        secure_cookies=secure_cookies,
        poll_interval=poll_interval,
        trusted_origins=frozenset(trusted_origins),
    )
    router = APIRouter(prefix=prefix, include_in_schema=False)
    _pages(router, inbox)
    add_actions(router, inbox)
    add_grants(router, inbox)
    if links is not None:
        from sagacity.server._links import add_links

        add_links(router, inbox, links)
    return router


def _pages(router: APIRouter, inbox: InboxSite) -> None:
    @router.get("", name="sagacity_ui_root")
    async def root(request: Request) -> Response:
        return secured(RedirectResponse(f"{inbox.base(request)}/", status_code=307))

    @router.get("/", name="sagacity_ui_inbox")
    async def queue(request: Request) -> Response:
        session, refused = await inbox.viewer(request)
        if session is None:
            return refused or Response(status_code=500)
        sagacity = sagacity_of(request)
        try:
            items = await run_in_threadpool(inbox_items, sagacity)
        except SagacityError as error:
            return inbox.finish(request, inbox.refusal(request, refusal_of(error), session))
        now = sagacity.now()
        base = inbox.base(request)
        shown = [
            {
                "kind": item.kind,
                "item_id": item.item_id,
                "title": item.title,
                "saga_id": item.saga_id,
                "reason": item.reason,
                "requested_at": item.requested_at.isoformat(),
                "expires_at": item.expires_at.isoformat() if item.expires_at else None,
                "age": age(item.requested_at, now),
                "expiry": expiry(item.expires_at, now),
                "state": item.state,
                "approvals": item.approvals,
                "approvers_required": item.approvers_required,
                "url": base + item.url,
                "saga_url": base + item.saga_url,
                "workflow": item.workflow,
                "stage": item.stage,
                "edits": [edit_view(edit) for edit in item.edits],
                "glance": glance(item.input),
                "more": isinstance(item.input, dict) and len(item.input) > GLANCE_FIELDS,
                "asked_by": item.started_by,
                "reminder": None if item.warn_at is None else expiry(item.warn_at, now),
                "escalate_to": item.escalate_to,
                "escalation": None if item.escalation is None else item.escalation.to_json(),
            }
            for item in items
        ]
        events = f"v={inbox_version(items)}"
        response = inbox.page(
            request, "inbox.html", session=session, title="Inbox", items=shown, events=events
        )
        return inbox.finish(request, response)

    add_sign_in(router, inbox)

    @router.get("/requests/{request_id}", name="sagacity_ui_request")
    async def request_page(request: Request, request_id: str) -> Response:
        session, refused = await inbox.viewer(request)
        if session is None:
            return refused or Response(status_code=500)
        try:
            view = await run_in_threadpool(request_view, sagacity_of(request), request_id)
        except NoLongerWaiting as gone:
            base = inbox.base(request)
            response = inbox.page(
                request,
                "decided.html",
                session=session,
                http_status=410,
                title="No longer waiting",
                heading="No longer waiting",
                message=gone.message,
                saga_id=gone.saga_id,
                saga_status=gone.saga_status,
                saga_url=base + saga_path(gone.saga_id),
            )
            return inbox.finish(request, response)
        except Refusal as refusal:
            return inbox.finish(request, inbox.refusal(request, refusal, session))
        except SagacityError as error:
            return inbox.finish(request, inbox.refusal(request, refusal_of(error), session))
        pending, entries, items, flow = view
        sagacity = sagacity_of(request)
        now = sagacity.now()
        principal = session.principal
        base = inbox.base(request)
        starter = started_by(pending)
        blocked = None
        if pending.problem is not None or not hash_matches(pending):
            blocked = "This request cannot be approved: its stored copy disagrees with the journal."
        elif starter is not None and starter == principal.name:
            blocked = "You started this saga: another approver must approve it (four eyes)."
        elif pending.edited_by is not None and principal_key(pending.edited_by) == principal_key(
            principal.name
        ):
            blocked = "You edited this input: another approver must approve it (four eyes)."
        elif any(a.approver == principal.name for a in pending.approvals):
            blocked = "You approved this request already."
        elif len(pending.approvals) >= approvers_required(pending):
            blocked = "This request has all the approvals it needs."
        elif (outside := not_in_group(pending, principal.name)) is not None:
            blocked = outside
        fully = pending.state == "approved" and len(pending.approvals) >= approvers_required(
            pending
        )
        wrapped = flow is None and tool_is_wrapped(sagacity, pending.tool_name)
        resume_note = None
        if fully and flow is not None and flow.runtime is None:
            resume_note = (
                f"Approved. The workflow {flow.workflow!r} is not registered in this server:"
                " the run continues with resume where it is registered."
            )
        elif fully and flow is not None and not principal.can(OPERATOR):
            resume_note = "Approved. An operator resumes the run: the stage runs then."
        elif fully and flow is None and not wrapped:
            resume_note = (
                f"Approved. The tool {pending.tool_name!r} is not wrapped in this server:"
                " the saga resumes where it is wrapped (the agent's own process)."
            )
        elif fully and flow is None and not principal.can(OPERATOR):
            resume_note = "Approved. An operator (or the agent's own process) runs the call."
        events = f"saga={quote(pending.saga_id, safe='')}&v={inbox_version(items, entries)}"
        item = next((i for i in items if i.item_id == pending.request_id), None)
        deadline = pending.expires_at if item is None else item.expires_at
        response = inbox.page(
            request,
            "request.html",
            session=session,
            title=(
                f"{pending.tool_name} · {pending.saga_id}"
                if flow is None
                else f"{flow.workflow} · {pending.call_id} · {pending.saga_id}"
            ),
            flow=flow,
            ask=pending,
            payload=pretty_json(pending.input),
            saga_url=base + saga_path(pending.saga_id),
            started_by=starter,
            age=age(pending.requested_at, now),
            requested_at=pending.requested_at.isoformat(),
            expiry=expiry(deadline, now),
            reminder=None if pending.warn_at is None else expiry(pending.warn_at, now),
            expires_at=deadline.isoformat() if deadline else None,
            edits=[edit_view(edit) for edit in (item.edits if item is not None else ())],
            approvers_required=approvers_required(pending),
            can_decide=principal.can(APPROVER),
            can_edit=principal.can(APPROVER) and pending.problem is None and flow is None,
            approve_blocked=blocked,
            can_resume=fully and wrapped and principal.can(OPERATOR),
            can_resume_run=(
                fully and flow is not None and flow.runtime is not None and principal.can(OPERATOR)
            ),
            resume_note=resume_note,
            timeline=timeline(entries, highlight=pending.seq, policy=sagacity.approval.policy),
            events=events,
        )
        return inbox.finish(request, response)

    @router.get("/saga", name="sagacity_ui_saga")
    async def saga_page(request: Request, id: str = "") -> Response:
        session, refused = await inbox.viewer(request)
        if session is None:
            return refused or Response(status_code=500)
        sagacity = sagacity_of(request)
        try:
            values = await run_in_threadpool(saga_view, sagacity, id, inbox.base(request))
        except Refusal as refusal:
            return inbox.finish(request, inbox.refusal(request, refusal, session))
        except SagacityError as error:
            return inbox.finish(request, inbox.refusal(request, refusal_of(error), session))
        can_operate = session.principal.can(OPERATOR)
        response = inbox.page(
            request,
            "saga.html",
            session=session,
            title=f"Saga {id}",
            can_operate=can_operate,
            **values,
        )
        return inbox.finish(request, response)

    @router.get("/sagas", name="sagacity_ui_sagas")
    async def sagas_page(request: Request, status: str = "", cursor: str = "") -> Response:
        session, refused = await inbox.viewer(request)
        if session is None:
            return refused or Response(status_code=500)
        if status and status not in STATUSES and status != STALLED:
            known = sorted({*STATUSES, STALLED})
            refusal = Refusal(
                422, f"unknown status {status!r}; use one of {known}", heading="Which?"
            )
            return inbox.finish(request, inbox.refusal(request, refusal, session))
        journal = sagacity_of(request).journal
        try:
            if cursor:
                require_id(cursor, "cursor")  # a saga id, as the JSON API checks it
            page = await run_in_threadpool(
                list_summaries,
                journal,
                status="OPEN" if status == STALLED else status or None,
                cursor=cursor or None,
                limit=50,
            )
            workers = await run_in_threadpool(
                workers_of, journal, page.summaries, sagacity_of(request).now()
            )
        except SagacityError as error:
            return inbox.finish(request, inbox.refusal(request, refusal_of(error), session))
        base = inbox.base(request)
        query = f"status={quote(status, safe='')}&" if status else ""
        response = inbox.page(
            request,
            "sagas.html",
            session=session,
            title="Sagas",
            status=status,
            statuses=_LISTED_STATUSES,
            sagas=[
                {
                    **summary.to_json(),
                    "url": base + saga_path(summary.saga_id),
                    "worker": worker_text(workers.get(summary.saga_id)),
                    "stalled": is_stalled(summary, workers.get(summary.saga_id)),
                }
                for summary in page.summaries
                if status != STALLED or is_stalled(summary, workers.get(summary.saga_id))
            ],
            next_url=(
                f"{base}/sagas?{query}cursor={quote(page.next_cursor, safe='')}"
                if page.next_cursor is not None
                else None
            ),
        )
        return inbox.finish(request, response)

    add_events(router, inbox)

    @router.get("/static/{name}", name="sagacity_ui_static")
    async def static(name: str) -> Response:
        media = _STATIC.get(name)
        if media is None:
            raise HTTPException(404, detail=f"no static file {name!r}")
        content = (_HERE / "static" / name).read_bytes()
        response = Response(content, media_type=media)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-cache"
        return response
