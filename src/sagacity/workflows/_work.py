"""The work a workflow run's saga runs: the start call, then each stage in order.

The saga core does the rest: a stage that ran is replayed from the journal, a gated
stage asks for (or checks) its approval, a failure marks the saga for compensation.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from sagacity._classify import error_json
from sagacity._decisions import pausing_as
from sagacity._history import payload_of
from sagacity._scope import SagaScope, current_scope
from sagacity.approval import ApprovalRequest
from sagacity.errors import SerializationError
from sagacity.journal import JsonValue, to_json
from sagacity.journal._rebuild import from_json
from sagacity.workflows._declare import CheckContext, CheckResult, StageCheck
from sagacity.workflows._definition import START_CALL, StageDefinition, WorkflowDefinition
from sagacity.workflows._state import CHECK_FAILED, CheckFailedError

__all__ = ["WORKFLOW", "awork_of", "work_of"]

WORKFLOW = "workflow"
"""The resumer name a run's gates journal: `sagacity.Worker` continues the run with the
runtime that has its workflow registered."""

_PAUSED = object()
"""What a gated stage's call returns when the run pauses at its gate."""


def work_of(
    definition: WorkflowDefinition, run_id: str, input_json: JsonValue
) -> Callable[[], Any]:
    """The work of run `run_id`: returns the last output, or None when it paused."""

    def work() -> Any:
        with pausing_as(WORKFLOW):
            return steps()

    def steps() -> Any:
        scope = _scope(run_id)
        definition.start.invoke((input_json,), call_id=START_CALL)
        value_json: JsonValue = input_json
        outputs: dict[str, JsonValue] = {}
        for declared in definition.stages:
            if declared.checks and not _executed(scope, declared):
                context = _context(definition, declared, run_id, value_json, outputs)
                for stage_check in declared.checks:
                    try:
                        verdict: object = stage_check.check(context)
                    except Exception as error:  # a check that cannot say ok fails closed
                        verdict = error
                    _judge(scope, declared, stage_check, verdict)
            value = _stage_value(definition, declared, value_json)
            result = declared.tool.invoke(
                (value,), call_id=declared.call_id, on_approval_needed=_pause
            )
            if result is _PAUSED:
                return None
            value_json = outputs[declared.name] = _output(scope, definition, declared, result)
        return value_json

    return work


def awork_of(
    definition: WorkflowDefinition, run_id: str, input_json: JsonValue
) -> Callable[[], Awaitable[Any]]:
    """The async work of run `run_id`: async stages and checks are awaited."""

    async def work() -> Any:
        with pausing_as(WORKFLOW):
            return await steps()

    async def steps() -> Any:
        scope = _scope(run_id)
        await definition.start.ainvoke((input_json,), call_id=START_CALL)
        value_json: JsonValue = input_json
        outputs: dict[str, JsonValue] = {}
        for declared in definition.stages:
            if declared.checks and not _executed(scope, declared):
                context = _context(definition, declared, run_id, value_json, outputs)
                for stage_check in declared.checks:
                    try:
                        verdict: object = stage_check.check(context)
                        if inspect.isawaitable(verdict):
                            verdict = await _awaited(verdict)
                    except Exception as error:  # a check that cannot say ok fails closed
                        verdict = error
                    _judge(scope, declared, stage_check, verdict)
            value = _stage_value(definition, declared, value_json)
            result = await declared.tool.ainvoke(
                (value,), call_id=declared.call_id, on_approval_needed=_pause
            )
            if result is _PAUSED:
                return None
            value_json = outputs[declared.name] = _output(scope, definition, declared, result)
        return value_json

    return work


def _pause(request: ApprovalRequest) -> object:
    return _PAUSED


def _scope(run_id: str) -> SagaScope:
    scope = current_scope()
    assert scope is not None
    assert scope.saga_id == run_id
    return scope


def _executed(scope: SagaScope, declared: StageDefinition) -> bool:
    call = scope.history.latest_call.get(declared.call_id)
    return call is not None and call.executed


def _stage_value(
    definition: WorkflowDefinition, declared: StageDefinition, value_json: JsonValue
) -> Any:
    """The previous output (or the input) rebuilt as the stage's parameter is annotated.

    Always rebuilt from its JSON, in a first run as in a resumed one: a stage sees the
    same value whether or not the process that ran the stage before it survived. Each
    call rebuilds it from a copy (an unannotated parameter gets the JSON itself), so
    what a check or a stage does to the value it is given reaches no one else.
    """
    return from_json(
        copy.deepcopy(value_json),
        declared.annotation,
        where=f"workflow {definition.name!r} stage {declared.name!r} argument "
        f"{declared.parameter!r}",
    )


def _output(
    scope: SagaScope, definition: WorkflowDefinition, declared: StageDefinition, result: Any
) -> JsonValue:
    """The stage's output as journaled; a stage whose EXECUTED has no JSON form fails the run.

    Read from the stage's EXECUTED entry, not from what the call returned, so a replayed
    stage fails the run exactly as the run that ran it did: its journaled `result` is null,
    which is not what it returned.
    """
    call = scope.history.latest_call.get(declared.call_id)
    lost = None if call is None or call.outcome is None else payload_of(call.outcome)
    if lost is not None and "unserializable_result" in lost:
        raise SerializationError(
            f"workflow {definition.name!r} stage {declared.name!r} output has no JSON form "
            f"({lost['unserializable_result']}); a stage's output is journaled and fed to the "
            "next stage, so it must be JSON or a type sagacity converts (dataclass, pydantic "
            "model, Decimal, ...)"
        )
    try:
        return to_json(result, where=f"workflow {definition.name!r} stage {declared.name!r} output")
    except SerializationError as error:
        raise SerializationError(
            f"{error}; a stage's output is journaled and fed to the next stage, so it must "
            "be JSON or a type sagacity converts (dataclass, pydantic model, Decimal, ...)"
        ) from None


def _context(
    definition: WorkflowDefinition,
    declared: StageDefinition,
    run_id: str,
    value_json: JsonValue,
    outputs: dict[str, JsonValue],
) -> CheckContext:
    """What the stage's checks are shown: copies, so a check cannot change the stage's input.

    The stage gets its value rebuilt anew from the journaled JSON after the checks: a
    check that edits `ctx.value` (or `ctx.outputs`) changes neither what the stage runs
    with nor what its gate asks approval for.
    """
    return CheckContext(
        run_id=run_id,
        workflow_name=definition.name,
        stage_name=declared.name,
        value=_stage_value(definition, declared, value_json),
        input=declared.tool.input_of((_stage_value(definition, declared, value_json),), {}),
        outputs=copy.deepcopy(outputs),
        workflow=definition.instance,
    )


async def _awaited(verdict: Awaitable[object]) -> object:
    return await verdict


def _judge(
    scope: SagaScope, declared: StageDefinition, stage_check: StageCheck, verdict: Any
) -> None:
    """Journal and raise a failed check's refusal; a check that did not say ok failed."""
    name = _storable(type(stage_check).__qualname__)
    # Only a `passed` that is True lets the stage run: `CheckResult(passed="no")` is truthy.
    if isinstance(verdict, CheckResult) and verdict.passed is True:
        return
    # Whatever the check gave, the refusal is journaled: an exception whose str() raises,
    # or an object whose repr() does, is described as far as it can be.
    if isinstance(verdict, Exception):
        detail = f"{name}.check raised {type(verdict).__name__}: {error_json(verdict)['message']}"
    elif inspect.isawaitable(verdict):
        with contextlib.suppress(Exception):
            getattr(verdict, "close", lambda: None)()
        detail = f"{name}.check is async: start the run with astart"
    elif isinstance(verdict, CheckResult) and verdict.passed is not False:
        detail = (
            f"{name}.check returned a CheckResult whose passed is {_shown(verdict.passed)}, "
            "not True or False"
        )
    elif isinstance(verdict, CheckResult):
        reason = verdict.reason
        detail = reason if isinstance(reason, str) else _shown(reason) if reason else ""
        detail = detail or "failed without a reason"
    else:
        detail = f"{name}.check returned {_shown(verdict)}, not a CheckResult"
    detail = _storable(detail)
    error = CheckFailedError(
        f"run {scope.saga_id!r}: check {name} refused stage {declared.name!r}: {detail}; the "
        "stage was not run and the run compensates"
    )
    scope.refuse(
        error,
        tool_name=declared.tool.name,
        call_id=declared.call_id,
        reason=CHECK_FAILED,
        check=name,
        detail=detail,
    )
    raise error


def _shown(value: object) -> str:
    """`value`'s repr, at most 200 characters; a repr that raises is named, not raised."""
    try:
        return f"{value!r:.200}"
    except Exception as broken:
        return f"a {type(value).__qualname__} whose repr() raised {type(broken).__name__}"


def _storable(text: str) -> str:
    r"""`text` with each lone surrogate written as its escape (`\ud800`).

    Such a code point has no UTF-8 form, and the refusal must be journaled all the same:
    it is escaped as the core escapes an error's message. Other text is kept as it is.
    """
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")
