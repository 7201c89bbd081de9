"""The JSON API under `/sagacity/`: sagas, approvals, resume, compensate, resolve, export.

Route functions are plain `def`s: FastAPI runs them in its thread pool, where the core's
blocking journal calls belong. The principal's name is what is journaled as approver,
rejecter, editor or resolver; a name in a request body is never read.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import StreamingResponse

from sagacity import ReconcileSubject
from sagacity._history import SagaHistory
from sagacity._ids import require_id
from sagacity._lease_view import STALLED, is_stalled, workers_of
from sagacity._summary import list_doubts, list_summaries, summary_of
from sagacity._verdicts import findings
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
from sagacity.server._auth import Authenticator
from sagacity.server._body import DEFAULT_MAX_BODY_BYTES, max_body_bytes_of
from sagacity.server._errors import ERROR_RESPONSES
from sagacity.server._listing import SagaListItem, SagaListPage, since_of
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
from sagacity.server._route import (
    ID_LIMITS,
    Approver,
    CallId,
    IdRoute,
    Operator,
    RequestId,
    SagaId,
    SagaIdQuery,
    Viewer,
    authenticated_route,
)

__all__ = ["api_router"]


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
    each id is one segment of the raw path (`IdRoute`), so no id can reach the route of
    another (`GET /sagas/Q%2Fverify` is saga `Q/verify`, never the verification of `Q`).
    """
    max_body_bytes = max_body_bytes_of(max_body_bytes)
    route_class = authenticated_route(sagacity, authenticator, max_body_bytes, IdRoute)
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
            str | None, Query(description="next_cursor of the last page", **ID_LIMITS)
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
            since=since_of(since),
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
            verdicts=findings(entries),
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
            justification=body.justification,
            via="api",
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
            request.saga_id,
            approver=principal.name,
            reason=body.reason,
            request_id=request_id,
            via="api",
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
        request_id: Annotated[str | None, Query(description="which request", **ID_LIMITS)] = None,
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
        try:
            entry = sagacity.resolve(
                _saga(saga_id),
                call_id,
                executed=body.executed,
                result=body.result,
                by=principal.name,
                reason=body.reason,
                evidence=None if body.evidence is None else body.evidence.reference,
                evidence_sha256=None if body.evidence is None else body.evidence.sha256,
            )
        except ValueError as error:  # a reference the journal's own check refuses
            raise HTTPException(status_code=422, detail=str(error)) from None
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
            DoubtModel.of(d, sagacity.has_reconciler(d.tool_name, ReconcileSubject(d.kind)))
            for d in list_doubts(sagacity.journal, saga_id=saga_id, limit=limit)
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
