"""The JSON bodies of the server's routes, as pydantic models (they make the OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sagacity._outcome import SagaResult
from sagacity._summary import InDoubtCall, SagaSummary
from sagacity.approval import ApprovalRequest
from sagacity.audit import VerificationReport
from sagacity.compensation import CallRef, CompensationReport
from sagacity.errors import SerializationError
from sagacity.journal import JournalEntry
from sagacity.journal._convert import to_json

__all__ = [
    "ApprovalModel",
    "ApprovalRequestModel",
    "ApproveBody",
    "ApproveResult",
    "DoubtModel",
    "EditBody",
    "EntryModel",
    "RejectBody",
    "ResolveBody",
    "SagaDetail",
    "SagaPage",
    "SagaResultModel",
    "SagaSummaryModel",
    "VerificationModel",
]

Sha256 = Field(pattern="^[0-9a-f]{64}$", description="64 lowercase hex digits")

StatusName = Literal[
    "COMPLETED",
    "COMPENSATED",
    "COMPENSATION_FAILED",
    "NEEDS_ATTENTION",
    "AWAITING_APPROVAL",
    "SUSPENDED",
    "OPEN",
    "UNREADABLE",
]


class _Model(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class SagaSummaryModel(_Model):
    """How one saga stands."""

    saga_id: str
    status: str
    """An ENDED outcome, or AWAITING_APPROVAL / OPEN for an open saga, or UNREADABLE."""
    entries: int
    first_at: str | None
    last_at: str | None
    pending: int
    """Open approval requests."""
    in_doubt: int
    """Calls or compensations whose outcome is unknown."""
    started_by: str | None = None
    problem: str | None = None

    @classmethod
    def of(cls, summary: SagaSummary) -> SagaSummaryModel:
        return cls.model_validate(summary.to_json())


class SagaPage(_Model):
    """One page of sagas, by ascending saga id."""

    sagas: list[SagaSummaryModel]
    next_cursor: str | None
    """Pass as `cursor` for the next page; null when there is no more."""


class EntryModel(_Model):
    """A journal entry, exactly as hashed (see docs/journal-format.md)."""

    saga_id: str
    seq: int
    phase: str
    tool_name: str | None
    call_id: str | None
    ref_seq: int | None
    payload: Any
    recorded_at: str
    prev_hash: str
    hash: str

    @classmethod
    def of(cls, entry: JournalEntry) -> EntryModel:
        return cls.model_validate(entry.to_json())


class ApprovalModel(_Model):
    """One approver's approval that counts."""

    approver: str
    approved_at: str
    seq: int
    key_id: str | None = None
    """The key that signed the approval; null when unsigned."""
    justification: str | None = None
    """Why the approver approved, in their words; null when they gave none."""
    via: str | None = None
    """The channel it came through: python, cli, api, inbox, email, slack or an
    application's own; null for an approval journaled before channels were recorded."""


class EscalationModel(_Model):
    """A request's escalation to a second group of approvers, as its ESCALATED records it."""

    group: str
    members: list[str]
    """Only their approvals, journaled after the escalation, count."""
    seq: int
    """The seq of the ESCALATED entry."""
    escalated_at: str
    expires_at: str | None
    """When the group's time runs out and the request is denied."""
    remind_at: str | None
    """When the group is reminded; null for no reminder."""


class ApprovalRequestModel(_Model):
    """An IRREVERSIBLE call waiting for approval of its exact input."""

    request_id: str
    saga_id: str
    seq: int
    call_id: str
    tool_name: str
    input: dict[str, Any]
    """The exact journaled arguments that run once approved."""
    input_sha256: str
    """sha256 of the input's RFC 8785 canonical JSON: what an approval binds."""
    reason: str
    requested_at: str
    expires_at: str | None
    started_by: str | None = None
    """Who started the saga: they cannot approve it."""
    approvers_required: int = 1
    edited_by: str | None = None
    state: str
    """waiting, approved or tampered."""
    approvals: list[ApprovalModel]
    problem: str | None = None
    initiated_by: dict[str, Any] | None = None
    """What made the call: {"by": "agent", "adapter"} (with what the framework exposes:
    "model", "run_id", "thread_id", "trace_id", "invocation_id", "agent"), {"by":
    "human", "principal"} or {"by": "code", "via"}; null for a request journaled before
    it was recorded."""
    justification_required: bool = False
    """Every approval must give a justification."""
    remind_at: str | None = None
    """When a reminder goes out before expires_at; null for none."""
    escalate_to: str | None = None
    """The approver group the request escalates to at expiry; null: it is denied then."""
    escalation: EscalationModel | None = None
    """Its escalation once it expired (the group, its members, the new expiry); null before."""

    @classmethod
    def of(cls, request: ApprovalRequest) -> ApprovalRequestModel:
        return cls.model_validate(request.provenance_json())


class ApproveBody(_Model):
    """Approve the input whose hash the approver was shown; any other field is ignored."""

    sha256: str = Sha256
    """The input_sha256 the approver saw; a request whose input hashes otherwise is 409."""
    justification: str | None = Field(default=None, max_length=2000)
    """Why the approver approves: journaled with the approval (and signed); required by
    tools that declare justification_required (403 without)."""


class ApproveResult(_Model):
    """The APPROVED entry, and where the request stands now."""

    entry: EntryModel
    request: ApprovalRequestModel | None
    """The request after this approval (null if it was consumed meanwhile)."""
    ready: bool
    """Enough different principals approved: the call may be resumed."""


class RejectBody(_Model):
    """Reject a request: the saga is compensated."""

    reason: str = Field(min_length=1, max_length=4000)


class EditBody(_Model):
    """Replace a request's input: journaled as a new request, to be approved itself."""

    sha256: str = Sha256
    """The input_sha256 of the request as the editor saw it."""
    input: dict[str, Any]
    """The new arguments, in full."""


class EvidenceBody(_Model):
    """What a finding rests on: a reference, and the SHA-256 of what was read there."""

    reference: str = Field(
        min_length=1, max_length=1000, pattern=r"^[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*$"
    )
    """The provider's charge id, a ticket: printable ASCII, not blank."""
    sha256: str = Sha256
    """The SHA-256 of what was read there."""


class ResolveBody(_Model):
    """A human's finding on a call in doubt."""

    executed: bool
    """True: the call ran (with `result`); false: it did not run."""
    result: Any = None
    reason: str | None = None
    """How they found out (the provider's dashboard, a ticket), journaled."""
    evidence: EvidenceBody | None = None
    """What the finding rests on, journaled with it: the reference and its digest together,
    so the schema says what the route accepts."""


class CallRefModel(_Model):
    seq: int
    tool_name: str
    call_id: str
    error: str | None = None

    @classmethod
    def of(cls, ref: CallRef) -> CallRefModel:
        return cls(seq=ref.seq, tool_name=ref.tool_name, call_id=ref.call_id, error=ref.error)


class CompensationModel(_Model):
    compensated: list[CallRefModel]
    failed: list[CallRefModel]
    skipped: list[CallRefModel]
    in_doubt: list[CallRefModel]
    waiting: list[CallRefModel] = []
    """Compensations this server has not got: left, unjournaled, to a process with the
    tools (`CompensationReport.waiting`)."""

    @classmethod
    def of(cls, report: CompensationReport) -> CompensationModel:
        return cls(
            compensated=[CallRefModel.of(r) for r in report.compensated],
            failed=[CallRefModel.of(r) for r in report.failed],
            skipped=[CallRefModel.of(r) for r in report.skipped],
            in_doubt=[CallRefModel.of(r) for r in report.in_doubt],
            waiting=[CallRefModel.of(r) for r in report.waiting],
        )


class SagaResultModel(_Model):
    """How a saga stands after resume, reject or compensate."""

    saga_id: str
    outcome: str
    value: Any = None
    """What the work returned, as JSON (its text when it cannot be made JSON)."""
    error: str | None = None
    compensation: CompensationModel | None = None
    pending: list[ApprovalRequestModel] = []

    @classmethod
    def of(cls, result: SagaResult) -> SagaResultModel:
        try:
            value = to_json(result.value, where="the saga's value")
        except SerializationError:
            value = repr(result.value)
        error = result.error
        return cls(
            saga_id=result.saga_id,
            outcome=result.outcome.value,
            value=value,
            error=None if error is None else f"{type(error).__name__}: {error}",
            compensation=None
            if result.compensation is None
            else CompensationModel.of(result.compensation),
            pending=[ApprovalRequestModel.of(r) for r in result.pending],
        )


class SagaDetail(_Model):
    """A saga's summary, its journal entries, and its open approval requests."""

    summary: SagaSummaryModel
    entries: list[EntryModel]
    pending: list[ApprovalRequestModel]
    verdicts: list[dict[str, Any]] = []
    """Every reconciler's verdict and human finding on the saga, with who decided and the
    evidence, in journal order (as `sagacity show --json` gives them)."""


class ProblemModel(_Model):
    saga_id: str
    seq: int
    reason: str


class VerificationModel(_Model):
    """The result of recomputing every hash and link."""

    ok: bool
    sagas: int
    entries: int
    problems: list[ProblemModel]
    store_problems: list[str] = []

    @classmethod
    def of(cls, report: VerificationReport) -> VerificationModel:
        return cls(
            ok=report.ok,
            sagas=report.sagas,
            entries=report.entries,
            problems=[
                ProblemModel(saga_id=p.saga_id, seq=p.seq, reason=p.reason) for p in report.problems
            ],
            store_problems=list(report.store_problems),
        )


class DoubtModel(_Model):
    """A call, or its compensation, in doubt."""

    saga_id: str
    call_id: str
    tool_name: str
    seq: int
    kind: str
    """call (resolve it) or compensation."""
    reason: str
    recorded_at: str
    saga_status: str
    reconciled: dict[str, Any] | None = None
    """The last verdict of the tool's reconciler on it (verdict, decided_by, evidence, the
    failure of one that raised or timed out); null when no reconciler has answered."""
    reconciler_here: bool = False
    """Whether this server's process wraps the tool with a reconciler for it (`--tools`):
    false with no verdict means nothing here can find out; a human must."""

    @classmethod
    def of(cls, doubt: InDoubtCall, reconciler_here: bool = False) -> DoubtModel:
        return cls.model_validate(doubt.to_json() | {"reconciler_here": reconciler_here})
