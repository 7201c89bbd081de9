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
and cross-site checks; `_ui_actions` the form posts; `_ui_inbox` what the pages show;
`_ui_sessions` the sessions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from sagacity._history import payload_of
from sagacity._ids import require_id
from sagacity._lease_view import STALLED, Worker, is_stalled, workers_of
from sagacity._summary import STATUSES, iter_doubts, list_summaries, summary_of
from sagacity._unicode import principal_key
from sagacity.approval import ApprovalRequest
from sagacity.audit import iter_entries, verify
from sagacity.errors import ConfigurationError, JournalError, SagacityError
from sagacity.journal import JournalEntry, Phase
from sagacity.saga import Sagacity
from sagacity.server._auth import APPROVER, OPERATOR, VIEWER, sagacity_of
from sagacity.server._ui_actions import add_actions
from sagacity.server._ui_http import (
    SESSION_COOKIE,
    SIGNIN_COOKIE,
    InboxSite,
    Refusal,
    form_field,
    next_path,
    principal_of_token,
    refusal_of,
    secured,
)
from sagacity.server._ui_inbox import (
    InboxItem,
    RunFlow,
    age,
    approvers_required,
    edit_view,
    expiry,
    hash_matches,
    inbox_items,
    inbox_version,
    pretty_json,
    run_flow,
    saga_path,
    started_by,
    timeline,
    visible,
)
from sagacity.server._ui_sessions import SessionStore

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
                "glance": _glance(item.input),
                "more": isinstance(item.input, dict) and len(item.input) > _GLANCE_FIELDS,
                "asked_by": item.started_by,
            }
            for item in items
        ]
        events = f"v={inbox_version(items)}"
        response = inbox.page(
            request, "inbox.html", session=session, title="Inbox", items=shown, events=events
        )
        return inbox.finish(request, response)

    @router.get("/sign-in", name="sagacity_ui_sign_in")
    async def sign_in_form(request: Request, next: str = "") -> Response:
        nonce = SessionStore.new_nonce()
        base = inbox.base(request)
        response = inbox.page(
            request,
            "sign_in.html",
            session=None,
            title="Sign in",
            signin_nonce=nonce,
            next=next_path(next, base),
        )
        inbox.set_cookie(response, request, SIGNIN_COOKIE, nonce)
        return response

    @router.post("/sign-in", name="sagacity_ui_sign_in_post")
    async def sign_in(request: Request) -> Response:
        base = inbox.base(request)
        why = inbox.cross_site(request)
        form = await request.form()
        nonce, cookie = form.get("csrf"), request.cookies.get(SIGNIN_COOKIE)
        if why is None and not (
            isinstance(nonce, str) and cookie and SessionStore.same(nonce, cookie)
        ):
            why = "the sign-in form is stale; open the sign-in page again"
        if why is not None:
            return inbox.refusal(request, Refusal(403, f"refused: {why}"), None)
        token = form.get("token")
        principal = None
        if isinstance(token, str) and token.strip():
            principal = await principal_of_token(request, token.strip())
        if principal is None:
            fresh = SessionStore.new_nonce()
            response = inbox.page(
                request,
                "sign_in.html",
                session=None,
                http_status=401,
                title="Sign in",
                error="That token is not known.",
                signin_nonce=fresh,
                next=next_path(form_field(form, "next", required=False), base),
            )
            inbox.set_cookie(response, request, SIGNIN_COOKIE, fresh)
            return response
        inbox.sessions.close(request.cookies.get(SESSION_COOKIE))
        session_id, session = inbox.sessions.open(principal)
        session.flash.append(f"Signed in as {principal.name}.")
        target = next_path(form_field(form, "next", required=False), base)
        response = secured(RedirectResponse(target, status_code=303))
        inbox.set_cookie(response, request, SESSION_COOKIE, session_id)
        inbox.drop_cookie(response, request, SIGNIN_COOKIE)
        return response

    @router.post("/sign-out", name="sagacity_ui_sign_out")
    async def sign_out(request: Request) -> Response:
        try:
            await inbox.actor(request, VIEWER)
        except Refusal as refusal:
            if refusal.status != 401:
                return inbox.refusal(request, refusal, None)
        inbox.sessions.close(request.cookies.get(SESSION_COOKIE))
        base = inbox.base(request)
        response = secured(RedirectResponse(f"{base}/sign-in", status_code=303))
        inbox.drop_cookie(response, request, SESSION_COOKIE)
        return response

    @router.get("/requests/{request_id}", name="sagacity_ui_request")
    async def request_page(request: Request, request_id: str) -> Response:
        session, refused = await inbox.viewer(request)
        if session is None:
            return refused or Response(status_code=500)
        try:
            view = await run_in_threadpool(_request_view, sagacity_of(request), request_id)
        except _NoLongerWaiting as gone:
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
        fully = pending.state == "approved" and len(pending.approvals) >= approvers_required(
            pending
        )
        wrapped = flow is None and _wrapped(sagacity, pending.tool_name)
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
            values = await run_in_threadpool(_saga_view, sagacity, id, inbox.base(request))
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
                    "worker": _worker_text(workers.get(summary.saga_id)),
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

    @router.get("/events", name="sagacity_ui_events")
    async def events(request: Request, saga: str | None = None, v: str = "") -> Response:
        session = inbox.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None or not session.principal.can(VIEWER):
            return secured(Response("sign in first", status_code=401))
        sagacity = sagacity_of(request)
        cookie = request.cookies.get(SESSION_COOKIE)

        def signed_in() -> bool:
            return inbox.sessions.get(cookie, touch=False) is not None

        stream = _changes(request, sagacity, saga, v, inbox.poll_interval, signed_in)
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return secured(StreamingResponse(stream, media_type="text/event-stream", headers=headers))

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


_GLANCE_FIELDS = 3
_GLANCE_CHARS = 40


def _glance(value: Any) -> list[tuple[str, str]]:
    """The first fields of an input, an `amount` first, for the queue: what is asked.

    Each value is cut at 40 characters (the request page shows it whole), and shown with
    every invisible or reordering character escaped, as the request page shows it.
    """
    if not isinstance(value, dict):
        return [("", visible(_cut(orjson.dumps(value).decode())))]
    keys = sorted(value, key=lambda key: key != "amount")[:_GLANCE_FIELDS]
    shown = []
    for key in keys:
        field = value[key]
        text = field if isinstance(field, str) else orjson.dumps(field).decode()
        shown.append((visible(str(key)), visible(_cut(text))))
    return shown


def _cut(text: str) -> str:
    return text if len(text) <= _GLANCE_CHARS else text[: _GLANCE_CHARS - 1] + "…"


def _worker_text(worker: Worker | None) -> str | None:
    """The worker of a saga that has not ended, in words (as `sagacity sagas` says it)."""
    return None if worker is None else worker.describe()


def _wrapped(sagacity: Sagacity, tool_name: str) -> bool:
    try:
        sagacity.tool(tool_name)
    except ConfigurationError:
        return False
    return True


def _request_view(
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


class _NoLongerWaiting(Exception):
    """A request the journal asked, and that was decided, used or closed since."""

    def __init__(self, message: str, saga_id: str, saga_status: str) -> None:
        super().__init__(message)
        self.message = message
        self.saga_id = saga_id
        self.saga_status = saga_status


def _raise_if_used(sagacity: Sagacity, request_id: str) -> None:
    """Raise `_NoLongerWaiting` saying how a request the journal asked was settled.

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
    raise _NoLongerWaiting(message, asked.saga_id, summary.status)


def _saga_view(sagacity: Sagacity, saga_id: str, base: str) -> dict[str, Any]:
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
        "worker": _worker_text(worker),
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
        "can_compensate": status != "COMPLETED" and bool(entries),
        "timeline": timeline(entries, policy=sagacity.approval.policy),
        "error": read_error,
        "events": f"saga={quote(saga_id, safe='')}&v={inbox_version(items, entries)}",
    }


async def _changes(
    request: Request,
    sagacity: Sagacity,
    saga_id: str | None,
    seen: str,
    interval: float,
    signed_in: Callable[[], bool],
) -> AsyncIterator[str]:
    """Server-sent events: `changed` whenever what the page was rendered from changed.

    It looks at the stores every `interval` seconds, so it sees requests asked and
    decisions made by other processes too; a comment line every 15 s keeps proxies from
    closing an idle stream. The stream ends with its session (sign-out, expiry).
    """

    def version() -> str:
        items = inbox_items(sagacity, saga_id)
        entries = sagacity.history(saga_id) if saga_id else None
        return inbox_version(items, entries)

    idle = 0.0
    yield "retry: 5000\n\n"
    while signed_in() and not await request.is_disconnected():
        try:
            current = await run_in_threadpool(version)
        except SagacityError:
            current = seen  # a store that cannot be read now is tried again next time
        if current != seen:
            seen = current
            yield f"event: changed\ndata: {current}\n\n"
        idle += interval
        if idle >= 15:
            idle = 0.0
            yield ": still here\n\n"
        await asyncio.sleep(interval)
