"""The resume value of an approval interrupt: a "no" in `Command(resume=...)` is honoured.

LangGraph hands a task's resume values to its `interrupt()` calls by the order they are
made, which is not stable for parallel calls in one task (`langgraph/types.py`,
`_interrupt_id` and `interrupt`). So a paused call does not take the value `interrupt()`
hands it for its own: it reads every value the task holds without taking any, and a
value is its answer only when it names the call's request, or when it is the value given
with this resume and names no request (then it answers every call of the task that
waits). A "no" is journaled as a rejection and the call is not run, whatever sagacity
holds; a "yes" is never enough: sagacity's own check decides. A paused call that goes on
then takes the values, so that its tool's own `interrupt()` gets the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from langchain_core.runnables.config import var_child_runnable_config

# The task's resume values are not public API; the extra pins the versions read here.
from langgraph._internal._constants import CONFIG_KEY_RESUME_MAP, CONFIG_KEY_SCRATCHPAD
from langgraph.errors import GraphInterrupt
from langgraph.types import interrupt

from sagacity.adapter import SagaScope, payload_of
from sagacity.errors import ApprovalError, SerializationError
from sagacity.integrations.langchain._graph import INTERRUPT_LOCK
from sagacity.journal import JournalEntry, sha256_hex
from sagacity.tools import SagaTool

__all__ = ["RESUME_SOURCE", "adecline_if_refused", "decline_if_refused"]

RESUME_SOURCE = "langgraph Command(resume)"
"""The `source` of the REJECTED entry journaled when a resume value says no."""


def task_answers() -> tuple[list[Any], Any]:
    """The resume values of the running task, read without taking any.

    Returns:
        Every value given for the task's interrupts so far, and the value given with
        this resume (None when this resume gave the task none).
    """
    config = var_child_runnable_config.get()
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    scratchpad = configurable.get(CONFIG_KEY_SCRATCHPAD)
    if scratchpad is None:
        return [], None
    given = list(scratchpad.resume)
    # `Command(resume=value)`: one value for the next interrupt of the run, taken by the
    # first `interrupt()` that needs one (types.py, `interrupt`); peeking leaves it there.
    fresh = scratchpad.get_null_resume(False)
    if fresh is not None:
        if not any(value is fresh for value in given):
            given.append(fresh)
        return given, fresh
    # `Command(resume={interrupt_id: value})`: LangGraph appended the task's value to its
    # list when it made the task (pregel/_algo.py, `_scratchpad`).
    resume_map: Mapping[str, Any] = configurable.get(CONFIG_KEY_RESUME_MAP) or {}
    if given and any(given[-1] is value for value in resume_map.values()):
        return given, given[-1]
    return given, None


def says_no(answer: Any) -> tuple[bool, str]:
    """Whether a resume value rejects, and the reason it gives.

    `False`, and a mapping whose `"approved"` is anything but `True`, say no. Anything
    else decides nothing.
    """
    if answer is False:
        return True, ""
    if isinstance(answer, Mapping) and "approved" in answer and answer["approved"] is not True:
        reason = answer.get("reason")
        return True, reason if isinstance(reason, str) else ""
    return False, ""


def _names(answer: Any) -> str | None:
    """The request a resume value names, if it names one."""
    if isinstance(answer, Mapping):
        request_id = answer.get("request_id")
        if isinstance(request_id, str):
            return request_id
    return None


def refusal_for(request_id: str) -> tuple[bool, str]:
    """Whether the running task's resume values reject request `request_id`, and why.

    A value that names the request decides it whenever it was given; a value that names
    none decides it only when it was given with this resume.
    """
    given, fresh = task_answers()
    for answer in reversed(given):
        if _names(answer) == request_id:
            refused, reason = says_no(answer)
            if refused:
                return True, reason
    if fresh is not None and _names(fresh) is None:
        return says_no(fresh)
    return False, ""


def take_answers() -> None:
    """Take the resume values given for the task's interrupts so far, without pausing.

    A paused call that goes on to run its tool has had its answers: the tool's own
    `interrupt()` must get the next value given, not the one given for the approval
    (LangGraph hands a task's values to its `interrupt()` calls in order). Where no value
    is left, `interrupt()` raises; that pause is not this call's, and is dropped.
    """
    with INTERRUPT_LOCK:
        try:
            while True:
                interrupt(None)
        except GraphInterrupt:
            pass


def rejected_message(tool_name: str, request_id: object, reason: str) -> str:
    """The text the model is given for a call whose resume value said no."""
    why = f": {reason}" if reason else ""
    return (
        f"[REJECTED] {tool_name} was not run: approval request {request_id} was rejected"
        f"{why}. Do not call it again; tell the user it was not done."
    )


def _asked(scope: SagaScope, tool: SagaTool, call_id: str) -> JournalEntry | None:
    """The AWAITING_APPROVAL entry of this call, if it was asked for this tool."""
    with scope.lock:
        awaiting = scope.history.asked.get(call_id)
    if awaiting is None or awaiting.tool_name != tool.name:
        return None  # never asked, or asked for another tool: the core refuses that
    return awaiting


def decline_if_refused(
    tool: SagaTool,
    scope: SagaScope,
    call_id: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> str | None:
    """Honour a "no" given for this call: journal REJECTED and return the model's text.

    A call whose request a resume value rejected earlier (its node runs again) gets the
    same text, provided it is called with the input that was asked about. Returns None
    when nothing rejected the call: it goes on through sagacity's own check.
    """
    found = _resume_refusal(tool, scope, call_id, args, kwargs)
    if not isinstance(found, _Refusal):
        return found
    try:
        entry = tool.decline(
            args, kwargs, call_id=call_id, source=RESUME_SOURCE, reason=found.reason
        )
    except ApprovalError:
        return None  # already run (it replays), or no longer usable: the core decides
    return None if entry is None else found.message


async def adecline_if_refused(
    tool: SagaTool,
    scope: SagaScope,
    call_id: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> str | None:
    """`decline_if_refused` from async code: REJECTED is journaled off the loop."""
    await scope.settled()  # the history is read under the scope's lock
    found = _resume_refusal(tool, scope, call_id, args, kwargs)
    if not isinstance(found, _Refusal):
        return found
    try:
        entry = await tool.adecline(
            args, kwargs, call_id=call_id, source=RESUME_SOURCE, reason=found.reason
        )
    except ApprovalError:
        return None
    return None if entry is None else found.message


class _Refusal(NamedTuple):
    """A resume value said no to the call: decline it, then give the model `message`."""

    reason: str
    message: str


def _resume_refusal(
    tool: SagaTool,
    scope: SagaScope,
    call_id: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> str | _Refusal | None:
    """The model's text for a call rejected before, the refusal to journal now, or None."""
    awaiting = _asked(scope, tool, call_id)
    if awaiting is None:
        return None
    asked = payload_of(awaiting)
    request_id = asked.get("request_id")
    with scope.lock:
        earlier = scope.history.rejected(awaiting.seq)
    if earlier is not None:
        # Rejected by a resume value, or elsewhere (the CLI, the inbox, a worker): either
        # way the model is given LangGraph's "no". Another input: the core refuses it.
        if not _same_input(tool, asked, args, kwargs):
            return None
        return rejected_message(tool.name, request_id, str(payload_of(earlier).get("reason") or ""))
    if not isinstance(request_id, str):
        return None
    refused, reason = refusal_for(request_id)
    if not refused:
        with scope.lock:
            started = scope.history.latest_call.get(call_id)
        if started is None or started.intent.seq < awaiting.seq:
            take_answers()  # it may run now: its tool's own interrupts get their own values
        return None
    return _Refusal(reason, rejected_message(tool.name, request_id, reason))


def _same_input(
    tool: SagaTool, asked: Mapping[str, Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> bool:
    try:
        return sha256_hex(tool.input_of(args, kwargs)) == asked.get("input_sha256")
    except (SerializationError, TypeError):
        return False
