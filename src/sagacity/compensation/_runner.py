"""The registry of declared compensations, and the walk that runs them.

Every compensation the walk calls is journaled like a tool call: COMPENSATING (its
intent, committed before it is called), then COMPENSATED or COMPENSATION_FAILED. A
COMPENSATING with no outcome after it means the process stopped during the compensation:
the next walk lists it in doubt, or, if it was declared idempotent, runs it again.

A later walk (`compensate`, `reject`) in a process that does not have a compensation (a
CLI or server that wraps no tools) journals nothing for it: it stops there, before the
compensation it cannot call, and leaves it and every one after it in the walk's order to
a process that wraps the tools (`CompensationReport.waiting`). The walk that follows a
run's own failure runs where the work ran, with its tools: a compensation missing there
is missing, and journaled COMPENSATION_FAILED.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import dataclasses
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from sagacity import _telemetry
from sagacity._classify import error_json
from sagacity._history import OUTCOME_UNKNOWN, CallState, SagaHistory, payload_of
from sagacity._ids import require_name
from sagacity.compensation._context import CallRef, CompensationContext, CompensationReport
from sagacity.errors import SagaStateError
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal

__all__ = ["Compensation", "CompensationRegistry", "CompensationRunner"]

NOT_RUN = "not_run"
"""The COMPENSATION_FAILED kind of a compensation a human found had not taken effect."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Compensation:
    """A compensation bound to its tool."""

    tool_name: str
    """The tool it undoes."""
    func: Callable[..., Any]
    """The callable: no arguments, or one `CompensationContext`; sync or async."""
    takes_context: bool
    """Whether `func` takes the context."""
    idempotent: bool = False
    """Safe to run again with the same `ctx.call_id`: a walk that finds it started with
    its outcome unknown runs it again instead of leaving it in doubt."""
    timeout: float | None = None
    """Seconds the walk waits for it; None: no bound."""

    def call(self, context: CompensationContext) -> Any:
        """Call it, returning what it returns (an awaitable, for an async one)."""
        return self.func(context) if self.takes_context else self.func()

    @property
    def is_async(self) -> bool:
        """Whether calling it returns a coroutine (an `async def`, or an object's one)."""
        func = self.func
        return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
            getattr(func, "__call__", None)  # noqa: B004 - the object's own __call__
        )


class CompensationRegistry:
    """Compensations by tool name, filled by `Sagacity.wrap`."""

    def __init__(self) -> None:
        self._by_tool: dict[str, Compensation] = {}
        self._reserved: dict[str, str] = {}

    def register(self, compensation: Compensation) -> None:
        self._by_tool[compensation.tool_name] = compensation

    def reserve(self, tool_name: str, owner: str) -> None:
        """Keep `tool_name` for `owner` (a workflow's stage): `wrap` refuses the name."""
        self._reserved[tool_name] = owner

    def reserved_by(self, tool_name: str) -> str | None:
        """Who keeps `tool_name`, if anyone (see `reserve`)."""
        return self._reserved.get(tool_name)

    def get(self, tool_name: str) -> Compensation | None:
        return self._by_tool.get(tool_name)


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    """One compensation the walk will call."""

    executed: JournalEntry
    """The EXECUTED entry it undoes."""
    intent: JournalEntry
    """That call's INTENT: its input."""
    compensation: Compensation | None
    """None if no compensation for the tool is registered in this process."""
    attempt: int
    """This attempt's number, journaled in its COMPENSATING entry."""


@dataclasses.dataclass(slots=True)
class _Plan:
    """The walk decided from the journal, before anything runs."""

    to_run: list[_Step]
    """Reverse seq of the EXECUTED entries."""
    skipped: list[CallRef]
    waiting: list[CallRef] = dataclasses.field(default_factory=list)
    """What the walk left to a process that has the compensations (see `_stop`)."""


class _TimedOut(Exception):
    """The walk stopped waiting for a compensation: its outcome is unknown."""


class CompensationRunner:
    """Walks a saga's EXECUTED calls in reverse seq and runs what is not yet compensated."""

    def __init__(self, journal: SideEffectJournal, registry: CompensationRegistry) -> None:
        self._journal = journal
        self._registry = registry

    def run(self, history: SagaHistory, *, ran_here: bool = False) -> CompensationReport:
        """Run the walk; an async compensation is run to completion on a fresh loop.

        `ran_here`: this process ran the work that failed, so it is where the tools are;
        a compensation it lacks is journaled COMPENSATION_FAILED instead of left waiting.
        """
        plan = self._plan(history)
        for step in self._steps(history, plan):
            if step.compensation is None and ran_here:
                self._record(history, step.executed, {"error": _not_registered(step.executed)})
                continue
            if step.compensation is None:
                self._stop(history, plan, step)
                break
            context = _context(history.saga_id, step.executed, step.intent)
            self._begin(history, step)
            self._record(history, step.executed, _run_sync(step.compensation, context))
        return self._report(history, plan)

    async def arun(self, history: SagaHistory, *, ran_here: bool = False) -> CompensationReport:
        """Run the walk, awaiting async compensations and the journal's commits (see `run`)."""
        plan = self._plan(history)
        for step in self._steps(history, plan):
            if step.compensation is None and ran_here:
                failure: dict[str, JsonValue] = {"error": _not_registered(step.executed)}
                await self._arecord(history, step.executed, failure)
                continue
            if step.compensation is None:
                self._stop(history, plan, step)  # reads only what the walk holds
                break
            context = _context(history.saga_id, step.executed, step.intent)
            await self._abegin(history, step)
            outcome = await _run_async(step.compensation, context)
            await self._arecord(history, step.executed, outcome)
        return self._report(history, plan)

    def _stop(self, history: SagaHistory, plan: _Plan, step: _Step) -> None:
        """Stop the walk before a compensation this process does not have, journaling nothing.

        Journaling its failure would be false (nothing was tried) and permanent to read:
        the compensation exists where the tools are wrapped. It and every compensation
        still to run after it wait for a process that has them, in the same reverse order.
        """
        missing = step.executed
        plan.waiting = [
            _ref(later.executed, _waiting_reason(later.executed, missing))
            for later in self._plan(history).to_run
        ]
        _telemetry.logger.warning(
            "saga %r: no compensation for tool %r (call %r) is registered in this process; "
            "the walk stopped there and left %d compensation(s) to a process that wraps the "
            "tools",
            history.saga_id,
            missing.tool_name,
            missing.call_id,
            len(plan.waiting),
        )

    def resolve(
        self,
        history: SagaHistory,
        call_id: str,
        *,
        compensated: bool,
        by: str,
        reason: str | None = None,
    ) -> JournalEntry:
        """Journal a human's finding on a compensation in doubt: it took effect or not.

        COMPENSATED with `resolved_by`, or COMPENSATION_FAILED of kind `not_run`, which the
        next walk runs again.

        Raises:
            SagaStateError: No compensation of the call is in doubt.
        """
        require_name(by, "by")
        call = next(
            (
                c
                for c in history.calls.values()
                if c.intent.call_id == call_id and c.executed and _compensation_in_doubt(c)
            ),
            None,
        )
        if call is None or call.outcome is None:
            raise SagaStateError(
                f"saga {history.saga_id!r}: no compensation of call {call_id!r} is in doubt; "
                "only a compensation that started with its outcome unknown can be resolved"
            )
        executed = call.outcome
        payload: dict[str, JsonValue] = {"resolved_by": by}
        phase = Phase.COMPENSATED
        if not compensated:
            phase = Phase.COMPENSATION_FAILED
            payload = {"kind": NOT_RUN, "error": None, "resolved_by": by}
        if reason is not None:
            payload["reason"] = reason
        return history.append(
            self._journal,
            phase,
            tool_name=executed.tool_name,
            call_id=executed.call_id,
            ref_seq=executed.seq,
            payload=payload,
        )

    def _begin(self, history: SagaHistory, step: _Step) -> None:
        """Journal the compensation's intent; it is called only once this is committed."""
        history.append(
            self._journal,
            Phase.COMPENSATING,
            tool_name=step.executed.tool_name,
            call_id=step.executed.call_id,
            ref_seq=step.executed.seq,
            payload={"attempt": step.attempt},
        )
        self._begun(history, step)

    async def _abegin(self, history: SagaHistory, step: _Step) -> None:
        """`_begin` from async code: the loop awaits the commit."""
        await history.aappend(
            self._journal,
            Phase.COMPENSATING,
            tool_name=step.executed.tool_name,
            call_id=step.executed.call_id,
            ref_seq=step.executed.seq,
            payload={"attempt": step.attempt},
        )
        self._begun(history, step)

    def _begun(self, history: SagaHistory, step: _Step) -> None:
        tracing = _telemetry.current
        if tracing is not None:
            tracing.compensation_started(history.saga_id, step.executed)

    def _record(
        self, history: SagaHistory, executed: JournalEntry, failure: dict[str, JsonValue] | None
    ) -> None:
        history.append(
            self._journal,
            Phase.COMPENSATED if failure is None else Phase.COMPENSATION_FAILED,
            tool_name=executed.tool_name,
            call_id=executed.call_id,
            ref_seq=executed.seq,
            payload=failure,
        )
        self._recorded(history, executed, failure)

    async def _arecord(
        self, history: SagaHistory, executed: JournalEntry, failure: dict[str, JsonValue] | None
    ) -> None:
        """`_record` from async code: the loop awaits the commit."""
        await history.aappend(
            self._journal,
            Phase.COMPENSATED if failure is None else Phase.COMPENSATION_FAILED,
            tool_name=executed.tool_name,
            call_id=executed.call_id,
            ref_seq=executed.seq,
            payload=failure,
        )
        self._recorded(history, executed, failure)

    def _recorded(
        self, history: SagaHistory, executed: JournalEntry, failure: dict[str, JsonValue] | None
    ) -> None:
        if failure is not None:
            _telemetry.logger.warning(
                "saga %r: the compensation of call %r (tool %r, seq %d) failed: %s",
                history.saga_id,
                executed.call_id,
                executed.tool_name,
                executed.seq,
                failure.get("error"),
            )
        tracing = _telemetry.current
        if tracing is not None:
            tracing.compensation_ended(history.saga_id, executed, failure is not None)

    def _steps(self, history: SagaHistory, plan: _Plan) -> Iterator[_Step]:
        """The plan's steps, then those of calls that executed while they ran, once each.

        A call the work left running (a task of an `asyncio.gather` that raised at the
        first failure, a thread) can record EXECUTED during the walk: it is undone too,
        after the others, instead of being left live under a COMPENSATED saga. A call
        still running when the walk ends is in doubt (`_report`).
        """
        attempted: set[int] = set()
        steps = plan.to_run
        while steps:
            for step in steps:
                attempted.add(step.executed.seq)
                yield step
            later = self._plan(history)
            plan.skipped += [ref for ref in later.skipped if ref not in plan.skipped]
            steps = [step for step in later.to_run if step.executed.seq not in attempted]

    def _plan(self, history: SagaHistory) -> _Plan:
        to_run: list[_Step] = []
        skipped: list[CallRef] = []
        for call in sorted(history.calls.values(), key=_outcome_seq, reverse=True):
            if history.may_have_run(call) or not call.executed or call.compensated:
                continue  # in doubt (listed by the report), nothing to undo, or undone
            assert call.outcome is not None
            intent = call.intent
            if payload_of(intent).get("reversibility") == "IRREVERSIBLE":
                skipped.append(_ref(call.outcome))
                continue
            compensation = self._registry.get(intent.tool_name or "")
            if call.compensation_in_doubt and (compensation is None or not compensation.idempotent):
                continue  # it may have taken effect: listed in doubt, never repeated silently
            to_run.append(_Step(call.outcome, intent, compensation, call.compensation_attempts + 1))
        return _Plan(to_run=to_run, skipped=skipped)

    @staticmethod
    def _report(history: SagaHistory, plan: _Plan) -> CompensationReport:
        compensated: list[CallRef] = []
        failed: list[CallRef] = []
        waiting = {ref.seq for ref in plan.waiting}
        done = [c for c in history.calls.values() if c.compensation is not None]
        for call in sorted(done, key=lambda c: c.compensation.seq if c.compensation else 0):
            assert call.outcome is not None
            assert call.compensation is not None
            if call.compensated:
                compensated.append(_ref(call.outcome))
            elif not call.compensation_in_doubt:  # failed before, even if waiting now
                failed.append(_ref(call.outcome, _failure_text(call.compensation)))
        skipped = {ref.seq for ref in plan.skipped} | waiting
        in_doubt: list[CallRef] = []
        for call in sorted(history.calls.values(), key=_outcome_seq, reverse=True):
            if history.may_have_run(call):
                in_doubt.append(_ref(call.intent, _unknown_reason(call.outcome)))
            elif call.executed and _compensation_in_doubt(call):
                assert call.outcome is not None
                in_doubt.append(_ref(call.outcome, _compensation_reason(call)))
            elif call.executed and call.compensating is None and call.compensation is None:
                assert call.outcome is not None
                if call.outcome.seq not in skipped:
                    in_doubt.append(_ref(call.outcome, _LATE))
        return CompensationReport(
            saga_id=history.saga_id,
            compensated=compensated,
            failed=failed,
            skipped=plan.skipped,
            in_doubt=in_doubt,
            waiting=plan.waiting,
        )


_LATE = (
    "it executed after the compensation walk had planned its undos, and was not undone; "
    "compensate the saga again to undo it"
)
"""Why an executed call the walk never reached is listed in doubt: it is live."""


def _compensation_in_doubt(call: CallState) -> bool:
    return not call.compensated and call.compensation_in_doubt


def _run_sync(compensation: Compensation, context: CompensationContext) -> dict[str, Any] | None:
    """Call a compensation from the sync walk; None if it succeeded, else the failure."""
    timeout = compensation.timeout
    try:
        if timeout is None:
            _call_to_completion(compensation, context)
        elif compensation.is_async:
            _run_to_completion(compensation.call(context), timeout)
        else:
            _wait_for_thread(_start_thread(compensation, context), timeout)
    except _TimedOut as timed_out:
        return {"error": f"TimeoutError: {timed_out}", "kind": OUTCOME_UNKNOWN}
    except Exception as exc:
        return _failure(exc)
    return None


async def _run_async(
    compensation: Compensation, context: CompensationContext
) -> dict[str, Any] | None:
    """Call a compensation from the async walk; None if it succeeded, else the failure."""
    timeout = compensation.timeout
    try:
        if timeout is None:
            outcome = compensation.call(context)
            if inspect.isawaitable(outcome):
                await outcome
        elif compensation.is_async:
            await _bounded(compensation.call(context), timeout)
        else:
            await _await_thread(_start_thread(compensation, context), timeout)
    except _TimedOut as timed_out:
        return {"error": f"TimeoutError: {timed_out}", "kind": OUTCOME_UNKNOWN}
    except Exception as exc:
        return _failure(exc)
    return None


def _failure(exc: Exception) -> dict[str, Any]:
    """A compensation raised. A timeout of its own leaves its outcome unknown, as for a tool."""
    failure: dict[str, Any] = {"error": _describe(exc)}
    if isinstance(exc, TimeoutError):
        failure["kind"] = OUTCOME_UNKNOWN
    return failure


def _call_to_completion(compensation: Compensation, context: CompensationContext) -> None:
    outcome = compensation.call(context)
    if inspect.isawaitable(outcome):
        _run_to_completion(outcome, None)


def _start_thread(
    compensation: Compensation, context: CompensationContext
) -> concurrent.futures.Future[None]:
    """Run a sync compensation in a daemon thread of its own, with the caller's context.

    A sync function cannot be stopped: past its timeout it is left running. A daemon
    thread, unlike an executor's, does not hold up the interpreter's exit meanwhile.
    """
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    variables = contextvars.copy_context()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            variables.run(_call_to_completion, compensation, context)
        except BaseException as exc:  # handed to the walk, which re-raises it
            future.set_exception(exc)
        else:
            future.set_result(None)

    threading.Thread(
        target=target, name=f"sagacity-compensation-{compensation.tool_name}", daemon=True
    ).start()
    return future


def _left_running(timeout: float) -> _TimedOut:
    return _TimedOut(
        f"compensation timed out after {timeout:g}s; it was left running in its worker thread"
    )


def _wait_for_thread(future: concurrent.futures.Future[None], timeout: float) -> None:
    done, _ = concurrent.futures.wait([future], timeout=timeout)
    if not done:
        raise _left_running(timeout)
    future.result()


async def _await_thread(future: concurrent.futures.Future[None], timeout: float) -> None:
    waiting = asyncio.wrap_future(future)
    done, _ = await asyncio.wait([waiting], timeout=timeout)
    if not done:
        # Whatever the thread ends with later is nobody's to read: do not log it as lost.
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise _left_running(timeout)
    waiting.result()


async def _bounded(awaitable: Awaitable[Any], timeout: float | None) -> None:
    """Await `awaitable`, cancelling it after `timeout` seconds (None: no bound)."""
    if timeout is None:
        await awaitable
        return
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            await awaitable
    except TimeoutError:
        if not scope.expired():
            raise  # the compensation's own timeout
    if scope.expired():  # also when it swallowed the cancellation and returned
        raise _TimedOut(f"compensation timed out after {timeout:g}s and was cancelled")


def _run_to_completion(awaitable: Awaitable[Any], timeout: float | None) -> None:
    """Run an async compensation from the sync walk, even if a loop runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # A private loop, never made the thread's current one: asyncio.run() would unset
        # a loop the caller keeps for reuse (PydanticAI's run_sync does).
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_bounded(awaitable, timeout))
        finally:
            loop.close()
        return
    # asyncio.run() refuses to nest in a running loop: give the coroutine a loop of its
    # own on another thread, and wait for it (the sync walk blocks either way).
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(context.run, asyncio.run, _bounded(awaitable, timeout)).result()


def _context(saga_id: str, executed: JournalEntry, intent: JournalEntry) -> CompensationContext:
    raw_input = payload_of(intent).get("input")
    # Copies: a compensation that edits what it is given must not edit the journal's
    # entries (the in-memory journal hands out the objects it hashed).
    return CompensationContext(
        saga_id=saga_id,
        tool_name=executed.tool_name or "",
        call_id=executed.call_id or "",
        input=copy.deepcopy(raw_input) if isinstance(raw_input, dict) else {},
        result=copy.deepcopy(payload_of(executed).get("result")),
    )


def _outcome_seq(call: CallState) -> int:
    return call.outcome.seq if call.outcome is not None else call.intent.seq


def _ref(entry: JournalEntry, error: Any = None) -> CallRef:
    return CallRef(
        seq=entry.seq,
        tool_name=entry.tool_name or "",
        call_id=entry.call_id or "",
        error=None if error is None else str(error),
    )


def _unknown_reason(outcome: JournalEntry | None) -> str:
    if outcome is None:
        return "INTENT with no outcome: the process may have stopped during the call"
    what = "outcome unknown"
    kind = payload_of(outcome).get("kind")
    if kind == "control_flow":
        what = "the framework left the tool mid-call, and did not run it again"
    elif kind == "retryable":
        what = "the tool raised asking for a retry after it started, and no retry succeeded"
    error = payload_of(outcome).get("error")
    if isinstance(error, dict):
        return f"{what}: {error.get('type')}: {error.get('message')}"
    return what


def _compensation_reason(call: CallState) -> str:
    """Why a compensation is in doubt, for the report."""
    if call.compensation_started:
        assert call.compensating is not None
        return (
            f"compensation started (COMPENSATING at seq {call.compensating.seq}) and its "
            "outcome is unknown: the process may have stopped during it"
        )
    assert call.compensation is not None
    return f"compensation outcome unknown: {payload_of(call.compensation).get('error')}"


def _failure_text(entry: JournalEntry) -> Any:
    payload = payload_of(entry)
    if payload.get("kind") == NOT_RUN:
        return (
            f"resolved as not compensated by {payload.get('resolved_by')!r}; "
            "the next walk runs it again"
        )
    return payload.get("error")


def _not_registered(executed: JournalEntry) -> str:
    return (
        f"no compensation for tool {executed.tool_name!r} is registered in the process that "
        "ran the saga's work; declare one with compensable(by=...) and run "
        "Sagacity.compensate where it is wrapped"
    )


def _waiting_reason(executed: JournalEntry, missing: JournalEntry) -> str:
    if executed.seq == missing.seq:
        return f"no compensation for tool {executed.tool_name!r} is registered in this process"
    return (
        f"waits for the compensation of call {missing.call_id!r} (tool "
        f"{missing.tool_name!r}), which runs before it"
    )


def _describe(exc: BaseException) -> str:
    error = error_json(exc)
    return f"{error['type']}: {error['message']}"
