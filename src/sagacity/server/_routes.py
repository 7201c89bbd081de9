"""The JSON API under `/sagacity/`: sagas, approvals, resume, compensate, resolve, export.

Route functions are plain `def`s: FastAPI runs them in its thread pool, where the core's
blocking journal calls belong. The principal's name is what is journaled as approver,
rejecter, editor or resolver; a name in a request body is never read.
"""

from __future__ import annotations

import csv
import datetime
import io
import os
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal
from urllib.parse import quote, unquote

import orjson
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import Headers
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagacity._history import SagaHistory
from sagacity._ids import require_id
from sagacity._lease_view import STALLED, Worker, is_stalled, workers_of
from sagacity._summary import SagaSummary, list_doubts, list_summaries, summary_of
from sagacity.approval import ApprovalRequest
from sagacity.audit import iter_entries, verify
from sagacity.audit._export import CSV_FIELDS, csv_row
from sagacity.errors import (
    ApprovalNotFoundError,
    ConfigurationError,
    SagaNotFoundError,
)
from sagacity.journal import JournalEntry
from sagacity.saga import Sagacity
from sagacity.server._auth import (
    APPROVER,
    OPERATOR,
    VIEWER,
    Authenticator,
    Principal,
    bind,
    require,
)
from sagacity.server._errors import ERROR_RESPONSES, SagacityRoute, error_response
from sagacity.server._models import (
    ApprovalRequestModel,
    ApproveBody,
    ApproveResult,
    DoubtModel,
    EditBody,
    EntryModel,
    RejectBody,
    ResolveBody,
    SagaDetail,
    SagaResultModel,
    SagaSummaryModel,
    StatusName,
    VerificationModel,
)

__all__ = ["DEFAULT_MAX_BODY_BYTES", "BodyLimit", "api_router", "limit_body", "max_body_bytes_of"]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The largest request body read (1 MiB): far above any decision, edit or resolution."""

MAX_BODY_VARIABLE = "SAGACITY_MAX_BODY_BYTES"


def max_body_bytes_of(value: int | None) -> int:
    """`value`, else `SAGACITY_MAX_BODY_BYTES`, else `DEFAULT_MAX_BODY_BYTES`."""
    if value is None:
        text = os.environ.get(MAX_BODY_VARIABLE, "").strip()
        if not text:
            return DEFAULT_MAX_BODY_BYTES
        if not text.isdigit():
            raise ConfigurationError(f"{MAX_BODY_VARIABLE}={text!r} is not a number of bytes")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"max_body_bytes must be a positive number, not {value!r}")
    return value


# What `require_id` accepts, said in the schema: printable, not blank, at most 512
# characters (a client learns it from the OpenAPI document instead of from a 422).
_PRINTABLE = "[^\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]"
ID_PATTERN = f"^{_PRINTABLE}*[^\\s\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]{_PRINTABLE}*$"
_ID = {"min_length": 1, "max_length": 512, "pattern": ID_PATTERN}
SagaId = Annotated[str, Path(description="the saga id", **_ID)]
RequestId = Annotated[str, Path(description="the approval request id", **_ID)]
CallId = Annotated[str, Path(description="the call id", **_ID)]
SagaIdQuery = Annotated[str | None, Query(description="only this saga", **_ID)]


class _IdConvertor(Convertor[str]):
    """One path segment, percent-decoded: the form `_IdRoute` hands its routes ids in."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("sagacity_id", _IdConvertor())


def _segmented(scope: Scope) -> str:
    """The request's path with a `/` or `%` that came percent-encoded kept encoded.

    The server decodes `%2F` into the path before routing, so `sagas/A/calls/B%2Fcalls%2FC`
    would read as saga `A/calls/B`, call `C`. Split on the raw path's own `/` instead:
    each segment is one id, and an id holding `/` is reached only percent-encoded. Where
    the raw path is missing or does not match the path (a rewrite), the decoded path is
    used with its `%` kept: an id holding `/` then matches no route rather than another.
    """
    path: str = scope["path"]
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        segments = [unquote(part) for part in raw.decode("ascii", "replace").split("/")]
        decoded = "/".join(segments)
        if path.endswith(decoded):
            kept = "/".join(s.replace("%", "%25").replace("/", "%2F") for s in segments)
            return path[: len(path) - len(decoded)].replace("%", "%25") + kept
    return path.replace("%", "%25")


def _too_large(limit: int) -> HTTPException:
    return HTTPException(
        413, detail=f"the request body is larger than the server's limit of {limit} bytes"
    )


def declared_too_large(scope: Scope, limit: int) -> HTTPException | None:
    """The 413 for a request whose `Content-Length` is over `limit` (or is not a number)."""
    declared = Headers(scope=scope).get("content-length")
    if declared is None:
        return None
    if not declared.strip().isdigit():
        return HTTPException(400, detail=f"Content-Length {declared!r} is not a number")
    return _too_large(limit) if int(declared) > limit else None


def limit_body(receive: Receive, limit: int) -> Receive:
    """`receive`, raising a 413 `HTTPException` once the body read passes `limit` bytes.

    For a body sent without `Content-Length` (chunked): it is cut off as it arrives, so
    no more than `limit` bytes are ever held.
    """
    read = 0

    async def limited() -> Message:
        nonlocal read
        message = await receive()
        if message["type"] == "http.request":
            read += len(message.get("body", b""))
            if read > limit:
                raise _too_large(limit)
        return message

    return limited


class BodyLimit:
    """ASGI middleware: a body over `max_body_bytes` gets 413, declared or as it arrives."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        """Wrap `app`."""
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse on `Content-Length`, else read the body through `limit_body`."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = declared_too_large(scope, self.max_body_bytes)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, limit_body(receive, self.max_body_bytes), send)


class WorkerModel(BaseModel):
    """Who works on a saga that has not ended, read from its lease (docs/server.md)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    live: bool
    """A worker holds the saga's lease now."""
    holder: str | None
    """The lease's holder (host:pid:…); null when the lease was let go or never taken."""
    expires_at: str | None
    """When the holder's lease expires (RFC 3339 UTC); null when it was let go."""
    since: str | None
    """With no live worker: since when; null while one holds it, or when `gone`."""
    gone: bool
    """Its lease runs, but its holder's process, on this server's host, is gone."""


class SagaListItem(SagaSummaryModel):
    """How one saga stands, and who works on it."""

    worker: WorkerModel | None = None
    """null for a saga that ended."""
    stalled: bool = False
    """An OPEN saga that no live worker holds: its worker died, or nothing runs it."""

    @classmethod
    def of_worker(cls, summary: SagaSummary, worker: Worker | None) -> SagaListItem:
        return cls.model_validate(
            {
                **summary.to_json(),
                "worker": None if worker is None else worker.to_json(),
                "stalled": is_stalled(summary, worker),
            }
        )


class SagaListPage(BaseModel):
    """One page of sagas, by ascending saga id."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    sagas: list[SagaListItem]
    next_cursor: str | None
    """Pass as `cursor` for the next page; null when there is no more."""


class AuthenticatedRoute(SagacityRoute):
    """A route whose request is authenticated, and its declared size checked, first.

    Only then is its body read, through `limit_body`. (FastAPI reads a body before it
    solves a route's dependencies, `require` among them.) Built with
    `authenticated_route`; without an authenticator it is a plain `SagacityRoute`.
    """

    authenticator: Authenticator | None = None
    sagacity: Sagacity | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.methods and scope["method"] not in self.methods):
            await super().handle(scope, receive, send)
            return
        refusal = None
        if self.authenticator is not None and self.sagacity is not None:
            request = Request(scope)
            bind(self.authenticator, self.sagacity)(request)
            try:
                # Every route here needs a principal; the route's own role is checked
                # after, by its dependency (the principal is cached on the request).
                await require(VIEWER)(request)
            except HTTPException as error:
                refusal = error
        refusal = refusal or declared_too_large(scope, self.max_body_bytes)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        await super().handle(scope, limit_body(receive, self.max_body_bytes), send)


class _IdRoute(AuthenticatedRoute):
    """A route whose `{x:sagacity_id}` parameters are each one segment of the raw path."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return super().matches(scope)
        # A copy: the router goes on matching other routes against the real path.
        split: dict[str, Any] = {**scope, "path": _segmented(scope)}
        return super().matches(split)


def authenticated_route(
    sagacity: Sagacity,
    authenticator: Authenticator | None,
    max_body_bytes: int,
    base: type[AuthenticatedRoute] = AuthenticatedRoute,
) -> type[AuthenticatedRoute]:
    """A route class that authenticates with `authenticator` before reading a body."""
    return type(
        "SagacityApiRoute",
        (base,),
        {
            "authenticator": staticmethod(authenticator) if authenticator else None,
            "sagacity": sagacity,
            "max_body_bytes": max_body_bytes,
        },
    )


Viewer = Annotated[Principal, Depends(require(VIEWER))]
Approver = Annotated[Principal, Depends(require(APPROVER))]
Operator = Annotated[Principal, Depends(require(OPERATOR))]


_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def _since(value: str | None) -> str | None:
    """An RFC 3339 time as the journal writes `recorded_at` (UTC, microseconds, Z).

    Taken as text, not as pydantic's lax datetime, which would read `-44798` as a Unix
    time. A leap second (`:60`) counts as `:59`; digits past the microsecond are dropped.
    """
    if value is None:
        return None
    found = _RFC3339.fullmatch(value)
    moment = None
    if found is not None:
        date, minutes, seconds, fraction, offset = found.groups()
        seconds = "59" if seconds == "60" else seconds
        fraction = ((fraction or "") + "000000")[:6]
        offset = "+00:00" if offset in ("Z", "z") else offset
        try:
            moment = datetime.datetime.fromisoformat(
                f"{date}T{minutes}:{seconds}.{fraction}{offset}"
            )
        except ValueError:
            moment = None
    if moment is None:
        raise HTTPException(
            422, detail=f"since={value!r} is not an RFC 3339 time such as 2026-12-01T09:00:00Z"
        )
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _request(sagacity: Sagacity, request_id: str) -> ApprovalRequest:
    """The pending request `request_id` (ids are unique across sagas), as the journal has it."""
    require_id(request_id, "request id")
    stored = sagacity.approvals.get(request_id)
    if stored is None:
        raise ApprovalNotFoundError(
            f"approval request {request_id!r} is not pending: it does not exist, was "
            "rejected, or its call ran; GET /sagacity/approvals lists the pending ones"
        )
    for shown in sagacity.pending(stored.saga_id):
        if shown.request_id == request_id:
            return shown
    raise ApprovalNotFoundError(
        f"saga {stored.saga_id!r}: approval request {request_id!r} is no longer pending"
    )


def _saga(saga_id: str) -> str:
    return require_id(saga_id, "saga id")


def api_router(
    sagacity: Sagacity,
    authenticator: Authenticator | None = None,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> APIRouter:
    """The JSON routes over `sagacity`; `sagacity.server.router` adds auth binding.

    With `authenticator`, a request without a principal is refused (401) before its
    body is read, and a body over `max_body_bytes` gets 413 before it is parsed.

    Saga and call ids may hold `/` (a framework's ids often do): sent percent-encoded,
    each id is one segment of the raw path (`_IdRoute`), so no id can reach the route of
    another (`GET /sagas/Q%2Fverify` is saga `Q/verify`, never the verification of `Q`).
    """
    max_body_bytes = max_body_bytes_of(max_body_bytes)
    route_class = authenticated_route(sagacity, authenticator, max_body_bytes, _IdRoute)
    api = APIRouter(route_class=route_class, responses=ERROR_RESPONSES)

    @api.get("/sagas", response_model=SagaListPage, tags=["sagas"])
    def list_sagas(
        _: Viewer,
        status: StatusName | Literal["STALLED"] | None = None,
        since: Annotated[
            str | None,
            Query(
                description="only sagas active since then (RFC 3339, e.g. 2026-12-01T09:00:00Z)",
                json_schema_extra={"format": "date-time"},
            ),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        cursor: Annotated[
            str | None, Query(description="next_cursor of the last page", **_ID)
        ] = None,
    ) -> SagaListPage:
        """List sagas by ascending saga id, with how each stands and its worker.

        `status=STALLED` lists the OPEN sagas with no live worker (docs/server.md); its
        page may hold fewer than `limit` with `next_cursor` still set.
        """
        stalled_only = status == STALLED
        page = list_summaries(
            sagacity.journal,
            status="OPEN" if stalled_only else status,
            since=_since(since),
            limit=limit,
            cursor=cursor,
        )
        workers = workers_of(sagacity.journal, page.summaries, sagacity.now())
        listed = [
            SagaListItem.of_worker(s, workers.get(s.saga_id))
            for s in page.summaries
            if not stalled_only or is_stalled(s, workers.get(s.saga_id))
        ]
        return SagaListPage(sagas=listed, next_cursor=page.next_cursor)

    @api.get(
        "/sagas/{saga_id:sagacity_id}/verify", response_model=VerificationModel, tags=["sagas"]
    )
    def verify_saga(saga_id: SagaId, _: Viewer) -> VerificationModel:
        """Recompute every hash and link of the saga's chain."""
        policy = sagacity.approval.policy
        report = verify(
            sagacity.journal,
            _saga(saga_id),
            approval_public_keys=policy.public_keys.values() if policy.require_signed else (),
        )
        if report.entries == 0 and not report.problems:
            raise SagaNotFoundError(f"saga {saga_id!r} has no journal entries")
        return VerificationModel.of(report)

    @api.get("/sagas/{saga_id:sagacity_id}", response_model=SagaDetail, tags=["sagas"])
    def saga_detail(saga_id: SagaId, _: Viewer) -> SagaDetail:
        """A saga's summary, its journal entries in seq order, and its open requests."""
        entries = sagacity.journal.entries(_saga(saga_id))
        if not entries:
            raise SagaNotFoundError(f"saga {saga_id!r} has no journal entries")
        history = SagaHistory.of(saga_id, entries)  # read once, for all three parts
        pending = sagacity.approval.pending(saga_id, history=history)
        return SagaDetail(
            summary=SagaSummaryModel.of(summary_of(saga_id, entries)),
            entries=[EntryModel.of(e) for e in entries],
            pending=[ApprovalRequestModel.of(r) for r in pending],
        )

    @api.get("/approvals", response_model=list[ApprovalRequestModel], tags=["approvals"])
    def list_approvals(_: Viewer, saga_id: SagaIdQuery = None) -> list[ApprovalRequestModel]:
        """Pending approval requests, oldest first, with the exact input and its sha256."""
        if saga_id is not None:
            _saga(saga_id)
        return [ApprovalRequestModel.of(r) for r in sagacity.pending(saga_id)]

    @api.get(
        "/approvals/{request_id:sagacity_id}",
        response_model=ApprovalRequestModel,
        tags=["approvals"],
    )
    def approval_detail(request_id: RequestId, _: Viewer) -> ApprovalRequestModel:
        """One pending request."""
        return ApprovalRequestModel.of(_request(sagacity, request_id))

    @api.post(
        "/approvals/{request_id:sagacity_id}/approve",
        response_model=ApproveResult,
        tags=["approvals"],
    )
    def approve(request_id: RequestId, body: ApproveBody, principal: Approver) -> ApproveResult:
        """Approve the request's input whose sha256 the approver saw; journaled as the principal."""
        request = _request(sagacity, request_id)
        entry = sagacity.approve(
            request.saga_id,
            approver=principal.name,
            request_id=request_id,
            expected_sha256=body.sha256,
        )
        now = next(
            (r for r in sagacity.pending(request.saga_id) if r.request_id == request_id), None
        )
        return ApproveResult(
            entry=EntryModel.of(entry),
            request=None if now is None else ApprovalRequestModel.of(now),
            ready=now is not None and now.state == "approved",
        )

    @api.post(
        "/approvals/{request_id:sagacity_id}/reject",
        response_model=SagaResultModel,
        tags=["approvals"],
    )
    def reject(request_id: RequestId, body: RejectBody, principal: Approver) -> SagaResultModel:
        """Reject the request: journaled as the principal, the saga is compensated."""
        request = _request(sagacity, request_id)
        result = sagacity.reject(
            request.saga_id, approver=principal.name, reason=body.reason, request_id=request_id
        )
        return SagaResultModel.of(result)

    @api.post(
        "/approvals/{request_id:sagacity_id}/edit",
        response_model=ApprovalRequestModel,
        tags=["approvals"],
    )
    def edit(request_id: RequestId, body: EditBody, principal: Approver) -> ApprovalRequestModel:
        """Replace the input: a new request with its own hash, which must then be approved."""
        request = _request(sagacity, request_id)
        if body.sha256 != request.input_sha256:
            raise HTTPException(
                409,
                detail=f"saga {request.saga_id!r}: request {request_id!r} now has input sha256 "
                f"{request.input_sha256}, not the {body.sha256} that was edited; reload it",
            )
        edited = sagacity.edit(
            request.saga_id, approver=principal.name, request_id=request_id, new_input=body.input
        )
        return ApprovalRequestModel.of(edited)

    @api.post(
        "/sagas/{saga_id:sagacity_id}/resume", response_model=SagaResultModel, tags=["operations"]
    )
    def resume(
        saga_id: SagaId,
        _: Operator,
        request_id: Annotated[str | None, Query(description="which request", **_ID)] = None,
    ) -> SagaResultModel:
        """Run the approved call with its journaled input, here, where the tool is wrapped."""
        try:
            result = sagacity.resume_saga(_saga(saga_id), request_id=request_id)
        except ConfigurationError as error:
            raise HTTPException(
                409,
                detail=f"{error}. Resume where the tool is wrapped: mount "
                "sagacity.server.router(sagacity) in the app that wraps it, or call "
                "Sagacity.resume_saga (or the framework's own resume) there",
            ) from error
        return SagaResultModel.of(result)

    @api.post(
        "/sagas/{saga_id:sagacity_id}/compensate",
        response_model=SagaResultModel,
        tags=["operations"],
    )
    def compensate(saga_id: SagaId, _: Operator) -> SagaResultModel:
        """Run the compensation walk (again); a compensation already done never repeats."""
        return SagaResultModel.of(sagacity.compensate(_saga(saga_id)))

    @api.post(
        "/sagas/{saga_id:sagacity_id}/calls/{call_id:sagacity_id}/resolve",
        response_model=EntryModel,
        tags=["operations"],
    )
    def resolve(
        saga_id: SagaId, call_id: CallId, body: ResolveBody, principal: Operator
    ) -> EntryModel:
        """Record a human's finding on an in-doubt call; journaled with the principal."""
        require_id(call_id, f"saga {saga_id!r}: call id")
        entry = sagacity.resolve(
            _saga(saga_id), call_id, executed=body.executed, result=body.result, by=principal.name
        )
        return EntryModel.of(entry)

    @api.get("/doubts", response_model=list[DoubtModel], tags=["sagas"])
    def doubts(
        _: Viewer,
        saga_id: SagaIdQuery = None,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    ) -> list[DoubtModel]:
        """Calls and compensations in doubt, across sagas (or of one)."""
        if saga_id is not None:
            _saga(saga_id)
        return [
            DoubtModel.of(d) for d in list_doubts(sagacity.journal, saga_id=saga_id, limit=limit)
        ]

    @api.get(
        "/export",
        tags=["sagas"],
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-ndjson": {}, "text/csv": {}}}},
    )
    def export(
        _: Viewer,
        format: Literal["jsonl", "csv"] = "jsonl",
        saga_id: SagaIdQuery = None,
    ) -> StreamingResponse:
        """The journal as JSON Lines (verifiable alone) or CSV, streamed a batch at a time."""
        entries: Iterator[JournalEntry]
        if saga_id is None:
            entries = iter_entries(sagacity.journal)
        else:
            one = sagacity.journal.entries(_saga(saga_id))
            if not one:
                raise SagaNotFoundError(f"saga {saga_id!r} has no journal entries")
            entries = iter(one)
        media = "application/x-ndjson" if format == "jsonl" else "text/csv"
        name = "sagacity-journal." + format
        return StreamingResponse(
            _jsonl(entries) if format == "jsonl" else _csv(entries),
            media_type=media,
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    return api


def _jsonl(entries: Iterator[JournalEntry]) -> Iterator[bytes]:
    for entry in entries:
        yield orjson.dumps(entry.to_json()) + b"\n"


def _csv(entries: Iterator[JournalEntry]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_FIELDS)
    for entry in entries:
        writer.writerow(csv_row(entry))
        if buffer.tell() > 64 * 1024:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()
