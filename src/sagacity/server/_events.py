"""`GET /sagacity/events`: a Server-Sent Events stream of approval requests as they change.

The requests may be asked, approved or decided by any process sharing the database, so
the stream polls: every `poll_interval` seconds (default 1.0) it reads the pending
requests (`Sagacity.pending()`: the approval store, and the journal of the sagas that
have a pending request, nothing else) and sends what changed since the last poll:

- `approval.requested`: a request appeared; data is the request's JSON.
- `approval.updated`: its approvals or state changed (another approver, tampering).
- `approval.closed`: it is no longer pending (approved and run, rejected, edited);
  data is `{"request_id", "saga_id"}`.

The first event is `snapshot`, `{"pending": [request ids]}`, so a page can start from
it. A comment line (`: keep-alive`) is sent every `keepalive` seconds so proxies keep the
connection open. Each event's `id:` is a counter within the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import anyio.to_thread
import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from sagacity.approval import ApprovalRequest
from sagacity.saga import Sagacity
from sagacity.server._auth import VIEWER, Principal, require
from sagacity.server._errors import ERROR_RESPONSES, SagacityRoute

__all__ = ["events_router"]


def _event(name: str, data: object, number: int) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (number, name.encode(), orjson.dumps(data))


def _key(request: ApprovalRequest) -> tuple[object, ...]:
    return (request.state, request.problem, tuple(a.seq for a in request.approvals))


async def _stream(
    sagacity: Sagacity, request: Request, *, interval: float, keepalive: float
) -> AsyncIterator[bytes]:
    known: dict[str, tuple[ApprovalRequest, tuple[object, ...]]] = {}
    number = 0
    first = True
    quiet = 0.0
    while True:
        current = await anyio.to_thread.run_sync(sagacity.pending)
        seen = {r.request_id: r for r in current}
        out: list[bytes] = []
        if first:
            number += 1
            out.append(_event("snapshot", {"pending": list(seen)}, number))
            first = False
        else:
            for request_id, now in seen.items():
                before = known.get(request_id)
                if before is None:
                    number += 1
                    out.append(_event("approval.requested", now.to_json(), number))
                elif before[1] != _key(now):
                    number += 1
                    out.append(_event("approval.updated", now.to_json(), number))
            for request_id, (gone, _) in known.items():
                if request_id not in seen:
                    number += 1
                    data = {"request_id": request_id, "saga_id": gone.saga_id}
                    out.append(_event("approval.closed", data, number))
        known = {rid: (r, _key(r)) for rid, r in seen.items()}
        if out:
            quiet = 0.0
            yield b"".join(out)
        elif quiet >= keepalive:
            quiet = 0.0
            yield b": keep-alive\n\n"
        if await request.is_disconnected():
            return
        await asyncio.sleep(interval)
        quiet += interval


def events_router(
    sagacity: Sagacity, *, poll_interval: float = 1.0, keepalive: float = 15.0
) -> APIRouter:
    """The `/events` route over `sagacity`, polling every `poll_interval` seconds."""
    events = APIRouter(route_class=SagacityRoute, responses=ERROR_RESPONSES)

    @events.get(
        "/events",
        tags=["events"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def stream(
        request: Request,
        _: Annotated[Principal, Depends(require(VIEWER))],
        interval: Annotated[
            float | None, Query(ge=0.25, le=60, description="poll interval, seconds")
        ] = None,
    ) -> StreamingResponse:
        """Approval requests appearing, changing and closing, from any process (SSE)."""
        return StreamingResponse(
            _stream(
                sagacity,
                request,
                interval=poll_interval if interval is None else interval,
                keepalive=keepalive,
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return events
