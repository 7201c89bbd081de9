"""What a durable engine's step does with the journal: one call, the end, the decision.

Temporal activities and DBOS steps run these, each joining its saga by id (the engine's
workflow id): take the saga's lease, read the journal, act, let the lease go. Nothing is
needed in memory between steps, so the steps of one saga may run in any process that
shares the journal. A call may keep the lease a moment (`linger`) for the saga's next
step in the same process, which then adopts it instead of taking it. The engines' own
modules turn the outcomes into their errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import Any

from sagacity.adapter import (
    DecisionLog,
    SagaHistory,
    decisions_in,
    pausing_as,
    payload_of,
    rebuild_arguments,
)
from sagacity.approval import ApprovalRequest
from sagacity.errors import InDoubtError, SagacityError, SagaNotFoundError, SerializationError
from sagacity.journal import JsonValue, to_json
from sagacity.saga import Sagacity, SagaResult
from sagacity.tools import SagaTool
from sagacity.worker import DecisionOutcome

__all__ = [
    "CallNotRunError",
    "Ended",
    "Ran",
    "compensate_saga",
    "complete_saga",
    "decision_of",
    "run_call",
]


class CallNotRunError(SagacityError):
    """The step was given a call it cannot run: another tool's, or an input that does not fit."""


@dataclasses.dataclass(frozen=True)
class Ran:
    """What a call came to: its result (JSON), or the approval request it waits on."""

    call_id: str
    result: JsonValue = None
    request_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Ended:
    """How the saga ended, from the journal, and what a human should know."""

    outcome: str
    detail: str = ""


def run_call(
    sagacity: Sagacity,
    saga_id: str,
    tool: SagaTool,
    *,
    call_id: str,
    arguments: dict[str, Any],
    approved: bool,
    resumer: str,
    linger: float = 0.0,
) -> Ran:
    """Run one call of `tool` in saga `saga_id` through the journal.

    The same `call_id` is the same call: journaled EXECUTED, it replays its result; with
    an INTENT and no outcome, it raises `InDoubtError` and is never run again blindly.
    `approved`: a human approved the call's request, so it runs with the input of the
    newest request of the call (an edited input included), not with `arguments`.

    A call in doubt whose tool declares a reconciler is reconciled first (the verdict
    journaled): landed, its result is replayed; did not land, it runs; unknown, it stays
    in doubt.

    `linger`: seconds the saga's lease stays parked after a call that ran (or replayed),
    for the saga's next step in this process (`Sagacity.join`); a call that raised, or
    that waits for a human, lets it go at once.

    Raises:
        CallNotRunError: The input does not fit the tool, or the approved request is not
            in the journal.
        SagaBusyError, LeaseLostError: Another worker holds the saga: try again.
        InDoubtError: The call may have run and nothing settled it; it is not run.
        SagacityError: Another refusal (an approval check); nothing ran.
        Exception: What the tool raised, journaled FAILED.
    """
    run = functools.partial(
        _run,
        sagacity,
        saga_id,
        tool,
        call_id=call_id,
        arguments=arguments,
        approved=approved,
        linger=linger,
    )
    try:
        with pausing_as(resumer):
            return run()
    except InDoubtError:
        if not sagacity.has_reconciler(tool.name):
            raise
    sagacity.reconcile(saga_id)  # read-only towards the world: it asks, never acts
    with pausing_as(resumer):
        return run()


def _run(
    sagacity: Sagacity,
    saga_id: str,
    tool: SagaTool,
    *,
    call_id: str,
    arguments: dict[str, Any],
    approved: bool,
    linger: float,
) -> Ran:
    asked: list[ApprovalRequest] = []
    with sagacity.join(saga_id, linger=linger) as scope, scope.entered():
        kwargs = _arguments(tool, scope.history, call_id, arguments, approved=approved)
        if tool.is_async:
            result = asyncio.run(
                tool.ainvoke((), kwargs, call_id=call_id, on_approval_needed=asked.append)
            )
        else:
            result = tool.invoke((), kwargs, call_id=call_id, on_approval_needed=asked.append)
    if asked:
        return Ran(call_id, request_id=asked[0].request_id)
    return Ran(
        call_id, result=to_json(result, where=f"saga {saga_id!r}: tool {tool.name!r} result")
    )


def _arguments(
    tool: SagaTool,
    history: SagaHistory,
    call_id: str,
    arguments: dict[str, Any],
    *,
    approved: bool,
) -> dict[str, Any]:
    where = f"saga {history.saga_id!r}: tool {tool.name!r} call {call_id!r}"
    if approved:
        asked = history.asked.get(call_id)
        if asked is None:
            raise CallNotRunError(f"{where}: the journal has no approval request for the call")
        arguments = payload_of(asked).get("input") or {}
    try:
        return rebuild_arguments(tool.func, arguments, tool_name=tool.name)
    except SerializationError as error:
        raise CallNotRunError(f"{where}: {error}") from error


def complete_saga(sagacity: Sagacity, saga_id: str) -> Ended:
    """End a saga whose workflow returned: COMPLETED, unless a call failed or is in doubt.

    A failed call, or one that may have run with no outcome known, compensates the saga
    instead (those in doubt listed, never undone). An ended saga answers its outcome.
    """
    history = SagaHistory.of(saga_id, sagacity.history(saga_id))
    if history.ended is not None:
        return Ended(outcome=str(history.outcome))
    if history.has_failed_call() or any(
        history.may_have_run(call) for call in history.calls.values()
    ):
        return _ended(sagacity.compensate(saga_id))
    return _ended(sagacity.saga(saga_id, _nothing))


def compensate_saga(sagacity: Sagacity, saga_id: str) -> Ended:
    """Run the saga's compensation walk: in reverse, each compensation at most once.

    Run again (a retried step, a new worker), the walk skips what the journal says is
    compensated already.
    """
    try:
        return _ended(sagacity.compensate(saga_id))
    except SagaNotFoundError:
        return Ended(outcome="COMPENSATED", detail="no call of the saga was journaled")


_ANSWERS = {
    DecisionOutcome.APPROVED: "approved",
    DecisionOutcome.REJECTED: "rejected",
    DecisionOutcome.EXPIRED: "expired",
}


def decision_of(sagacity: Sagacity, saga_id: str, call_id: str) -> str:
    """approved, rejected, expired or pending: the decision on the call's newest request.

    One read of the journal, counted as the approval check counts. An edited request
    is pending: its replacement, the call's newest request now, waits for its own
    approvals.
    """
    history = SagaHistory.of(saga_id, sagacity.history(saga_id))
    asked = history.asked.get(call_id)
    if asked is None:
        return "pending"
    request_id = payload_of(asked).get("request_id")
    approval = sagacity.approval
    log = DecisionLog(policy=approval.policy, declared=dict(approval.declared_approvers))
    found = [d for d in decisions_in(history, log, sagacity.now()) if d.request_id == request_id]
    return _ANSWERS.get(found[-1].outcome, "pending") if found else "pending"


def _nothing() -> None:
    """The work of a saga ended by its workflow: its calls ran in earlier steps."""


def _ended(result: SagaResult) -> Ended:
    detail = "" if result.compensation is None else str(result.compensation)
    if result.error is not None:
        failure = f"{type(result.error).__name__}: {result.error}"
        detail = f"{failure}; {detail}" if detail else failure
    return Ended(outcome=result.outcome.value, detail=detail)
