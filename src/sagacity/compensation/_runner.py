"""The registry of declared compensations, and the walk that runs them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from sagacity._classify import error_json
from sagacity._history import CallState, SagaHistory, payload_of
from sagacity.compensation._context import CallRef, CompensationContext, CompensationReport
from sagacity.journal import JournalEntry, Phase, SideEffectJournal

__all__ = ["Compensation", "CompensationRegistry", "CompensationRunner"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Compensation:
    """A compensation bound to its tool."""

    tool_name: str
    """The tool it undoes."""
    func: Callable[..., Any]
    """The callable: no arguments, or one `CompensationContext`; sync or async."""
    takes_context: bool
    """Whether `func` takes the context."""

    def call(self, context: CompensationContext) -> Any:
        """Call it, returning what it returns (an awaitable, for an async one)."""
        return self.func(context) if self.takes_context else self.func()


class CompensationRegistry:
    """Compensations by tool name, filled by `Sagacity.wrap`."""

    def __init__(self) -> None:
        self._by_tool: dict[str, Compensation] = {}

    def register(self, compensation: Compensation) -> None:
        self._by_tool[compensation.tool_name] = compensation

    def get(self, tool_name: str) -> Compensation | None:
        return self._by_tool.get(tool_name)


@dataclasses.dataclass(slots=True)
class _Plan:
    """The walk decided from the journal, before anything runs."""

    to_run: list[tuple[JournalEntry, JournalEntry, Compensation | None]]
    """(EXECUTED, its INTENT, the compensation or None if not registered here), reverse seq."""
    skipped: list[CallRef]
    in_doubt: list[CallRef]


class CompensationRunner:
    """Walks a saga's EXECUTED calls in reverse seq and runs what is not yet compensated."""

    def __init__(self, journal: SideEffectJournal, registry: CompensationRegistry) -> None:
        self._journal = journal
        self._registry = registry

    def run(self, history: SagaHistory) -> CompensationReport:
        """Run the walk; an async compensation is run to completion on a fresh loop."""
        plan = self._plan(history)
        for executed, intent, compensation in plan.to_run:
            error = _not_registered(executed) if compensation is None else None
            if compensation is not None:
                try:
                    outcome = compensation.call(_context(history.saga_id, executed, intent))
                    if inspect.isawaitable(outcome):
                        _run_to_completion(outcome)
                except Exception as exc:
                    error = _describe(exc)
            self._record(history, executed, error)
        return self._report(history, plan)

    async def arun(self, history: SagaHistory) -> CompensationReport:
        """Run the walk, awaiting async compensations."""
        plan = self._plan(history)
        for executed, intent, compensation in plan.to_run:
            error = _not_registered(executed) if compensation is None else None
            if compensation is not None:
                try:
                    outcome = compensation.call(_context(history.saga_id, executed, intent))
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception as exc:
                    error = _describe(exc)
            self._record(history, executed, error)
        return self._report(history, plan)

    def _record(self, history: SagaHistory, executed: JournalEntry, error: str | None) -> None:
        if error is None:
            entry = self._journal.append(
                history.saga_id,
                Phase.COMPENSATED,
                tool_name=executed.tool_name,
                call_id=executed.call_id,
                ref_seq=executed.seq,
            )
        else:
            entry = self._journal.append(
                history.saga_id,
                Phase.COMPENSATION_FAILED,
                tool_name=executed.tool_name,
                call_id=executed.call_id,
                ref_seq=executed.seq,
                payload={"error": error},
            )
        history.add(entry)

    def _plan(self, history: SagaHistory) -> _Plan:
        to_run: list[tuple[JournalEntry, JournalEntry, Compensation | None]] = []
        skipped: list[CallRef] = []
        in_doubt: list[CallRef] = []
        for call in sorted(history.calls.values(), key=_outcome_seq, reverse=True):
            intent = call.intent
            if history.may_have_run(call):
                in_doubt.append(_ref(intent, _unknown_reason(call.outcome)))
                continue
            if not call.executed or call.compensated:
                continue
            assert call.outcome is not None
            if payload_of(intent).get("reversibility") == "IRREVERSIBLE":
                skipped.append(_ref(call.outcome))
                continue
            to_run.append((call.outcome, intent, self._registry.get(intent.tool_name or "")))
        return _Plan(to_run=to_run, skipped=skipped, in_doubt=in_doubt)

    @staticmethod
    def _report(history: SagaHistory, plan: _Plan) -> CompensationReport:
        compensated: list[CallRef] = []
        failed: list[CallRef] = []
        done = [c for c in history.calls.values() if c.compensation is not None]
        for call in sorted(done, key=lambda c: c.compensation.seq if c.compensation else 0):
            assert call.outcome is not None
            assert call.compensation is not None
            if call.compensated:
                compensated.append(_ref(call.outcome))
            else:
                failed.append(_ref(call.outcome, payload_of(call.compensation).get("error")))
        return CompensationReport(
            saga_id=history.saga_id,
            compensated=compensated,
            failed=failed,
            skipped=plan.skipped,
            in_doubt=plan.in_doubt,
        )


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable


def _run_to_completion(awaitable: Awaitable[Any]) -> None:
    """Run an async compensation from the sync walk, even if a loop runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # A private loop, never made the thread's current one: asyncio.run() would unset
        # a loop the caller keeps for reuse (PydanticAI's run_sync does).
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_await(awaitable))
        finally:
            loop.close()
        return
    # asyncio.run() refuses to nest in a running loop: give the coroutine a loop of its
    # own on another thread, and wait for it (the sync walk blocks either way).
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(context.run, asyncio.run, _await(awaitable)).result()


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


def _not_registered(executed: JournalEntry) -> str:
    return (
        f"no compensation for tool {executed.tool_name!r} is registered in this process; "
        "wrap the tools with Sagacity.wrap and run Sagacity.compensate again"
    )


def _describe(exc: BaseException) -> str:
    error = error_json(exc)
    return f"{error['type']}: {error['message']}"
