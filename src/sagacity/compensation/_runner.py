"""The walk that runs a saga's compensations, newest first, and journals each.

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

import copy
import dataclasses
from collections.abc import Iterator

from sagacity import _telemetry
from sagacity._history import SagaHistory, payload_of
from sagacity.compensation._calling import run_async, run_sync
from sagacity.compensation._context import CallRef, CompensationContext, CompensationReport
from sagacity.compensation._registry import Compensation, CompensationRegistry
from sagacity.compensation._report import outcome_seq, ref, report
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal

__all__ = ["Compensation", "CompensationRegistry", "CompensationRunner"]


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
            self._record(history, step.executed, run_sync(step.compensation, context))
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
            outcome = await run_async(step.compensation, context)
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
            ref(later.executed, _waiting_reason(later.executed, missing))
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
            tracing.compensation_ended(history.saga_id, executed, failure)

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
            plan.skipped += [item for item in later.skipped if item not in plan.skipped]
            steps = [step for step in later.to_run if step.executed.seq not in attempted]

    def _plan(self, history: SagaHistory) -> _Plan:
        to_run: list[_Step] = []
        skipped: list[CallRef] = []
        for call in sorted(history.calls.values(), key=outcome_seq, reverse=True):
            if history.may_have_run(call) or not call.executed or call.compensated:
                continue  # in doubt (listed by the report), nothing to undo, or undone
            assert call.outcome is not None
            intent = call.intent
            if payload_of(intent).get("reversibility") == "IRREVERSIBLE":
                skipped.append(ref(call.outcome))
                continue
            compensation = self._registry.get(intent.tool_name or "")
            if call.compensation_in_doubt and (compensation is None or not compensation.idempotent):
                continue  # it may have taken effect: listed in doubt, never repeated silently
            to_run.append(_Step(call.outcome, intent, compensation, call.compensation_attempts + 1))
        return _Plan(to_run=to_run, skipped=skipped)

    @staticmethod
    def _report(history: SagaHistory, plan: _Plan) -> CompensationReport:
        return report(history, skipped=plan.skipped, waiting=plan.waiting)


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
