"""Acting on one decision under the saga's lease: the step a worker repeats.

The journal is read again once the lease is held, and the decision is acted on only if
it still waits (`awaiting_resume`): of the workers that raced for it, the one that got
the lease first resumes, and the others find nothing left to do. The read that found the
decision stands for that read when the lease's take proves nothing was appended since
(`SagaLease.head_seq` is its last seq): entries never change or go, and seqs have no
gaps. The steps are the facade's own (`Sagacity.resume_saga` and the compensation walk),
taken under one lease so that the check and the act cannot be split by another worker;
this module reaches into the facade for them rather than widen its public surface.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from sagacity._call import read_under_lease
from sagacity._decision_log import EXPIRY, DecisionLog, awaiting_resume
from sagacity._decisions import Decision, DecisionOutcome, Resumer
from sagacity._history import SagaHistory
from sagacity._leasing import LeaseKeeper
from sagacity._outcome import SagaResult
from sagacity._saga_run import arun_in, run_in
from sagacity._scope import SagaScope
from sagacity._stored_call import rebuilt_arguments
from sagacity.approval._check import journaled_request
from sagacity.errors import SagacityError
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["DecisionResume", "RefusedByDecision", "is_async_resumer"]


class RefusedByDecision(SagacityError):
    """The decision said no (rejected, expired): what ends the resumed saga, compensated."""


def is_async_resumer(resumer: object) -> bool:
    """Whether calling `resumer` gives a coroutine to await (`async def`, or its `__call__`)."""
    return inspect.iscoroutinefunction(resumer) or inspect.iscoroutinefunction(
        getattr(resumer, "__call__", None)  # noqa: B004 - an object's async __call__
    )


class DecisionResume:
    """Resumes a Sagacity's sagas for their decisions, one at a time, under each lease."""

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity

    def log(self) -> DecisionLog:
        """How decisions are read: the Sagacity's approval policy and declared approvers."""
        approval = self.sagacity.approval
        return DecisionLog(policy=approval.policy, declared=dict(approval.declared_approvers))

    def waiting(self, history: SagaHistory) -> Decision | None:
        """The decision the saga waits to have acted on, as of now."""
        return awaiting_resume(history, self.log(), self.sagacity.now())

    def needs_async(self, decision: Decision, resumer: Resumer | None) -> bool:
        """Whether acting on `decision` must be awaited (an async resumer or stored tool)."""
        if resumer is not None:
            return is_async_resumer(resumer)
        if decision.outcome is not DecisionOutcome.APPROVED:
            return False
        return self.sagacity.tool(decision.tool).is_async

    # -- sync ----------------------------------------------------------------------------

    def resume(
        self, decision: Decision, resumer: Resumer | None, *, read: SagaHistory | None = None
    ) -> SagaResult | None:
        """Act on `decision` if the journal, read under the lease, says it still waits.

        `read` is the history the decision was found in, if any: used as the read under
        the lease when nothing was appended since (see `_under_lease`).

        Returns None when there was nothing left to do (another worker did it).

        Raises:
            SagaBusyError: Another worker holds the saga now; try again later.
        """
        s = self.sagacity
        with self._lease(decision.saga_id) as keeper:
            history = self._under_lease(keeper, read)
            if history is None:
                history = s._history(decision.saga_id)
            if history.ended is None and s._reconciling.registry:
                # A doubt a reconciler here can settle is settled before the decision is read.
                s._reconciling.settle(keeper.hold(history), walking=False)
            current = self.waiting(history)
            if current is None or not _same(current, decision):
                return None
            if current.outcome is DecisionOutcome.EXPIRED and current.seq is None:
                keeper.hold(history)
                self._journal_expiry(history, current)
            if history.ended is not None:  # rejected where the tools are not: finish the undo
                keeper.hold(history)
                report = s._ending.walk(history)
                result = s._ending.compensated(history, report, value=None, error=None)
                if resumer is not None:  # the framework is told no: a replay of the ended saga
                    scope = s._open(
                        decision.saga_id, keeper, resuming=True, replay=True, history=history
                    )
                    _, error = run_in(scope, lambda: resumer(current))
                    if error is not None:
                        raise error
                return result
            scope = s._open(decision.saga_id, keeper, resuming=True, history=history)
            self._approved_from(scope, current)
            return s._ending.finish(scope, *run_in(scope, self._work(scope, current, resumer)))

    def _work(
        self, scope: SagaScope, decision: Decision, resumer: Resumer | None
    ) -> Callable[[], Any]:
        if decision.outcome is DecisionOutcome.APPROVED:
            if resumer is not None:
                return lambda: resumer(decision)
            tool, kwargs = self._stored(decision, scope.history)
            return lambda: tool.invoke((), kwargs, call_id=decision.call_id)

        def no() -> None:
            if resumer is not None:
                try:
                    resumer(decision)
                except Exception as error:
                    raise _refused(decision) from error
            raise _refused(decision)

        return no

    # -- async ---------------------------------------------------------------------------

    async def aresume(
        self, decision: Decision, resumer: Resumer | None, *, read: SagaHistory | None = None
    ) -> SagaResult | None:
        """`resume` from async code: an async resumer or stored tool is awaited here."""
        s = self.sagacity
        async with self._lease(decision.saga_id) as keeper:
            history = self._under_lease(keeper, read)
            if history is None:
                history = await asyncio.to_thread(s._history, decision.saga_id)
            if history.ended is None and s._reconciling.registry:
                await s._reconciling.asettle(keeper.hold(history), walking=False)
            current = self.waiting(history)
            if current is None or not _same(current, decision):
                return None
            if current.outcome is DecisionOutcome.EXPIRED and current.seq is None:
                keeper.hold(history)
                await asyncio.to_thread(self._journal_expiry, history, current)
            if history.ended is not None:
                keeper.hold(history)
                report = await s._ending.awalk(history)
                result = await asyncio.to_thread(
                    s._ending.compensated, history, report, value=None, error=None
                )
                if resumer is not None:  # the framework is told no: a replay of the ended saga
                    scope = await asyncio.to_thread(
                        s._open,
                        decision.saga_id,
                        keeper,
                        resuming=True,
                        replay=True,
                        history=history,
                    )
                    _, error = await arun_in(scope, lambda: _maybe_await(resumer(current)))
                    if error is not None:
                        raise error
                return result
            scope = await asyncio.to_thread(
                s._open, decision.saga_id, keeper, resuming=True, history=history
            )
            self._approved_from(scope, current)
            work = self._awork(scope, current, resumer)
            return await s._ending.afinish(scope, *await arun_in(scope, work))

    def _awork(
        self, scope: SagaScope, decision: Decision, resumer: Resumer | None
    ) -> Callable[[], Awaitable[Any]]:
        if decision.outcome is DecisionOutcome.APPROVED:
            if resumer is not None:
                return lambda: _maybe_await(resumer(decision))
            tool, kwargs = self._stored(decision, scope.history)

            async def stored() -> Any:
                if tool.is_async:
                    return await tool.ainvoke((), kwargs, call_id=decision.call_id)
                return await asyncio.to_thread(tool.invoke, (), kwargs, call_id=decision.call_id)

            return stored

        async def no() -> None:
            if resumer is not None:
                try:
                    await _maybe_await(resumer(decision))
                except Exception as error:
                    raise _refused(decision) from error
            raise _refused(decision)

        return no

    # -- shared --------------------------------------------------------------------------

    def _lease(self, saga_id: str) -> LeaseKeeper:
        return self.sagacity._leased(saga_id, opening=True)

    @staticmethod
    def _under_lease(keeper: LeaseKeeper, read: SagaHistory | None) -> SagaHistory | None:
        """`read`, if it is the whole journal at the lease's take; None when it must be read.

        The lease is taken at the saga's head (its last seq, read with the lease): a read
        that holds seq 1 to that head, with no gap, is what a read now would return, since
        entries are never changed or removed. Anything appended since the read (an
        approval, a rejection, another worker, a takeover's TAKEN_OVER) moved the head. A
        history already held under a lease, or a journal that does not say its head, is
        read again.
        """
        lease = keeper.lease
        if read is None or lease is None or lease.head_seq is None or read.fence is not None:
            return None
        entries = read.entries
        if len(entries) != lease.head_seq or read.last_seq != lease.head_seq:
            return None
        if any(entry.seq != seq for seq, entry in enumerate(entries, start=1)):
            return None
        return read

    @staticmethod
    def _approved_from(scope: SagaScope, decision: Decision) -> None:
        """Note that the approved call runs from the journal just read under the lease."""
        if decision.outcome is DecisionOutcome.APPROVED:
            read_under_lease(scope, decision.call_id)

    def _stored(self, decision: Decision, history: SagaHistory) -> tuple[SagaTool, dict[str, Any]]:
        """The approved call's tool and its journaled input, for a saga of plain code.

        Run again after a worker died mid-resume, the hot path replays the call from the
        journal instead of running it a second time.
        """
        tool = self.sagacity.tool(decision.tool)
        request = journaled_request(decision.saga_id, history.awaiting[decision.request_id])
        return tool, rebuilt_arguments(tool, request)

    def _journal_expiry(self, history: SagaHistory, decision: Decision) -> None:
        """Journal the expiry as a REJECTED whose source is `expiry`, and drop the request."""
        awaiting = max(history.awaiting.values(), key=lambda e: e.seq)
        request = journaled_request(history.saga_id, awaiting)
        self.sagacity.approval.decline(
            history, request, source=EXPIRY, reason=decision.reason or "expired"
        )


def _same(current: Decision, decision: Decision) -> bool:
    return (current.request_id, current.outcome) == (decision.request_id, decision.outcome) or (
        current.request_id == decision.request_id
        and DecisionOutcome.EXPIRED in (current.outcome, decision.outcome)
    )


def _refused(decision: Decision) -> RefusedByDecision:
    by = f" by {decision.decided_by!r}" if decision.decided_by else ""
    why = f": {decision.reason}" if decision.reason else ""
    return RefusedByDecision(
        f"saga {decision.saga_id!r}: request {decision.request_id} for tool {decision.tool!r} "
        f"was {decision.outcome.value}{by}{why}; the saga is compensated"
    )


async def _maybe_await(value: object) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value
