"""The saga scope: the open saga that tool calls in this context journal into.

Its approval gates are `_gates`'; running the work inside it is `_saga_run`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from sagacity import _telemetry
from sagacity._gates import Gates
from sagacity._history import SagaHistory
from sagacity._running import RunningCalls, checked_wait
from sagacity.approval._lifecycle import explain_unusable
from sagacity.errors import SagacityError, SagaStateError
from sagacity.journal import JournalEntry, JsonValue, Phase
from sagacity.journal._group import (
    RECORDS_AN_OUTCOME,
    AppendWithdrawn,
    CommittedThenCancelled,
    cancel_of,
)

if TYPE_CHECKING:
    from sagacity._owner import SagaOwner

__all__ = [
    "CurrentCall",
    "SagaScope",
    "call_var",
    "current_call",
    "current_scope",
    "scope_var",
]

T = TypeVar("T")


class CurrentCall(NamedTuple):
    """The journaled call running in this context: see `current_call`."""

    saga_id: str
    """The saga."""
    call_id: str
    """A stable idempotency key: the framework's tool-call id, or one sagacity made."""
    tool_name: str
    """The tool."""


class SagaScope:
    """One open saga, shared by every thread and task its work runs tools in.

    The context variable holds this object, never a copy of its state: frameworks copy
    contextvars into worker threads and tasks, and a `set()` made there would not reach
    the saga. Tools therefore mutate the object, under its lock.
    """

    def __init__(
        self,
        owner: SagaOwner,
        saga_id: str,
        history: SagaHistory,
        *,
        running_call_wait: float = 0.0,
    ) -> None:
        self.owner = owner
        self.saga_id = saga_id
        self.history = history
        self.lock = threading.RLock()
        self.failed = False
        """A call failed: the saga compensates when its work returns, whatever it says."""
        self.failed_before = False
        """A call failed in an earlier run: only replays run now; new calls are refused."""
        self.error: BaseException | None = None
        """The first failure that failed the saga, even if the framework swallowed it."""
        self.refusal: SagacityError | None = None
        """A check refused a call before it ran (an approval check, a replay that is in
        doubt or does not match); raised when the work returns, even if it was caught."""
        self.closed = False
        """The work returned: calls that start now are refused (a stream left unconsumed)."""
        self.suspended: set[str] = set()
        """Calls the framework paused (a control-flow exit) that have not run again since."""
        self.started_by: str | None = None
        """The principal who started the saga, as its journal records it (or as this run
        was opened with): recorded in its first entry and in every approval request."""
        self._counters: dict[str, int] = {}
        self._state = threading.Lock()
        """Guards the call counters, the first error and `_gates` alone: the loop takes it
        while a gate may hold `lock` on a worker thread."""
        self._gates: Gates | None = None
        """The saga's approval gates, on the first event loop that used them (see `gate`)."""
        self.running_call_wait = running_call_wait
        """How long the run waits for the calls its work left running (`finish_calls`)."""
        self.calls = RunningCalls(saga_id)
        """The calls of this run still running: waited for when its work returns."""
        self.left_running: list[str] = []
        """The calls still running when the run finished: in doubt (see `finish_calls`)."""

    checked_wait = staticmethod(checked_wait)

    def next_call_id(self, tool_name: str) -> str:
        """Make the next call id for a tool without a framework id: `name#1`, `name#2`, ….

        Deterministic, so work run again after a crash or a resume finds the calls
        it made before in the journal and replays them instead of running them twice.
        """
        with self._state:
            count = self._counters.get(tool_name, 0) + 1
            self._counters[tool_name] = count
        return f"{tool_name}#{count}"

    def peek_call_id(self, tool_name: str) -> str:
        """Return the id `next_call_id` will make next, without taking it."""
        with self._state:
            return f"{tool_name}#{self._counters.get(tool_name, 0) + 1}"

    def append(
        self,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
    ) -> JournalEntry:
        """Append to the saga's journal and to the scope's index of it.

        Raises:
            SagaStateError: The run is over (see `finish_calls`), or its work returned
                before this call's INTENT: nothing is journaled.
        """
        self.calls.admit(phase, tool_name, call_id, payload)
        error: BaseException | None = None
        try:
            with self.lock:
                return self.history.append(
                    self.owner.journal,
                    phase,
                    tool_name=tool_name,
                    call_id=call_id,
                    ref_seq=ref_seq,
                    payload=self._first_payload(payload),
                    expected_seq=expected_seq,
                )
        except BaseException as raised:
            error = raised
            raise
        finally:
            self.calls.landed(phase, call_id, payload, error)

    async def aappend(
        self,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
    ) -> JournalEntry:
        """`append` from async code: the event loop awaits the journal, never waits on it.

        The scope's lock is not held across the wait (it is a thread lock); the journal
        orders the saga's appends, and the history indexes them by seq. An append waits
        for a gate running off the loop (see `gate`), and a gate for the appends under way.
        A cancel that comes while it waits for a gate withdraws an intent
        (`AppendWithdrawn`: its call does not start), and is held for an outcome, which is
        known, until it is committed (`CommittedThenCancelled`), as the journal holds it.
        Refused as `append` is, once the run is over.
        """
        self.calls.admit(phase, tool_name, call_id, payload)
        error: BaseException | None = None
        try:
            return await self._aappend(
                phase, tool_name=tool_name, call_id=call_id, ref_seq=ref_seq, payload=payload
            )
        except BaseException as raised:
            error = raised
            raise
        finally:
            self.calls.landed(phase, call_id, payload, error)

    async def _aappend(
        self,
        phase: Phase,
        *,
        tool_name: str | None,
        call_id: str | None,
        ref_seq: int | None,
        payload: JsonValue,
    ) -> JournalEntry:
        gates = self._gates_here()
        cancelled = None
        if gates is not None and gates.gating:
            cancelled = await gates.settle_holding_cancels()
            if cancelled is not None and phase not in RECORDS_AN_OUTCOME:
                raise cancel_of(AppendWithdrawn(), cancelled)
        if self.started_by:  # else `_first_payload` changes nothing: no lock to take
            with self.lock:
                payload = self._first_payload(payload)
        appending = self.history.aappend(
            self.owner.journal,
            phase,
            tool_name=tool_name,
            call_id=call_id,
            ref_seq=ref_seq,
            payload=payload,
        )
        if gates is None:
            return await appending  # another loop has the gates: none waits for this one
        gates.writing += 1
        try:
            entry = await appending  # an outcome, cancelled again, is kept by the journal
        finally:
            gates.wrote()
        if cancelled is not None:
            raise cancel_of(CommittedThenCancelled(entry), cancelled)
        return entry

    # -- calls still running when the work returns ----------------------------------------

    def finish_calls(self, wait: float) -> list[str]:
        """End the run: wait for the calls it left running, then refuse any later append.

        Up to `wait` seconds pass for the calls the work started to journal an outcome;
        then every append through this scope is refused, once those under way have
        landed, so that none follows the saga's ENDED. A call still running then is in
        doubt: it fails the saga (as a call that timed out does), and its outcome, when
        it comes, is refused and logged.

        Returns:
            The ids of the calls left running, in the order they started.
        """
        return self._left_running(self.calls.finish(wait), wait)

    async def afinish_calls(self, wait: float) -> list[str]:
        """`finish_calls` from async code: the loop runs the calls' tasks meanwhile."""
        return self._left_running(await self.calls.afinish(wait), wait)

    def _left_running(self, running: set[str], wait: float) -> list[str]:
        if not running:
            return []
        calls = sorted(
            (call for call in self.history.latest_call.values() if call.intent.call_id in running),
            key=lambda call: call.intent.seq,
        )
        self.left_running = [call.intent.call_id or "" for call in calls]
        named = ", ".join(f"{c.intent.call_id!r} of tool {c.intent.tool_name!r}" for c in calls)
        _telemetry.logger.warning(
            "saga %r: call(s) %s still running %g s after the work returned: in doubt, the "
            "saga is compensated and needs attention",
            self.saga_id,
            named,
            wait,
        )
        self.fail(
            SagaStateError(
                f"saga {self.saga_id!r}: call(s) {named} were still running {wait:g} s after "
                "its work returned; they are in doubt: settle each with Sagacity.resolve"
            )
        )
        return self.left_running

    async def gate(self, step: Callable[[], T]) -> T:
        """Run `step`, a sync step of the approval gate, on a worker thread; return its result.

        The loop goes on meanwhile, but not with this saga: gates run one at a time, in
        the order they were called, each once the saga's async appends under way have
        landed, and the saga's loop-side work waits for them (`settled`). So `step` may
        read, reload and append to the history under `lock` from its thread, and sibling
        calls reach the journal in the order the framework started them.

        Cancelled while `step` runs, the task waits for it to finish (see
        `finished_off_loop`): `FinishedThenCancelled` carries what it returned.

        The gates are the first event loop's to use them, and pass to another loop once
        that one has stopped; on a loop that does not have them (a second loop running at
        once, or one a step itself runs), `step` runs here, as in sync code.
        """
        gates = self._gates_here()
        if gates is None:
            return step()
        return await gates.run(step)

    @property
    def gating(self) -> bool:
        """A gate of this saga runs or waits (see `gate`)."""
        gates = self._gates
        return gates is not None and gates.gating > 0

    async def settled(self) -> None:
        """Wait until no gate of this saga runs or waits (see `gate`).

        Loop-side work that reads the history or takes `lock` awaits this first: a gate's
        thread may hold the lock for a journal round trip, and the loop must not wait on it.
        """
        gates = self._gates_here()
        if gates is not None:
            await gates.settled()

    def _gates_here(self) -> Gates | None:
        """The saga's gates if the running loop has them, taking them if nobody does."""
        loop = asyncio.get_running_loop()
        gates = self._gates
        if gates is not None and gates.loop is loop:
            return gates
        with self._state:
            gates = self._gates
            if (
                gates is None
                or gates.loop.is_closed()  # what it counted can never end now
                or (gates.idle and not gates.loop.is_running())
            ):
                gates = self._gates = Gates(loop)
            return gates if gates.loop is loop else None

    def _first_payload(self, payload: JsonValue) -> JsonValue:
        if self.started_by and not self.history.entries and isinstance(payload, dict):
            # Who started the saga is evidence: it rides in the chain's first entry.
            payload = {**payload, "started_by": self.started_by}
        return payload

    def refuse(
        self,
        refusal: SagacityError,
        *,
        tool_name: str,
        call_id: str | None,
        reason: str,
        **details: JsonValue,
    ) -> bool:
        """Journal REFUSED for a call refused before it ran: the attempt leaves evidence.

        Returns False, journaling nothing, once the work returned: no entry follows the end.
        """
        with self.lock:
            if self.closed:
                return False
            self.append(
                Phase.REFUSED,
                tool_name=tool_name,
                call_id=call_id,
                payload={"reason": reason, **details, "error": str(refusal)},
            )
            return True

    def fail(self, error: BaseException) -> None:
        """Mark the saga failed by `error`: it compensates when its work returns."""
        with self._state:  # not `lock`: the loop marks a failure while a gate may hold that
            self.failed = True
            if self.error is None:
                self.error = error

    def close(self) -> None:
        """Mark the work returned: a call that starts later is refused, not journaled."""
        with self.lock:  # a call's decision and INTENT hold it: neither is cut in two
            self.closed = True
            self.calls.close()

    @contextlib.contextmanager
    def entered(self) -> Iterator[SagaScope]:
        """Make this the saga open in the current context for the body, then restore it.

        For an integration that runs the calls of one saga across requests (see
        `Sagacity.join`): each request's body runs inside.
        """
        token = scope_var.set(self)
        try:
            yield self
        finally:
            scope_var.reset(token)

    def refuse_if_ended(self, consequence: str) -> None:
        """Raise if another worker ended the saga since this scope read it.

        The reason comes from the journal where it has one (the approved call ran, the
        request was rejected), else it is a `SagaStateError`.
        """
        ended = self.history.ended
        if ended is None:
            return
        explain_unusable(self.history, None)
        raise SagaStateError(
            f"saga {self.saga_id!r} was ended {self.history.outcome} at seq {ended.seq} by "
            f"another worker while this run went on; {consequence}"
        )

    def refresh(self) -> None:
        """Re-read the journal: approvals may have been recorded by another process."""
        with self.lock:
            self.history.reload(self.owner.journal)


scope_var: contextvars.ContextVar[SagaScope | None] = contextvars.ContextVar(
    "sagacity_scope", default=None
)
"""The saga open in this context: set by a run of its work (`_saga_run`) or `entered`."""
call_var: contextvars.ContextVar[CurrentCall | None] = contextvars.ContextVar(
    "sagacity_call", default=None
)
"""The journaled call running in this context: set by the tool around the call."""


def current_scope() -> SagaScope | None:
    """Return the saga open in this context, if any."""
    return scope_var.get()


def current_call() -> CurrentCall | None:
    """Inside a journaled tool, return `(saga_id, call_id, tool_name)`; else None.

    Hand `call_id` to payment and mail APIs as their idempotency key: it is the same
    when the call is retried, replayed or resumed.
    """
    return call_var.get()
