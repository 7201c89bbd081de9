"""SagaTools as CrewAI tools, and IRREVERSIBLE calls under sagacity's own pause.

The wrap point is the function a CrewAI `Tool` calls: both of CrewAI's paths reach it
(native function calling through `BaseTool.run`, ReAct through the structured tool's
`invoke`) and both catch what it raises ("Error executing tool: …"), so only code that
runs inside it sees the tool's exception. The function has the tool's name, docstring
and signature, and CrewAI's own `@tool` derives the argument schema from it, so the model
sees what it would see for the undecorated tool.

CrewAI has no durable per-tool pause: its `before_tool_call` hooks can only block a call,
and human input is a console prompt that approves nothing here. An IRREVERSIBLE call that
has no usable approval is not run: it returns the `[AWAITING_APPROVAL]` text (the crew goes
on, and the saga's run ends AWAITING_APPROVAL), or, with `approval_wait`, first waits that
long for a decision in the journal, from any process, and runs once approved.
"""

from __future__ import annotations

import inspect
import threading
import time
import typing
from collections.abc import Callable
from typing import Any

from crewai.tools import tool
from crewai.tools.base_tool import Tool

from sagacity.adapter import current_scope, pausing_as
from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError
from sagacity.integrations.crewai._calls import choose_call_id
from sagacity.integrations.crewai._resumer import RESUMER
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool, awaiting_approval_message

__all__ = ["SagaCrewTool", "as_crew_tool", "crew_tools"]

_POLL_SECONDS = 0.2
"""How often a call waiting for approval reads the journal for a decision."""


def _never_cache(_arguments: Any = None, _result: Any = None) -> bool:
    """CrewAI's `cache_function` for journaled tools: the journal answers repeats instead.

    CrewAI's cache lives as long as the crew object, across sagas: a hit would hand one
    saga another saga's effect, with nothing journaled.
    """
    return False


class SagaCrewTool(Tool[..., Any]):
    """A CrewAI `Tool` whose calls are journaled in the open saga (made by `crew_tools`).

    CrewAI never caches its results (`cache_function` answers False): within a saga the
    journal replays a repeated call instead (see `crew_tools`).
    """

    saga_tool: Any = None
    """The `SagaTool` it calls."""


def crew_tools(
    sagacity: Sagacity,
    *sources: object,
    approval_wait: float | None = None,
    replay_repeats: bool = True,
    **options: Any,
) -> list[SagaCrewTool]:
    """Wrap `sources` with `sagacity` and return them as CrewAI tools for `Agent(tools=...)`.

    Args:
        sagacity: The Sagacity whose sagas journal the calls.
        *sources: Objects with `compensable` methods, `compensable` functions, as for
            `Sagacity.wrap`, and `SagaTool`s that `sagacity.wrap` already made.
        approval_wait: Seconds an IRREVERSIBLE call without a usable approval waits for
            a decision (polling the journal) before it returns the `[AWAITING_APPROVAL]`
            text; None (the default) or 0 returns it at once.
        replay_repeats: A call of a tool with the exact input of a call that already ran
            in the saga returns the journaled result without running (CrewAI's cache,
            kept in the journal and bounded to the saga). False runs it again as a new
            call.
        **options: Passed to every CrewAI `Tool` (for example `max_usage_count`,
            `tool_failure_policy`, `result_as_answer`).

    Returns:
        One `SagaCrewTool` per tool, in the order `wrap` returns them.

    Raises:
        ConfigurationError: As `Sagacity.wrap` does, or `cache_function` was given.
    """
    return [
        as_crew_tool(
            saga_tool, approval_wait=approval_wait, replay_repeats=replay_repeats, **options
        )
        for saga_tool in sagacity.wrap(*sources)
    ]


def as_crew_tool(
    saga_tool: SagaTool,
    *,
    approval_wait: float | None = None,
    replay_repeats: bool = True,
    **options: Any,
) -> SagaCrewTool:
    """Return one wrapped tool as a CrewAI tool (see `crew_tools` for the options).

    Raises:
        ConfigurationError: `cache_function` was given (the journal answers repeats), or
            the tool's annotations cannot be resolved.
    """
    if "cache_function" in options:
        raise ConfigurationError(
            f"tool {saga_tool.name!r}: CrewAI's cache does not answer for a journaled tool "
            "(it would serve one saga's effect to another); leave cache_function out"
        )
    function = _tool_function(saga_tool, approval_wait or 0.0, replay_repeats)
    derived = tool(saga_tool.name)(function)  # CrewAI's own schema for the function
    return SagaCrewTool(
        name=derived.name,
        description=derived.description,
        func=function,
        args_schema=derived.args_schema,
        result_schema=derived.result_schema,
        cache_function=_never_cache,
        saga_tool=saga_tool,
        **options,
    )


def _tool_function(
    saga_tool: SagaTool, approval_wait: float, replay_repeats: bool
) -> Callable[..., Any]:
    """The function CrewAI calls: picks the call id, then calls through the journal."""
    try:
        hints = typing.get_type_hints(saga_tool.func, include_extras=True)
    except (NameError, TypeError) as error:
        raise ConfigurationError(
            f"tool {saga_tool.name!r}: its annotations cannot be resolved ({error}); define "
            "the types they name at module level"
        ) from error
    signature = saga_tool.signature.replace(
        parameters=[
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in saga_tool.signature.parameters.values()
        ],
        return_annotation=hints.get("return", saga_tool.signature.return_annotation),
    )
    waits = approval_wait > 0 and saga_tool.reversibility is Reversibility.IRREVERSIBLE

    function: Callable[..., Any]
    if saga_tool.is_async:

        async def call_async(**kwargs: Any) -> Any:
            call_id = _call_id(saga_tool, kwargs, replay_repeats)
            with pausing_as(RESUMER):
                return await saga_tool.ainvoke((), kwargs, call_id=call_id)

        function = call_async
    else:

        def call(**kwargs: Any) -> Any:
            call_id = _call_id(saga_tool, kwargs, replay_repeats)
            waiting = _Waiting(saga_tool, kwargs, approval_wait) if waits else None
            with pausing_as(RESUMER):  # a request asked here names the CrewAI resumer
                return saga_tool.invoke((), kwargs, call_id=call_id, on_approval_needed=waiting)

        function = call
    function.__name__ = saga_tool.name
    function.__qualname__ = getattr(saga_tool.func, "__qualname__", saga_tool.name)
    function.__module__ = getattr(saga_tool.func, "__module__", __name__)
    function.__doc__ = inspect.getdoc(saga_tool.func) or saga_tool.description or saga_tool.name
    function.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    # inspect.signature() reads __signature__: CrewAI derives the schema from it.
    function.__dict__["__signature__"] = signature
    return function


def _call_id(saga_tool: SagaTool, kwargs: dict[str, Any], replay_repeats: bool) -> str | None:
    scope = current_scope()
    if scope is None or scope.owner is not saga_tool.owner:
        return None  # the core calls straight through, or refuses, and says why
    return choose_call_id(scope, saga_tool, kwargs, replay_repeats=replay_repeats)


class _Waiting:
    """What an IRREVERSIBLE call does when it must wait: wait for a decision, a while.

    It reads the journal every `_POLL_SECONDS` (the approval may come from any process)
    through the same check the call runs: once it passes, the call runs through the hot
    path, once; a rejection or another refusal raises (CrewAI tells the model). After
    `seconds` with no decision the call returns the `[AWAITING_APPROVAL]` text.
    """

    def __init__(self, saga_tool: SagaTool, kwargs: dict[str, Any], seconds: float) -> None:
        self.saga_tool = saga_tool
        self.kwargs = kwargs
        self.seconds = seconds

    def __call__(self, request: ApprovalRequest) -> Any:
        deadline = time.monotonic() + self.seconds
        pause = threading.Event()  # never set: a wait that a signal does not cut short
        while (left := deadline - time.monotonic()) > 0:
            pause.wait(min(_POLL_SECONDS, left))
            waiting = self.saga_tool.pending_approval((), self.kwargs, call_id=request.call_id)
            if waiting is None:
                return self.saga_tool.invoke((), self.kwargs, call_id=request.call_id)
        return awaiting_approval_message(request)
