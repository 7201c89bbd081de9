"""The inbox's live updates: a stream of server-sent events telling a page it changed.

A page is drawn with the version of what it shows; the stream looks at the stores every
`poll_interval` seconds and says `changed` when that version moves, so the page reloads
on a decision made anywhere, by this server or another process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from sagacity.errors import SagacityError
from sagacity.saga import Sagacity
from sagacity.server._auth import VIEWER, sagacity_of
from sagacity.server._ui_http import SESSION_COOKIE, InboxSite, secured
from sagacity.server._ui_inbox import inbox_items, inbox_version

__all__ = ["add_events"]


def add_events(router: APIRouter, inbox: InboxSite) -> None:
    """Add the live-update stream (`/events`) to the inbox's `router`."""

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
