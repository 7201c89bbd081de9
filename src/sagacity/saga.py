"""The `Sagacity` facade: wrap tools, run sagas, compensate, approve and resume."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from sagacity._history import SagaHistory, payload_of
from sagacity._scope import SagaScope, _scope, current_scope
from sagacity._wrap import DeclaredTool, collect_tools
from sagacity.approval import ApprovalRequest, ApprovalStore
from sagacity.approval._check import check_request_matches_journal
from sagacity.compensation import CompensationRegistry, CompensationReport, CompensationRunner
from sagacity.errors import (
    ApprovalAlreadyUsedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ConfigurationError,
    InDoubtError,
    NestedSagaError,
    ReplayMismatchError,
    SagacityError,
    SagaNotFoundError,
    SagaStateError,
    SerializationError,
)
from sagacity.journal import JournalEntry, Phase, SideEffectJournal, to_json
from sagacity.tools import ExceptionClassifier, FailureKind, SagaTool, default_classifier

__all__ = ["SagaOutcome", "SagaResult", "Sagacity"]


class SagaOutcome(enum.Enum):
    """How a saga run ended, read from the journal."""

    COMPLETED = "COMPLETED"
    """Every call succeeded."""
    COMPENSATED = "COMPENSATED"
    """A call failed and every declared compensation ran."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """A call failed and at least one compensation raised: the report says what is dirty."""
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """An IRREVERSIBLE call waits for a human; the saga is open until it is resumed."""
    SUSPENDED = "SUSPENDED"
    """The framework paused a call (its own control flow, such as a LangGraph
    `interrupt()` in a tool): the saga stays open; `resume_saga(saga_id, work)` goes on."""


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
    """What the work raised, if it did."""
    compensation: CompensationReport | None = None
    """The compensation walk, when one ran."""
    pending: list[ApprovalRequest] = dataclasses.field(default_factory=list)
    """The approval requests the saga waits on."""


Clock = Callable[[], datetime.datetime]

_REFUSALS = (ApprovalError, InDoubtError, ReplayMismatchError)
"""Raised before a call ran: the saga stays open instead of failing."""


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Sagacity:
    """Journals tool calls, compensates failed sagas and gates IRREVERSIBLE calls.

    Args:
        journal: Where entries are appended.
        approvals: Where pending approval requests are kept.
        approval_ttl: How long a request stays usable (seconds or a timedelta); None
            for no expiry.
        allow_irreversible_outside_saga: Let IRREVERSIBLE tools run, unjournaled and
            unapproved, when no saga is open. Off: they raise `NoSagaError`.
        clock: Returns the current UTC time (for expiry); `sagacity.testing.FakeClock`
            makes it controllable.
    """

    def __init__(
        self,
        journal: SideEffectJournal,
        approvals: ApprovalStore,
        *,
        approval_ttl: float | datetime.timedelta | None = None,
        allow_irreversible_outside_saga: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.journal = journal
        """The journal this Sagacity appends to."""
        self.approvals = approvals
        """The store of pending approval requests."""
        if isinstance(approval_ttl, int | float):
            approval_ttl = datetime.timedelta(seconds=approval_ttl)
        self.approval_ttl: datetime.timedelta | None = approval_ttl
        self.allow_irreversible_outside_saga = allow_irreversible_outside_saga
        self.now: Clock = clock or _utc_now
        self._registry = CompensationRegistry()
        self._runner = CompensationRunner(journal, self._registry)
        self._tools: dict[str, SagaTool] = {}
        self._classifiers: list[ExceptionClassifier] = []

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Sagacity:
        """Build the journal and approval store from one URL and pass `options` on.

        `memory://`, `sqlite:///relative/path.db` or `sqlite:////absolute/path.db`,
        `postgresql://user@host/db` (the `postgres` extra).
        """
        from sagacity._stores import open_stores

        journal, approvals = open_stores(url)
        return cls(journal, approvals, **options)

    def close(self) -> None:
        """Close the stores."""
        self.journal.close()
        self.approvals.close()

    # -- tools ---------------------------------------------------------------------------

    def wrap(self, *sources: object) -> list[SagaTool]:
        """Wrap the `compensable` methods of objects, and plain functions, as SagaTools.

        Every declaration is checked now, not when a refund is due: a `by` that names
        nothing, a compensation with the wrong signature, a missing `by`, or two tools
        with one name raise `ConfigurationError`. A `SagaTool` this Sagacity already
        made is returned as it is, in its place, so adapters take both.
        """
        groups: list[SagaTool | list[DeclaredTool]] = []
        for source in sources:
            if not isinstance(source, SagaTool):
                groups.append(collect_tools([source]))
            elif source.owner is self:
                groups.append(source)
            else:
                raise ConfigurationError(
                    f"tool {source.name!r} was wrapped by another Sagacity; pass the object "
                    "or function it came from, or a tool wrapped by this Sagacity"
                )
        found = [declared for group in groups if isinstance(group, list) for declared in group]
        names = [g.name for g in groups if isinstance(g, SagaTool)] + [d.name for d in found]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ConfigurationError(
                f"two tools are named {repeated[0]!r}; give each tool once, or give one another "
                "name with compensable(name=...)"
            )
        for declared in found:
            existing = self._tools.get(declared.name)
            # Wrapping another instance of the same class replaces the tool (and its
            # compensation): objects built per request are a common pattern.
            if existing is not None and _function_of(existing.func) is not _function_of(
                declared.func
            ):
                raise ConfigurationError(
                    f"two tools are named {declared.name!r} ({existing.func.__qualname__} and "
                    f"{declared.func.__qualname__}); give one another name with "
                    "compensable(name=...)"
                )
        tools: list[SagaTool] = []
        for group in groups:
            if isinstance(group, SagaTool):
                tools.append(group)
                continue
            for declared in group:
                tool = SagaTool(
                    self,
                    declared.func,
                    name=declared.name,
                    description=declared.description,
                    reversibility=declared.reversibility,
                )
                if declared.compensation is not None:
                    self._registry.register(declared.compensation)
                self._tools[declared.name] = tool
                tools.append(tool)
        return tools

    def tool(self, name: str) -> SagaTool:
        """Return the wrapped tool called `name`."""
        try:
            return self._tools[name]
        except KeyError:
            raise ConfigurationError(
                f"no tool named {name!r} is wrapped in this process; wrap it with Sagacity.wrap"
            ) from None

    def add_classifier(self, classifier: ExceptionClassifier) -> None:
        """Teach the hot path a framework's exceptions; the first non-None answer wins."""
        if classifier not in self._classifiers:
            self._classifiers.append(classifier)

    def classify(self, error: BaseException) -> FailureKind:
        """Return how `error`, raised by a tool, is journaled."""
        for classifier in self._classifiers:
            kind = classifier(error)
            if kind is not None:
                return kind
        return default_classifier(error)

    # -- sagas ---------------------------------------------------------------------------

    def saga(self, saga_id: str, work: Callable[[], Any]) -> SagaResult:
        """Run `work` as saga `saga_id` and report how it ended.

        A failed saga is compensated and reported, not raised.

        Raises:
            NestedSagaError: A saga is already open in this context.
            SagaStateError: The saga ended before, or waits for approval.
            ApprovalError: An approval check refused a call (nothing ran).
        """
        scope = self._open(saga_id, resuming=False)
        value, error = self._run_sync(scope, work)
        return self._finish(scope, value, error)

    async def asaga(self, saga_id: str, work: Callable[[], Awaitable[Any]]) -> SagaResult:
        """Run async `work` as saga `saga_id` (see `saga`)."""
        scope = self._open(saga_id, resuming=False)
        value, error = await self._run_async(scope, work)
        return await self._afinish(scope, value, error)

    def compensate(self, saga_id: str) -> SagaResult:
        """Run the compensation walk (again): after a crash, or to retry failed ones.

        A compensation already journaled COMPENSATED is never run twice; in-doubt calls
        are listed, never acted on. A saga waiting for approval is abandoned: its pending
        requests are deleted.

        Raises:
            SagaNotFoundError: The journal has no such saga.
            SagaStateError: The saga ended COMPLETED (there is nothing to undo), or it is
                running in this context.
        """
        history = self._compensable_history(saga_id)
        report = self._runner.run(history)
        return self._end_compensated(history, report, value=None, error=None)

    async def acompensate(self, saga_id: str) -> SagaResult:
        """Run the compensation walk from async code (see `compensate`)."""
        history = self._compensable_history(saga_id)
        report = await self._runner.arun(history)
        return self._end_compensated(history, report, value=None, error=None)

    def resolve(
        self, saga_id: str, call_id: str, *, executed: bool, result: Any = None, by: str
    ) -> JournalEntry:
        """Record a human's finding on an in-doubt call: it ran (with `result`) or not.

        A call resolved as executed is compensated by the next `compensate`.
        """
        _require_name(by, "by")
        history = self._history(saga_id, must_exist=True)
        call = history.latest_call.get(call_id)
        if call is None or not call.in_doubt:
            raise SagaStateError(
                f"saga {saga_id!r}: call {call_id!r} is not in doubt; only a call whose outcome "
                "is unknown can be resolved"
            )
        intent = call.intent
        if executed:
            payload: Any = {
                "result": to_json(result, where=f"saga {saga_id!r} call {call_id!r} result"),
                "resolved_by": by,
            }
            phase = Phase.EXECUTED
        else:
            payload = {"kind": "not_run", "error": None, "resolved_by": by}
            phase = Phase.FAILED
        return self.journal.append(
            saga_id,
            phase,
            tool_name=intent.tool_name,
            call_id=call_id,
            ref_seq=intent.seq,
            payload=payload,
        )

    def history(self, saga_id: str) -> list[JournalEntry]:
        """Return the saga's journal entries (a shorthand for `journal.entries`)."""
        return self.journal.entries(saga_id)

    # -- approval ------------------------------------------------------------------------

    def pending(self, saga_id: str | None = None) -> list[ApprovalRequest]:
        """Return the approval requests waiting, of one saga or of all."""
        return self.approvals.pending(saga_id)

    def approve(
        self,
        saga_id: str,
        *,
        approver: str,
        request_id: str | None = None,
        expected_sha256: str | None = None,
    ) -> JournalEntry:
        """Journal a named approver's approval of a pending request's exact input.

        Args:
            saga_id: The saga.
            approver: Who approves; recorded in the chain.
            request_id: Which request; may be left out when the saga has exactly one.
            expected_sha256: The hash the approver was shown; refused if the request's
                input no longer hashes to it.

        Returns:
            The APPROVED entry. The request stays stored: resuming needs its hash.
        """
        _require_name(approver, "approver")
        request = self._pending_request(saga_id, request_id)
        history = self._history(saga_id, must_exist=True)
        awaiting = check_request_matches_journal(request, history)
        if history.rejected(awaiting.seq) is not None:
            raise ApprovalRejectedError(
                f"saga {saga_id!r}: request {request.request_id} was rejected; it cannot be "
                "approved"
            )
        if request.expired(self.now()):
            raise ApprovalExpiredError(
                f"saga {saga_id!r}: request {request.request_id} expired at "
                f"{request.expires_at}; resume the saga to ask again, or reject it"
            )
        if expected_sha256 is not None and expected_sha256 != request.input_sha256:
            raise ApprovalHashMismatchError(
                f"saga {saga_id!r}: the approver was shown sha256 {expected_sha256[:12]}…, but "
                f"request {request.request_id} holds {request.input_sha256[:12]}…; show the "
                "approver the current input"
            )
        return self.journal.append(
            saga_id,
            Phase.APPROVED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload={
                "request_id": request.request_id,
                "approver": approver,
                "input_sha256": request.input_sha256,
            },
        )

    def reject(
        self, saga_id: str, *, approver: str, reason: str, request_id: str | None = None
    ) -> SagaResult:
        """Journal a rejection, consume the request and compensate the saga."""
        _require_name(approver, "approver")
        request = self._pending_request(saga_id, request_id)
        self._refuse_if_open(saga_id)
        self.journal.append(
            saga_id,
            Phase.REJECTED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload={"request_id": request.request_id, "approver": approver, "reason": reason},
        )
        self.approvals.delete(request.request_id)
        history = self._history(saga_id, must_exist=True)
        report = self._runner.run(history)
        return self._end_compensated(history, report, value=None, error=None)

    def resume_saga(
        self,
        saga_id: str,
        work: Callable[[], Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> SagaResult:
        """Resume a saga that waited for approval.

        Without `work`, run the approved call with its stored input, consume the request
        and end the saga (compensating if the tool fails). With `work`, re-open the
        saga and run it: a framework's native resume, whose call of the tool passes the
        same approval check.

        Raises:
            ApprovalError: A check refused; nothing ran and the saga can still be
                approved properly. A saga that ended by a rejection raises
                `ApprovalRejectedError`, one whose approved call ran already
                `ApprovalAlreadyUsedError`.
            SagaStateError: The saga ended otherwise, or a saga is open in this context.
        """
        self._refuse_ended_resume(saga_id, request_id)
        if work is None:
            request, tool = self._stored_call(saga_id, request_id)
            if tool.is_async:
                return _run_coroutine(
                    self.aresume_saga(saga_id, request_id=request.request_id),
                    f"saga {saga_id!r}: tool {tool.name!r} is async",
                )
            scope = self._open(saga_id, resuming=True)

            def run_approved() -> Any:
                _explain_unusable(scope.history, request.request_id)  # no replay: used once
                return tool.invoke((), request.input, call_id=request.call_id)

            value, error = self._run_sync(scope, run_approved)
            return self._finish(scope, value, error)
        scope = self._open(saga_id, resuming=True)
        value, error = self._run_sync(scope, work)
        return self._finish(scope, value, error)

    async def aresume_saga(
        self,
        saga_id: str,
        work: Callable[[], Awaitable[Any]] | None = None,
        *,
        request_id: str | None = None,
    ) -> SagaResult:
        """Resume a saga that waited for approval, from async code (see `resume_saga`)."""
        self._refuse_ended_resume(saga_id, request_id)
        if work is None:
            request, tool = self._stored_call(saga_id, request_id)
            scope = self._open(saga_id, resuming=True)

            async def arun_approved() -> Any:
                _explain_unusable(scope.history, request.request_id)  # no replay: used once
                return await tool.ainvoke((), request.input, call_id=request.call_id)

            value, error = await self._run_async(scope, arun_approved)
            return await self._afinish(scope, value, error)
        scope = self._open(saga_id, resuming=True)
        value, error = await self._run_async(scope, work)
        return await self._afinish(scope, value, error)

    # -- internals -----------------------------------------------------------------------

    def _stored_call(
        self, saga_id: str, request_id: str | None
    ) -> tuple[ApprovalRequest, SagaTool]:
        """The request to run without `work`, and its tool, checked to take the stored input.

        Checked before the saga re-opens: a tool that cannot take its journaled input (one
        with framework-injected parameters, say) is a refusal that leaves the saga open,
        not a failure that compensates it.
        """
        request = self._approved_for_resume(saga_id, request_id)
        tool = self._tools.get(request.tool_name)
        if tool is None:
            raise ConfigurationError(
                f"saga {saga_id!r}: tool {request.tool_name!r} is not wrapped by this Sagacity; "
                "wrap it with Sagacity.wrap, or resume with the framework's own resume as `work`"
            )
        try:
            tool.input_of((), request.input)
        except (TypeError, SerializationError) as error:
            raise ConfigurationError(
                f"saga {saga_id!r}: tool {tool.name!r} cannot be called with its stored input "
                f"({error}); resume with the framework's own resume as `work`"
            ) from error
        return request, tool

    def _history(self, saga_id: str, *, must_exist: bool = False) -> SagaHistory:
        entries = self.journal.entries(saga_id)
        if must_exist and not entries:
            raise SagaNotFoundError(f"saga {saga_id!r} has no journal entries")
        return SagaHistory.of(saga_id, entries)

    def _compensable_history(self, saga_id: str) -> SagaHistory:
        history = self._history(saga_id, must_exist=True)
        self._refuse_if_open(saga_id)
        if history.outcome == SagaOutcome.COMPLETED.value and not history.has_failed_call():
            assert history.ended is not None
            raise SagaStateError(
                f"saga {saga_id!r} ended COMPLETED at seq {history.ended.seq}: no call failed, "
                "so nothing is compensated; undo a finished saga with a new saga of its own"
            )
        return history

    def _refuse_ended_resume(self, saga_id: str, request_id: str | None) -> None:
        """Refuse to resume a saga that ended, saying why from the journal."""
        history = self._history(saga_id)
        if history.ended is None:
            return
        _explain_unusable(history, request_id)
        raise SagaStateError(
            f"saga {saga_id!r} ended {history.outcome} at seq {history.ended.seq}; there is "
            "nothing to resume"
        )

    def _refuse_if_open(self, saga_id: str) -> None:
        scope = current_scope()
        if scope is not None and scope.saga_id == saga_id:
            raise SagaStateError(
                f"saga {saga_id!r} is running in this context; let its work return first"
            )

    def _open(self, saga_id: str, *, resuming: bool) -> SagaScope:
        if not isinstance(saga_id, str) or not saga_id:
            raise ValueError(f"a saga id must be a non-empty string, not {saga_id!r}")
        outer = current_scope()
        if outer is not None:
            raise NestedSagaError(
                f"saga {saga_id!r} cannot open inside saga {outer.saga_id!r}: sagas do not nest"
            )
        history = self._history(saga_id)
        if history.ended is not None:
            raise SagaStateError(
                f"saga {saga_id!r} ended {history.outcome} at seq {history.ended.seq}; "
                "a saga id is used once: start a new saga"
            )
        if not resuming and self.approvals.pending(saga_id):
            raise SagaStateError(
                f"saga {saga_id!r} is waiting for approval; approve or reject it, then call "
                "resume_saga"
            )
        scope = SagaScope(self, saga_id, history)
        # A call that failed in an earlier run still fails the saga: resuming it must end
        # in compensation, never in COMPLETED with the earlier effects left live.
        scope.failed = history.has_failed_call()
        return scope

    @staticmethod
    def _run_sync(scope: SagaScope, work: Callable[[], Any]) -> tuple[Any, Exception | None]:
        token = _scope.set(scope)
        try:
            value = work()
        except Exception as error:
            return None, error
        finally:
            _scope.reset(token)
            scope.close()
        if inspect.iscoroutine(value):
            value.close()  # never started: nothing in it ran
            return None, TypeError(
                f"saga {scope.saga_id!r}: work returned a coroutine; run async work with "
                "`await sagacity.asaga(...)`"
            )
        return _unconsumed_stream(scope, value)

    @staticmethod
    async def _run_async(
        scope: SagaScope, work: Callable[[], Awaitable[Any]]
    ) -> tuple[Any, Exception | None]:
        token = _scope.set(scope)
        try:
            outcome = work()
            if inspect.isawaitable(outcome):
                outcome = await outcome
        except Exception as error:
            return None, error
        finally:
            _scope.reset(token)
            scope.close()
        return _unconsumed_stream(scope, outcome)

    def _finish(self, scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
        if self._must_compensate(scope, error):
            report = self._runner.run(scope.history)
            return self._end_compensated(scope.history, report, value=value, error=error)
        return self._settle(scope, value, error)

    async def _afinish(self, scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
        if self._must_compensate(scope, error):
            report = await self._runner.arun(scope.history)
            return self._end_compensated(scope.history, report, value=value, error=error)
        return self._settle(scope, value, error)

    @staticmethod
    def _must_compensate(scope: SagaScope, error: Exception | None) -> bool:
        if scope.failed:
            return True
        # A refusal executed nothing: the saga stays open to be approved (or resolved) properly.
        return error is not None and not isinstance(error, _REFUSALS)

    def _settle(self, scope: SagaScope, value: Any, error: Exception | None) -> SagaResult:
        refusal: SagacityError | None = error if isinstance(error, _REFUSALS) else scope.refusal
        if refusal is not None:
            raise refusal
        pending = self.approvals.pending(scope.saga_id)
        if pending:
            return SagaResult(
                saga_id=scope.saga_id,
                outcome=SagaOutcome.AWAITING_APPROVAL,
                value=value,
                pending=pending,
            )
        if scope.suspended:
            return SagaResult(saga_id=scope.saga_id, outcome=SagaOutcome.SUSPENDED, value=value)
        self._end(scope.history, SagaOutcome.COMPLETED)
        return SagaResult(saga_id=scope.saga_id, outcome=SagaOutcome.COMPLETED, value=value)

    def _end_compensated(
        self,
        history: SagaHistory,
        report: CompensationReport,
        *,
        value: Any,
        error: Exception | None,
    ) -> SagaResult:
        outcome = SagaOutcome.COMPENSATED if report.clean else SagaOutcome.COMPENSATION_FAILED
        for request in self.approvals.pending(history.saga_id):
            self.approvals.delete(request.request_id)  # the saga ends: nothing may run now
        self._end(history, outcome, report)
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
        report: CompensationReport | None = None,
    ) -> None:
        payload: dict[str, Any] = {"outcome": outcome.value}
        if report is not None:
            payload["compensated"] = [ref.call_id for ref in report.compensated]
            payload["compensation_failed"] = [ref.call_id for ref in report.failed]
            payload["in_doubt"] = [ref.call_id for ref in report.in_doubt]
        if history.ended is not None and history.ended.payload == payload:
            return  # a walk that changed nothing: the last ENDED still says it all
        history.add(self.journal.append(history.saga_id, Phase.ENDED, payload=payload))

    def _pending_request(self, saga_id: str, request_id: str | None) -> ApprovalRequest:
        if request_id is not None:
            request = self.approvals.get(request_id)
            if request is None or request.saga_id != saga_id:
                raise ApprovalNotFoundError(
                    f"saga {saga_id!r} has no pending approval request {request_id!r}"
                )
            return request
        pending = self.approvals.pending(saga_id)
        if len(pending) == 1:
            return pending[0]
        if not pending:
            raise ApprovalNotFoundError(f"saga {saga_id!r} has no pending approval request")
        raise ApprovalNotFoundError(
            f"saga {saga_id!r} has {len(pending)} pending approval requests "
            f"({', '.join(r.request_id for r in pending)}); name one with request_id"
        )

    def _approved_for_resume(self, saga_id: str, request_id: str | None) -> ApprovalRequest:
        """Find the request to run, explaining from the journal why there is none."""
        try:
            return self._pending_request(saga_id, request_id)
        except ApprovalNotFoundError as missing:
            try:
                _explain_unusable(self._history(saga_id), request_id)
            except ApprovalError as explained:
                raise explained from None
            raise missing from None


def _explain_unusable(history: SagaHistory, request_id: str | None) -> None:
    """Raise why the newest (or the named) request of a saga can no longer run, if known."""
    saga_id = history.saga_id
    for awaiting in _newest_first(history.awaiting.values()):
        if request_id not in (None, payload_of(awaiting).get("request_id")):
            continue
        rejected = history.rejected(awaiting.seq)
        if rejected is not None:
            raise ApprovalRejectedError(
                f"saga {saga_id!r}: request {payload_of(awaiting).get('request_id')} was "
                f"rejected by {payload_of(rejected).get('approver')!r}; it cannot run"
            )
        call = history.latest_call.get(awaiting.call_id or "")
        if call is not None and call.intent.seq > awaiting.seq:
            raise ApprovalAlreadyUsedError(
                f"saga {saga_id!r}: the approved call {awaiting.call_id!r} already ran "
                f"(INTENT at seq {call.intent.seq}); an approval is used once"
            )
        if request_id is None:
            return  # only the newest request says why the saga cannot resume


def _run_coroutine(coroutine: Coroutine[Any, Any, SagaResult], what: str) -> SagaResult:
    """Run an async resume to completion from sync code that has no event loop running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise SagaStateError(f"{what} and an event loop is running here: await aresume_saga instead")


def _unconsumed_stream(scope: SagaScope, value: Any) -> tuple[Any, Exception | None]:
    """Refuse a generator returned by the work: read later, its calls would run unjournaled.

    A lazy stream (LangGraph's `graph.stream()`, say) runs in the reader's context, where
    no saga is open. Closed before it started, it has run nothing.
    """
    if inspect.isgenerator(value) or inspect.isasyncgen(value):
        if inspect.isgenerator(value):
            value.close()  # an async generator that never started needs no closing
        return None, TypeError(
            f"saga {scope.saga_id!r}: work returned a stream ({type(value).__name__}) that was "
            "never read; consume it inside the work, e.g. `lambda: list(graph.stream(...))`"
        )
    return value, None


def _function_of(func: Callable[..., Any]) -> Any:
    """The function under a bound method, so two instances' methods compare equal."""
    return getattr(func, "__func__", func)


def _newest_first(entries: Iterable[JournalEntry]) -> list[JournalEntry]:
    return sorted(entries, key=lambda e: e.seq, reverse=True)


def _require_name(value: object, field: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} must name a person or service, not {value!r}")
