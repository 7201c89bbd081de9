"""The `Sagacity` facade: wrap tools, run sagas, compensate, approve and resume.

The facade holds no logic of its own: the hot path of one call is `_call.py`, the
approval lifecycle `approval/`, how a saga ends `_outcome.py`, and the compensation walk
`compensation/`.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from sagacity._deciding import ApprovalDecisions
from sagacity._granting import StandingApprovals
from sagacity._history import SagaHistory
from sagacity._ids import require_id
from sagacity._joining import SagaJoining
from sagacity._leasing import LeaseKeeper, release_parked
from sagacity._outcome import SagaEnding, SagaOutcome, SagaResult
from sagacity._reconcile import ReconcilerRegistry
from sagacity._reconciling import Reconciling
from sagacity._saga_run import arun_in, run_coroutine, run_in
from sagacity._scope import SagaScope, current_scope
from sagacity._settling import DoubtSettling
from sagacity._stored_call import rebuilt_arguments, wrapped_tool
from sagacity._wrap import wrap_sources
from sagacity.approval import (
    ApprovalHook,
    ApprovalLifecycle,
    ApprovalPolicy,
    ApprovalStore,
    ResumableCall,
)
from sagacity.approval._escalation import MAX_GROUP_TTL
from sagacity.approval._lifecycle import ApproverGroup, Clock, checked_clock, explain_unusable
from sagacity.approval._policy import starter_for
from sagacity.approval._resume import seal_for_replay
from sagacity.compensation import CompensationRegistry, CompensationRunner
from sagacity.errors import (
    ConfigurationError,
    NestedSagaError,
    SagaNotFoundError,
    SagaStateError,
)
from sagacity.journal import JournalEntry, SideEffectJournal
from sagacity.journal._protocol import entries_async
from sagacity.tools import ExceptionClassifier, FailureKind, SagaTool, default_classifier

if TYPE_CHECKING:
    from sagacity.audit._keys import PrivateKey, PublicKey

__all__ = ["SagaOutcome", "SagaResult", "Sagacity"]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Sagacity(ApprovalDecisions, StandingApprovals, DoubtSettling, SagaJoining):
    """Journals tool calls, compensates failed sagas and gates IRREVERSIBLE calls.

    Args:
        journal: Where entries are appended.
        approvals: Where pending approval requests are kept.
        approval_ttl: How long a request stays usable (seconds or a timedelta); None
            for no expiry.
        allow_irreversible_outside_saga: Let IRREVERSIBLE tools run, unjournaled and
            unapproved, when no saga is open. Off: they raise `NoSagaError`.
        clock: Returns the current time as a timezone-aware datetime (for expiry);
            `sagacity.testing.FakeClock` makes it controllable.
        lease_ttl: How long a worker's lease on a saga lasts without renewal (seconds or
            a timedelta); renewed every third of it while the worker holds the saga.
        lease_wait: How long to wait for a saga another worker holds before raising
            `SagaBusyError`; 0 refuses at once.
        approval_signing_key: Signs every approval this process journals (Ed25519,
            `sagacity.audit.load_private_key`; the `signing` extra).
        approval_public_keys: The keys whose approval signatures are accepted (the
            signing key's own is accepted too).
        require_signed_approvals: Count only approvals whose signature verifies with one
            of those keys: a row written into the journal without a key approves nothing.
        on_approval_request: Called with each new approval request after its
            AWAITING_APPROVAL is committed, in the asking process, on the asking thread
            (for an async call, a worker thread); what it raises is logged (logger
            `sagacity`), never raised.
        running_call_wait: How long (seconds or a timedelta) a run waits for the calls
            its work left running; those still running then are in doubt (docs/sagas.md).
        on_approval_reminder: Told of each request at its warning time (`Escalator`).
        approver_groups: The `ApproverGroup`s expired requests may escalate to.

    Raises:
        ConfigurationError: The clock returns a naive datetime, a TTL or wait is negative,
            the lease TTL is not positive, or signatures are required with no key to check.
    """

    def __init__(
        self,
        journal: SideEffectJournal,
        approvals: ApprovalStore,
        *,
        approval_ttl: float | datetime.timedelta | None = None,
        allow_irreversible_outside_saga: bool = False,
        clock: Clock | None = None,
        lease_ttl: float | datetime.timedelta = 30.0,
        lease_wait: float = 0.0,
        approval_signing_key: PrivateKey | None = None,
        approval_public_keys: Iterable[PublicKey] = (),
        require_signed_approvals: bool = False,
        on_approval_request: ApprovalHook | None = None,
        running_call_wait: float | datetime.timedelta = 30.0,
        on_approval_reminder: ApprovalHook | None = None,
        approver_groups: Iterable[ApproverGroup] = (),
    ) -> None:
        self.journal = journal
        """The journal this Sagacity appends to."""
        self.approvals = approvals
        """The store of pending approval requests."""
        if isinstance(approval_ttl, int | float):
            if not 0 <= approval_ttl <= MAX_GROUP_TTL.total_seconds():  # NaN too
                raise ConfigurationError(
                    f"approval_ttl must be 0 to {MAX_GROUP_TTL.total_seconds():.0f} seconds "
                    f"(about ten years), not {approval_ttl}"
                )
            approval_ttl = datetime.timedelta(seconds=approval_ttl)
        if approval_ttl is not None and not (
            datetime.timedelta(0) <= approval_ttl <= MAX_GROUP_TTL
        ):
            raise ConfigurationError(
                f"approval_ttl must be between 0 and {MAX_GROUP_TTL.days} days: every "
                f"request's expiry must stay a date, not {approval_ttl}"
            )
        self.approval_ttl: datetime.timedelta | None = approval_ttl
        if isinstance(lease_ttl, int | float):
            lease_ttl = datetime.timedelta(seconds=lease_ttl)
        if lease_ttl <= datetime.timedelta(0) or lease_wait < 0:
            raise ConfigurationError(
                f"lease_ttl must be positive and lease_wait not negative, not {lease_ttl} "
                f"and {lease_wait}"
            )
        self.lease_ttl: datetime.timedelta = lease_ttl
        self.lease_wait = lease_wait
        self.running_call_wait = SagaScope.checked_wait(running_call_wait)
        self.allow_irreversible_outside_saga = allow_irreversible_outside_saga
        self.now: Clock = checked_clock(clock or _utc_now)
        policy = ApprovalPolicy.build(
            approval_signing_key, approval_public_keys, require_signed_approvals, approver_groups
        )
        self.approval = ApprovalLifecycle(
            journal,
            approvals,
            ttl=approval_ttl,
            clock=self.now,
            policy=policy,
            on_request=on_approval_request,
            on_reminder=on_approval_reminder,
        )
        """The approval lifecycle: ask, decide, check, consume."""
        self._registry = CompensationRegistry()
        self._runner = CompensationRunner(journal, self._registry)
        self._reconciling = Reconciling(journal, ReconcilerRegistry())
        self._ending = SagaEnding(journal, self.approval, self._runner, self._reconciling)
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
        try:
            return cls(journal, approvals, **options)
        except BaseException:
            # The stores opened here are this call's to close when an option is refused.
            try:
                journal.close()
            finally:
                approvals.close()
            raise

    def close(self) -> None:
        """Close the stores; the approval store is closed even if closing the journal fails.

        Leases parked on the journal (`join`'s `linger`) are released first.
        """
        try:
            release_parked(self.journal)
            self.journal.close()
        finally:
            self.approvals.close()

    def __enter__(self) -> Sagacity:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close the stores, whether the block returned or raised; nothing is suppressed."""
        self.close()

    # -- tools ---------------------------------------------------------------------------

    def wrap(self, *sources: object) -> list[SagaTool]:
        """Wrap the `compensable` methods of objects, and plain functions, as SagaTools.

        Every declaration is checked now, not when a refund is due: a `by` that names
        nothing, a compensation with the wrong signature, a missing `by`, a generator
        tool, retries on an IRREVERSIBLE tool, or two tools with one name raise
        `ConfigurationError`. A `SagaTool` this Sagacity already made is returned as it
        is, in its place, so adapters take both.
        """
        known, registry, reconcilers = self._tools, self._registry, self._reconciling.registry
        declare = self.approval.declare  # checks them all before any tool is recorded
        return wrap_sources(
            self, sources, known=known, registry=registry, reconcilers=reconcilers, declare=declare
        )

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

    def saga(
        self, saga_id: str, work: Callable[[], Any], *, started_by: str | None = None
    ) -> SagaResult:
        """Run `work` as saga `saga_id` and report how it ended.

        A failed saga is compensated and reported, not raised. `started_by` names the
        principal who starts it: recorded in its journal, and refused as an approver of
        its requests (four eyes).

        Raises:
            InvalidIdError: The saga id is empty, blank or unprintable.
            NestedSagaError: A saga is already open in this context.
            SagaStateError: The saga ended before, or waits for approval.
            SagaBusyError: Another worker holds the saga (see `lease_wait`).
            LeaseLostError: This worker stalled past its lease and was taken over: the
                new holder has the saga; nothing more was written.
            ApprovalError: An approval check refused a call (nothing ran).
        """
        with self._leased(saga_id, opening=True) as keeper:
            scope = self._open(saga_id, keeper, resuming=False, started_by=started_by)
            return self._ending.finish(scope, *run_in(scope, work))

    async def asaga(
        self, saga_id: str, work: Callable[[], Awaitable[Any]], *, started_by: str | None = None
    ) -> SagaResult:
        """Run async `work` as saga `saga_id` (see `saga`); no store I/O blocks the loop."""
        async with self._leased(saga_id, opening=True) as keeper:
            history = keeper.empty_history or SagaHistory.of(
                saga_id, await entries_async(self.journal, saga_id)
            )
            if history.entries and self._reconciling.registry:  # a saga run again: its doubts
                await self._reconciling.asettle(history, walking=False)
            opening = partial(
                self._open, saga_id, keeper, started_by=started_by, history=history, settled=True
            )
            # With a request open, the store is read too: on a worker thread.
            scope = await asyncio.to_thread(opening) if history.open_requests() else opening()
            return await self._ending.afinish(scope, *await arun_in(scope, work))

    def compensate(self, saga_id: str) -> SagaResult:
        """Run the compensation walk (again): after a crash, or to retry failed ones.

        A compensation already journaled COMPENSATED is never run twice; in-doubt calls
        are listed, never acted on. A saga waiting for approval is abandoned: its pending
        requests are deleted.

        Raises:
            SagaNotFoundError: The journal has no such saga.
            SagaStateError: The saga ended COMPLETED (there is nothing to undo), or it is
                running in this context.
            SagaBusyError: Another worker holds the saga (see `lease_wait`).
        """
        with self._leased(saga_id) as keeper:
            history = keeper.hold(self._compensable_history(saga_id))
            report = self._ending.walk(history)
            return self._ending.compensated(history, report, value=None, error=None)

    async def acompensate(self, saga_id: str) -> SagaResult:
        """Run the compensation walk from async code (see `compensate`)."""
        async with self._leased(saga_id) as keeper:
            history = keeper.hold(await asyncio.to_thread(self._compensable_history, saga_id))
            report = await self._ending.awalk(history)
            return await asyncio.to_thread(
                self._ending.compensated, history, report, value=None, error=None
            )

    def history(self, saga_id: str) -> list[JournalEntry]:
        """Return the saga's journal entries (a shorthand for `journal.entries`).

        Raises:
            InvalidIdError: The saga id is one no saga can have (see `saga`).
        """
        return self.journal.entries(require_id(saga_id, "saga id"))

    # -- approval (pending, approve, reject and edit: _deciding.py) ------------------------

    def resume_saga(
        self,
        saga_id: str,
        work: Callable[[], Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> SagaResult:
        """Resume a saga that waited for approval.

        Without `work`, run the approved call with its journaled input, rebuilt into the
        Python types of the tool's signature, consume the request and end the saga
        (compensating if the tool fails). With `work`, re-open the saga and run it: a
        framework's native resume, whose call of the tool passes the same approval check;
        if the saga ended after it paused, `work` replays (`SagaResult.replayed`).

        Raises:
            ApprovalError: A check refused; nothing ran and the saga can still be
                approved properly. Without `work`, a saga that ended by a rejection raises
                `ApprovalRejectedError`, one whose approved call ran already
                `ApprovalAlreadyUsedError`.
            SagaStateError: The saga ended otherwise, or a saga is open in this context.
        """
        replay = work is not None
        self._reconcile_before(saga_id)
        if work is None:
            call, tool, kwargs = self._stored_call(saga_id, request_id)
            if tool.is_async:
                return run_coroutine(
                    self._aresume(saga_id, None, call.request.request_id, reconciled=True),
                    f"saga {saga_id!r}: tool {tool.name!r} is async",
                )

            def work() -> Any:
                call.refuse_if_spent(scope.history)
                return tool.invoke((), kwargs, call_id=call.request.call_id)

        with self._leased(saga_id, opening=True) as keeper:
            scope = self._open(saga_id, keeper, resuming=True, replay=replay)
            return self._ending.finish(scope, *run_in(scope, work))

    async def aresume_saga(
        self,
        saga_id: str,
        work: Callable[[], Awaitable[Any]] | None = None,
        *,
        request_id: str | None = None,
    ) -> SagaResult:
        """Resume a saga that waited for approval, from async code (see `resume_saga`)."""
        return await self._aresume(saga_id, work, request_id)

    async def _aresume(
        self,
        saga_id: str,
        work: Callable[[], Awaitable[Any]] | None,
        request_id: str | None,
        *,
        reconciled: bool = False,
    ) -> SagaResult:
        replay = work is not None
        if not reconciled:  # the sync resume_saga of an async tool asked them already
            await self._areconcile_before(saga_id)
        if work is None:
            call, tool, kwargs = await asyncio.to_thread(self._stored_call, saga_id, request_id)

            async def work() -> Any:
                call.refuse_if_spent(scope.history)
                return await tool.ainvoke((), kwargs, call_id=call.request.call_id)

        async with self._leased(saga_id, opening=True) as keeper:
            opening = partial(self._open, saga_id, keeper, resuming=True, replay=replay)
            scope = await asyncio.to_thread(opening)
            return await self._ending.afinish(scope, *await arun_in(scope, work))

    # -- internals -----------------------------------------------------------------------

    def _stored_call(
        self, saga_id: str, request_id: str | None
    ) -> tuple[ResumableCall, SagaTool, dict[str, Any]]:
        """The approved call to run without `work`, its tool, and its arguments rebuilt."""
        call = self.approval.resumable(saga_id, request_id)
        tool = wrapped_tool(self._tools, call.request)
        return call, tool, rebuilt_arguments(tool, call.request)

    def _history(self, saga_id: str, *, must_exist: bool = False) -> SagaHistory:
        history = self.approval.history(saga_id)
        if must_exist and not history.entries:
            raise SagaNotFoundError(f"saga {saga_id!r} has no journal entries")
        return history

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

    def _refuse_if_open(self, saga_id: str) -> None:
        scope = current_scope()
        if scope is not None and scope.saga_id == saga_id:
            raise SagaStateError(
                f"saga {saga_id!r} is running in this context; let its work return first"
            )

    def _leased(
        self,
        saga_id: str,
        *,
        opening: bool = False,
        wait: float | None = None,
        linger: float = 0.0,
    ) -> LeaseKeeper:
        """The lease on `saga_id` this worker takes, once the id and the context allow it."""
        require_id(saga_id, "saga id")
        outer = current_scope()
        if opening and outer is not None:
            raise NestedSagaError(
                f"saga {saga_id!r} cannot open inside saga {outer.saga_id!r}: sagas do not nest"
            )
        self._refuse_if_open(saga_id)
        return LeaseKeeper(
            self.journal,
            saga_id,
            ttl=self.lease_ttl,
            wait=self.lease_wait if wait is None else wait,
            clock=self.now,
            linger=linger,
        )

    def _open(
        self,
        saga_id: str,
        keeper: LeaseKeeper,
        *,
        resuming: bool = False,
        replay: bool = False,
        started_by: str | None = None,
        history: SagaHistory | None = None,
        settled: bool = False,
    ) -> SagaScope:
        """Open saga `saga_id` under `keeper`'s lease, from `history` (else read now).

        A saga run again has its doubts reconciled unless `settled` (resumes do it first).
        """
        history = keeper.hold(history or keeper.known_history or self._history(saga_id))
        if not (resuming or settled) and history.entries and self._reconciling.registry:
            self._reconciling.settle(history, walking=False)
        if history.ended is not None and not (replay and seal_for_replay(history)):
            if resuming:
                explain_unusable(history, None)  # a worker that lost the race: say why
            raise SagaStateError(
                f"saga {saga_id!r} ended {history.outcome} at seq {history.ended.seq}; "
                "a saga id is used once: start a new saga"
            )
        # A request is journaled before it is stored: none open in the journal, none stored.
        if not resuming and history.open_requests() and self.approvals.pending(saga_id):
            raise SagaStateError(
                f"saga {saga_id!r} is waiting for approval; approve or reject it, then call "
                "resume_saga"
            )
        scope = SagaScope(self, saga_id, history, running_call_wait=self.running_call_wait)
        scope.started_by = starter_for(history, started_by)
        # A call that failed in an earlier run still fails the saga: resuming it must end
        # in compensation, never in COMPLETED with the earlier effects left live.
        scope.failed = scope.failed_before = history.has_failed_call()
        return scope
