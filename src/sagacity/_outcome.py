"""How a saga ended: its outcome, its ENDED entry and the `SagaResult` that reports it.

One place decides the outcome from the journal and writes it, for `saga`, `resume_saga`,
`compensate` and `reject` alike: when a run's work returns or raises, `SagaEnding.finish`
compensates, reports a refusal, leaves the saga waiting or suspended, or completes it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from typing import Any

from sagacity import _telemetry
from sagacity._classify import error_json
from sagacity._history import SagaHistory
from sagacity._reconciling import Reconciling
from sagacity._scope import SagaScope
from sagacity.approval import ApprovalLifecycle, ApprovalRequest
from sagacity.approval._check import journaled_request
from sagacity.compensation import CallRef, CompensationReport, CompensationRunner
from sagacity.errors import (
    AppendConflictError,
    ApprovalError,
    InDoubtError,
    JournalError,
    LeaseLostError,
    ReplayMismatchError,
    SagacityError,
    SagaStateError,
)
from sagacity.journal import Phase, SideEffectJournal

__all__ = ["SagaEnding", "SagaOutcome", "SagaResult"]

_END_RETRIES = 8
"""How often an ENDED entry is tried again after another writer appended first."""

_REFUSALS = (ApprovalError, InDoubtError, ReplayMismatchError)
"""Raised before a call ran: the saga stays open instead of failing."""


class SagaOutcome(enum.Enum):
    """How a saga run ended, read from the journal."""

    COMPLETED = "COMPLETED"
    """Every call succeeded."""
    COMPENSATED = "COMPENSATED"
    """A call failed and every declared compensation ran; no call is in doubt."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """A call failed and at least one compensation raised: the report says what is dirty."""
    NEEDS_ATTENTION = "NEEDS_ATTENTION"
    """A call failed and another is in doubt (it may have run; nobody knows its result),
    or a call was still running when the run ended: a human settles it with
    `Sagacity.resolve`, then `Sagacity.compensate` walks again. Also a walk that stopped
    before a compensation this process does not have (`CompensationReport.waiting`):
    `Sagacity.compensate` in a process that wraps the tools finishes it."""
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """An IRREVERSIBLE call waits for a human; the saga is open until it is resumed."""
    SUSPENDED = "SUSPENDED"
    """The framework paused a call (its own control flow, such as a LangGraph
    `interrupt()` in a tool): the saga stays open; `resume_saga(saga_id, work)` goes on."""


ENDING_OUTCOMES = frozenset(
    {
        SagaOutcome.COMPLETED,
        SagaOutcome.COMPENSATED,
        SagaOutcome.COMPENSATION_FAILED,
        SagaOutcome.NEEDS_ATTENTION,
    }
)
"""The outcomes an ENDED entry records."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SagaResult:
    """What a saga run, resume, rejection or compensation came to."""

    saga_id: str
    """The saga."""
    outcome: SagaOutcome
    """How it stands, from the journal: never from what the model said."""
    value: Any = None
    """What the work returned (None if it raised)."""
    error: BaseException | None = None
    """What failed the saga: the exception the work raised, or the tool failure that the
    framework swallowed."""
    compensation: CompensationReport | None = None
    """The compensation walk, when one ran."""
    pending: list[ApprovalRequest] = dataclasses.field(default_factory=list)
    """The approval requests the saga waits on."""
    replayed: bool = False
    """The work resumed a saga that had ended: its calls were replayed from the journal,
    nothing was journaled, and `outcome` is the one its ENDED records."""


def outcome_of(report: CompensationReport) -> SagaOutcome:
    """The outcome of a walk: in doubt, or left to another process, outranks failed."""
    if report.in_doubt or report.waiting:
        return SagaOutcome.NEEDS_ATTENTION
    return SagaOutcome.COMPENSATION_FAILED if report.failed else SagaOutcome.COMPENSATED


class SagaEnding:
    """Decides how a run ended, writes the saga's ENDED entry and reports its result."""

    def __init__(
        self,
        journal: SideEffectJournal,
        approval: ApprovalLifecycle,
        runner: CompensationRunner,
        reconciling: Reconciling,
    ) -> None:
        self._journal = journal
        self._approval = approval
        self._runner = runner
        self._reconciling = reconciling

    def walk(
        self, history: SagaHistory, *, ran_here: bool = False, asked: set[int] | None = None
    ) -> CompensationReport:
        """The compensation walk, its doubts first put to their reconcilers.

        Doubts the walk itself leaves (a compensation that timed out) are put to them
        after it, and the walk runs again if one was settled. Each doubt is asked once.
        """
        asked = set() if asked is None else asked
        self._reconciling.settle(history, walking=True, asked=asked)
        report = self._runner.run(history, ran_here=ran_here)
        if report.in_doubt and self._reconciling.settle(history, walking=True, asked=asked):
            report = self._runner.run(history, ran_here=ran_here)
        return report

    async def awalk(
        self, history: SagaHistory, *, ran_here: bool = False, asked: set[int] | None = None
    ) -> CompensationReport:
        """`walk` from async code: async reconcilers and compensations are awaited."""
        asked = set() if asked is None else asked
        await self._reconciling.asettle(history, walking=True, asked=asked)
        report = await self._runner.arun(history, ran_here=ran_here)
        if report.in_doubt and await self._reconciling.asettle(history, walking=True, asked=asked):
            report = await self._runner.arun(history, ran_here=ran_here)
        return report

    def _relieved(self, scope: SagaScope, error: Exception | None) -> bool:
        """After reconciling: whether the run's only failure was an approved call that did not land.

        Then nothing failed: the call counts as not started, its approval stands (its
        request is stored again if its failure consumed it) and the saga waits to be
        resumed instead of being compensated.
        """
        history = scope.history
        if (
            history.has_failed_call()
            or scope.refusal is not None
            or (error is not None and error is not scope.error)
            or history.unanswered_retries()
        ):
            return False
        reopened = [
            awaiting
            for awaiting in history.open_requests()
            if awaiting.call_id is not None
            and (call := history.latest_call.get(awaiting.call_id)) is not None
            and call.did_not_run
            and call.intent.seq > awaiting.seq
        ]
        if not reopened:
            return False
        for awaiting in reopened:
            request = journaled_request(history.saga_id, awaiting)
            if self._approval.store.get(request.request_id) is None:
                self._approval.store.save(request)
        scope.failed = False
        scope.error = None
        return True

    def finish(self, scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
        """Report a run whose work returned `value` or raised `error`."""
        if scope.history.sealed is not None:
            return _replayed(scope, value, error)
        if self._failed(scope, error):
            scope.refresh()
            _refuse_if_ended(scope)
            asked: set[int] = set()
            if self._reconciling.settle(
                scope.history, walking=True, asked=asked
            ) and self._relieved(scope, error):
                return self._settle(scope, value, None)
            report = self.walk(scope.history, ran_here=True, asked=asked)
            return self.compensated(scope.history, report, value=value, error=error or scope.error)
        return self._settle(scope, value, error)

    async def afinish(self, scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
        """Report a run of async work (see `finish`); async compensations are awaited."""
        if scope.history.sealed is not None:
            return _replayed(scope, value, error)
        if self._failed(scope, error):
            await scope.gate(scope.refresh)  # a read of the journal: off the loop
            _refuse_if_ended(scope)
            asked: set[int] = set()
            if await self._reconciling.asettle(
                scope.history, walking=True, asked=asked
            ) and await asyncio.to_thread(self._relieved, scope, error):
                return await asyncio.to_thread(self._settle, scope, value, None)
            report = await self.awalk(scope.history, ran_here=True, asked=asked)
            return await asyncio.to_thread(
                self.compensated, scope.history, report, value=value, error=error or scope.error
            )
        if scope.history.open_requests():  # the store is read too: on a worker thread
            return await asyncio.to_thread(self._settle, scope, value, error)
        self._refuse(scope, error)
        unfinished = self._unfinished(scope, value, [])
        if unfinished is not None:
            return unfinished
        await self._aend(scope.history, SagaOutcome.COMPLETED, None, None)
        return _completed(scope.history, value)

    @staticmethod
    def _failed(scope: SagaScope, error: Exception | None) -> bool:
        """Whether the run failed, so that the saga must be compensated.

        Raises if it may not touch the saga any more. Before compensating, the caller
        reads the journal again and refuses a saga another worker ended
        (`_refuse_if_ended`).
        """
        _refuse_if_taken_over(scope, error)
        if not scope.failed and error is None:
            unanswered = scope.history.unanswered_retries()
            if unanswered:  # the framework gave up retrying, then returned
                intent = unanswered[0].intent
                scope.fail(
                    SagaStateError(
                        f"saga {scope.saga_id!r}: call {intent.call_id!r} of tool "
                        f"{intent.tool_name!r} failed asking for a retry (INTENT at seq "
                        f"{intent.seq}), and no later call of the tool succeeded"
                    )
                )
        # A refusal executed nothing: the saga stays open to be approved (or resolved) properly.
        return scope.failed or (error is not None and not isinstance(error, _REFUSALS))

    def _settle(self, scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
        self._refuse(scope, error)
        # A request is journaled before it is stored: none open in the journal, none stored.
        history = scope.history
        pending = (
            self._approval.pending(scope.saga_id, history=history)
            if history.open_requests()
            else []
        )
        unfinished = self._unfinished(scope, value, pending)
        return self.completed(history, value) if unfinished is None else unfinished

    @staticmethod
    def _refuse(scope: SagaScope, error: Exception | None) -> None:
        """Raise the refusal of a call, if one was refused: the saga stays open."""
        refusal: SagacityError | None = error if isinstance(error, _REFUSALS) else scope.refusal
        if refusal is not None:
            raise refusal

    @staticmethod
    def _unfinished(
        scope: SagaScope, value: Any, pending: list[ApprovalRequest]
    ) -> SagaResult | None:
        """The result of a run that waits (for approval, or a paused call); None if done."""
        if pending:
            _telemetry.saga_ended(scope.history, SagaOutcome.AWAITING_APPROVAL.value)
            return SagaResult(
                saga_id=scope.saga_id,
                outcome=SagaOutcome.AWAITING_APPROVAL,
                value=value,
                pending=pending,
            )
        if scope.suspended:
            _telemetry.saga_ended(scope.history, SagaOutcome.SUSPENDED.value)
            return SagaResult(saga_id=scope.saga_id, outcome=SagaOutcome.SUSPENDED, value=value)
        return None

    def completed(self, history: SagaHistory, value: Any) -> SagaResult:
        """End a saga whose calls all succeeded."""
        self._end(history, SagaOutcome.COMPLETED, None, None)
        return _completed(history, value)

    def compensated(
        self,
        history: SagaHistory,
        report: CompensationReport,
        *,
        value: Any,
        error: BaseException | None,
    ) -> SagaResult:
        """End a saga after a compensation walk; its pending requests can no longer run."""
        outcome = outcome_of(report)
        self._approval.discard(history.saga_id)
        self._end(history, outcome, report, error)
        _telemetry.saga_ended(history, outcome.value, report)
        return SagaResult(
            saga_id=history.saga_id,
            outcome=outcome,
            value=value,
            error=error,
            compensation=report,
        )

    def _end(
        self,
        history: SagaHistory,
        outcome: SagaOutcome,
        report: CompensationReport | None,
        error: BaseException | None,
    ) -> None:
        payload = _end_payload(outcome, report, error)
        for _ in range(_END_RETRIES):
            if _ended_already(history, outcome, payload):
                return
            try:
                history.append(
                    self._journal, Phase.ENDED, payload=payload, expected_seq=history.last_seq
                )
            except AppendConflictError:
                history.reload(self._journal)  # another writer appended: end on top of it
                continue
            return
        raise _end_lost(history)

    async def _aend(
        self,
        history: SagaHistory,
        outcome: SagaOutcome,
        report: CompensationReport | None,
        error: BaseException | None,
    ) -> None:
        """`_end` for async code: the loop awaits the journal."""
        payload = _end_payload(outcome, report, error)
        for _ in range(_END_RETRIES):
            if _ended_already(history, outcome, payload):
                return
            try:
                await history.aappend(
                    self._journal, Phase.ENDED, payload=payload, expected_seq=history.last_seq
                )
            except AppendConflictError:
                await asyncio.to_thread(history.reload, self._journal)
                continue
            return
        raise _end_lost(history)


def _replayed(scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
    """Report a run that replayed a saga that had ended (`seal_for_replay`): as it ended.

    A refusal (a changed input, another tool under a call id, a call in doubt) is raised,
    as for any run; any other error the work raised is reported in `error`.
    """
    SagaEnding._refuse(scope, error)
    history = scope.history
    return SagaResult(
        saga_id=history.saga_id,
        outcome=SagaOutcome(history.outcome),
        value=value,
        error=error,
        replayed=True,
    )


def _completed(history: SagaHistory, value: Any) -> SagaResult:
    """The result of a saga whose ENDED says COMPLETED."""
    _telemetry.saga_ended(history, SagaOutcome.COMPLETED.value)
    return SagaResult(saga_id=history.saga_id, outcome=SagaOutcome.COMPLETED, value=value)


def _end_payload(
    outcome: SagaOutcome, report: CompensationReport | None, error: BaseException | None
) -> dict[str, Any]:
    payload: dict[str, Any] = {"outcome": outcome.value}
    if error is not None:
        payload["error"] = error_json(error)
    if report is not None:
        # Calls, not attempts: a call retried under one id is one call.
        payload["compensated"] = _call_ids(report.compensated)
        payload["compensation_failed"] = _call_ids(report.failed)
        payload["in_doubt"] = _call_ids(report.in_doubt)
        if report.waiting:  # left to a process that wraps the tools: nothing was tried
            payload["compensation_waiting"] = _call_ids(report.waiting)
    return payload


def _call_ids(refs: list[CallRef]) -> list[str]:
    """The distinct call ids of `refs`, in their order."""
    return list(dict.fromkeys(ref.call_id for ref in refs))


def _ended_already(history: SagaHistory, outcome: SagaOutcome, payload: dict[str, Any]) -> bool:
    """Whether the last ENDED already says it; raises if the saga completed meanwhile."""
    last = history.ended
    if last is not None and _same_end(last.payload, payload):
        return True  # a walk that changed nothing: the last ENDED still says it all
    if last is not None and outcome is SagaOutcome.COMPLETED:
        raise SagaStateError(
            f"saga {history.saga_id!r} ended {history.outcome} at seq {last.seq} "
            "while this run was finishing; it is not ended a second time"
        )
    return False


def _end_lost(history: SagaHistory) -> JournalError:
    return JournalError(
        f"saga {history.saga_id!r}: its ENDED entry lost {_END_RETRIES} races with other "
        "writers of the saga; run Sagacity.compensate to end it"
    )


def _same_end(recorded: Any, payload: dict[str, Any]) -> bool:
    """Whether an ENDED entry already says what a walk would write (its error aside)."""
    if not isinstance(recorded, dict):
        return False
    return {k: v for k, v in recorded.items() if k != "error"} == {
        k: v for k, v in payload.items() if k != "error"
    }


def _refuse_if_ended(scope: SagaScope) -> None:
    """Refuse a failed run whose saga another worker ended meanwhile (once re-read).

    It neither compensates nor ends the saga: its walk would undo a saga that ended as
    the other recorded, and end it twice.
    """
    scope.refuse_if_ended("it is not compensated or ended again")


def _refuse_if_taken_over(scope: SagaScope, error: Exception | None) -> None:
    """A worker whose lease was taken over stops: the saga is the new holder's now."""
    if scope.history.lease_lost:
        if isinstance(error, LeaseLostError):
            raise error
        raise LeaseLostError(
            f"saga {scope.saga_id!r}: this worker's lease was taken over while its work ran; "
            "it neither compensates nor ends the saga: the new holder does"
        )
