"""Wrapped tools as LangChain `StructuredTool`s: journaled below LangChain's error handling."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.pydantic import get_fields
from langgraph.types import Command
from pydantic import Field, SkipValidation

from sagacity.adapter import SagaScope, agent_run, current_scope, pausing_as
from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.errors import ApprovalError, ReplayMismatchError
from sagacity.integrations.langchain._calls import aone_call_per_id, one_call_per_id
from sagacity.integrations.langchain._graph import (
    can_interrupt,
    classify_langgraph_error,
    interrupt_value,
    pause_graph,
    run_provenance,
    warn_if_in_memory,
)
from sagacity.integrations.langchain._resume import adecline_if_refused, decline_if_refused
from sagacity.integrations.langchain._resumer import RESUMER
from sagacity.tools import SagaTool, awaiting_approval_message

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["SagaStructuredTool", "as_langchain_tool", "langchain_tools"]

_tool_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "sagacity_langchain_tool_call_id", default=None
)
"""The tool-call id of the call running in this context.

LangChain hands `tool_call_id` to `BaseTool.run` / `arun` but never to `func`; `run` sets
it here before LangChain copies the context that `func` runs in.
"""


class _Ran:
    """Set when the tool's own function runs in a call; unset, the journal replayed it."""

    __slots__ = ("ran",)

    def __init__(self) -> None:
        self.ran = False


_this_call: contextvars.ContextVar[_Ran | None] = contextvars.ContextVar(
    "sagacity_langchain_this_call", default=None
)

_COMMAND_FIELDS = frozenset(field.name for field in dataclasses.fields(Command))
_TOOL_MESSAGE_FIELDS = frozenset(ToolMessage.model_fields)


class SagaStructuredTool(StructuredTool):
    """A LangChain `StructuredTool` whose calls are journaled in the open saga.

    Made by `langchain_tools`: everything the model sees is what
    `StructuredTool.from_function` makes of the undecorated tool; `func` or `coroutine`
    is the journaled call, and the framework's `tool_call_id` is its call id.
    """

    saga_tool: SkipValidation[SagaTool] = Field(exclude=True)
    """The journaled tool that `func` / `coroutine` calls."""

    def run(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the tool as `BaseTool.run` does, journaling it under `tool_call_id`."""
        token = _tool_call_id.set(tool_call_id)
        try:
            return super().run(tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _tool_call_id.reset(token)

    async def arun(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the tool as `BaseTool.arun` does, journaling it under `tool_call_id`."""
        token = _tool_call_id.set(tool_call_id)
        try:
            return await super().arun(tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _tool_call_id.reset(token)


def langchain_tools(sagacity: Sagacity, *sources: object, **options: Any) -> list[BaseTool]:
    """Wrap `sources` (see `Sagacity.wrap`) as LangChain tools for agents and `ToolNode`.

    Args:
        sagacity: The Sagacity whose sagas journal the calls.
        *sources: Objects with `compensable` methods, `compensable` functions, and
            `SagaTool`s that `sagacity.wrap` already made.
        **options: Passed to `StructuredTool.from_function` for every tool
            (`handle_tool_error`, `parse_docstring`, `return_direct`, `response_format`, …).

    Returns:
        One `SagaStructuredTool` per tool: a given `SagaTool` where it was given, the
        tools of the other sources in the order `wrap` returns them.

    Raises:
        ConfigurationError: A `SagaTool` was wrapped by another Sagacity, two tools
            have one name, or `wrap` refused a source.
    """
    sagacity.add_classifier(classify_langgraph_error)
    return [as_langchain_tool(tool, **options) for tool in sagacity.wrap(*sources)]


def as_langchain_tool(tool: SagaTool, **options: Any) -> SagaStructuredTool:
    """Turn one wrapped tool into a LangChain tool (see `langchain_tools`).

    Register `classify_langgraph_error` with `Sagacity.add_classifier` when calling this
    directly, so that an `interrupt()` inside the tool is not journaled as a failure.
    """
    original = tool.func
    reference = StructuredTool.from_function(
        func=None if tool.is_async else original,
        coroutine=original if tool.is_async else None,
        **{"name": tool.name, **options},
    )
    excluded = tool.excluding(*_injected_parameters(tool, reference))
    journaled = SagaTool(
        excluded.owner,
        _noting_runs(excluded.func),
        name=excluded.name,
        description=excluded.description,
        reversibility=excluded.reversibility,
        excluded=excluded.excluded,
    )
    fields = {name: getattr(reference, name) for name in reference.model_fields_set}
    if journaled.is_async:
        fields["coroutine"] = _async_call(journaled, reference.response_format)
    else:
        fields["func"] = _sync_call(journaled, reference.response_format)
    return SagaStructuredTool(**fields, saga_tool=journaled)


def _noting_runs(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func`, noting in the current call that it ran (see `_returned`)."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            _note_run()
            return await func(*args, **kwargs)

        return run_async

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        _note_run()
        return func(*args, **kwargs)

    return run


def _note_run() -> None:
    this_call = _this_call.get()
    if this_call is not None:
        this_call.ran = True


def _injected_parameters(tool: SagaTool, reference: StructuredTool) -> list[str]:
    """The parameters the model does not fill: LangChain injects them (or config).

    Only the model-visible arguments are journaled and hashed for approval: a
    `ToolRuntime`, the injected state or the `RunnableConfig` differ from run to run.
    """
    schema = reference.tool_call_schema
    visible = set(schema.get("properties", {}) if isinstance(schema, dict) else get_fields(schema))
    return [
        name
        for name, parameter in tool.signature.parameters.items()
        if name not in visible
        and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def _sync_call(tool: SagaTool, response_format: str) -> Callable[..., Any]:
    pause = _approval_handler(tool, response_format)

    @functools.wraps(tool.func)
    def call(*args: Any, **kwargs: Any) -> Any:
        call_id = _tool_call_id.get()
        scope = current_scope()
        with one_call_per_id(tool, scope, call_id, args, kwargs):
            rejected = _rejected(tool, scope, call_id, args, kwargs)
            if rejected is not None:
                return _as_output(rejected, response_format)
            this_call = _Ran()
            token = _this_call.set(this_call)
            try:
                with _pausing():
                    result = tool.invoke(args, kwargs, call_id=call_id, on_approval_needed=pause)
            except ApprovalError as refusal:
                _pause_refused(tool, call_id, refusal)
                raise
            finally:
                _this_call.reset(token)
        return _returned(tool, call_id, result, response_format, ran=this_call.ran)

    return call


def _async_call(tool: SagaTool, response_format: str) -> Callable[..., Any]:
    pause = _approval_handler(tool, response_format)

    @functools.wraps(tool.func)
    async def call(*args: Any, **kwargs: Any) -> Any:
        call_id = _tool_call_id.get()
        scope = current_scope()
        async with aone_call_per_id(tool, scope, call_id, args, kwargs):
            rejected = await _arejected(tool, scope, call_id, args, kwargs)
            if rejected is not None:
                return _as_output(rejected, response_format)
            this_call = _Ran()
            token = _this_call.set(this_call)
            try:
                with _pausing():
                    result = await tool.ainvoke(
                        args, kwargs, call_id=call_id, on_approval_needed=pause
                    )
            except ApprovalError as refusal:
                await _apause_refused(tool, call_id, refusal)
                raise
            finally:
                _this_call.reset(token)
        return _returned(tool, call_id, result, response_format, ran=this_call.ran)

    return call


def _pausing() -> contextlib.AbstractContextManager[None]:
    """Name LangGraph the resumer of the requests asked here, where it pauses natively.

    Without a checkpointer nothing pauses: the model is told, and the worker runs the
    approved call itself (the plain `work` resumer). The requests record the run's thread.
    """
    return _paused_by_langgraph() if can_interrupt() else contextlib.nullcontext()


@contextlib.contextmanager
def _paused_by_langgraph() -> Iterator[None]:
    with pausing_as(RESUMER), agent_run(**run_provenance()):
        yield


def _returned(
    tool: SagaTool, call_id: str | None, result: Any, response_format: str, *, ran: bool
) -> Any:
    """What LangChain gets: the tool's result, or a replayed result in the shape it expects.

    A replayed result is the journaled JSON. With `content_and_artifact`, LangChain
    wants a `(content, artifact)` tuple where the JSON has a list. A `Command` or
    `ToolMessage` cannot be rebuilt from its JSON exactly (its values may have been any
    object), and LangChain would turn the dict into message text, losing the state
    update: such a replay is refused.

    Raises:
        ReplayMismatchError: The replayed result was a `Command` or a `ToolMessage`.
    """
    if ran:
        return result
    if response_format == "content_and_artifact":
        if isinstance(result, list) and len(result) == 2:
            return tuple(result)
        return result
    kind = _langgraph_output(result)
    if kind is None:
        return result
    scope = current_scope()  # a replay happens only inside a saga
    saga = "" if scope is None else f"saga {scope.saga_id!r}: "
    refusal = ReplayMismatchError(
        f"{saga}call {call_id!r} of tool {tool.name!r} ran before and returned a {kind}, "
        "which the journal keeps only as JSON; it is not replayed, so the state update it "
        "made is not applied again. Tools that return a Command or a ToolMessage must not "
        "run again in a re-executed node: run them with create_agent (each call is its "
        "own task) or in a model turn of their own"
    )
    if scope is not None:
        scope.refusal = refusal  # raised when the work returns, even if LangChain caught it
    raise refusal


def _langgraph_output(result: Any) -> str | None:
    """Name the LangGraph output whose JSON `result` is, if it is one (see `_returned`)."""
    if isinstance(result, list) and result:
        kinds = [_langgraph_output(item) for item in result]
        return "list of Commands and ToolMessages" if None not in kinds else None
    if not isinstance(result, dict):
        return None
    if result.keys() == _COMMAND_FIELDS:
        return "Command"
    if result.keys() == _TOOL_MESSAGE_FIELDS and result.get("type") == "tool":
        return "ToolMessage"
    return None


def _rejected(
    tool: SagaTool,
    scope: SagaScope | None,
    call_id: str | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> str | None:
    """The model's text for a paused call that the graph's resume value rejected, if any.

    Read before sagacity's check, so that a "no" stops the call even when sagacity holds
    an approval for it.
    """
    if scope is None or call_id is None or not _resumable(tool):
        return None
    return decline_if_refused(tool, scope, call_id, args, kwargs)


async def _arejected(
    tool: SagaTool,
    scope: SagaScope | None,
    call_id: str | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> str | None:
    """`_rejected` from async code: a REJECTED entry is journaled off the loop."""
    if scope is None or call_id is None or not _resumable(tool):
        return None
    return await adecline_if_refused(tool, scope, call_id, args, kwargs)


def _resumable(tool: SagaTool) -> bool:
    """Only an IRREVERSIBLE call in a checkpointed graph can have been paused and resumed."""
    return tool.reversibility is Reversibility.IRREVERSIBLE and can_interrupt()


def _as_output(message: str, response_format: str) -> Any:
    """A text for the model, in the shape the tool's `response_format` makes LangChain expect."""
    return (message, None) if response_format == "content_and_artifact" else message


def _approval_handler(tool: SagaTool, response_format: str) -> Callable[[ApprovalRequest], Any]:
    def pause(request: ApprovalRequest) -> Any:
        if not can_interrupt():
            # Outside a checkpointed graph nothing can pause: tell the model instead.
            return _as_output(awaiting_approval_message(request), response_format)
        warn_if_in_memory(request)
        return pause_graph(
            interrupt_value(
                request,
                saga_id=request.saga_id,
                tool_name=tool.name,
                call_id=request.call_id,
            )
        )

    return pause


def _pause_refused(tool: SagaTool, call_id: str | None, refusal: ApprovalError) -> None:
    """Pause the graph again after an approval check refused a resumed call.

    Were the refusal raised, `ToolNode(handle_tool_errors=True)` would hand it to the
    model and the graph would run past its interrupt. Paused instead, the graph waits
    where it was, the saga raises the refusal when its work returns, and a proper
    approval followed by another `Command(resume=...)` runs the call.
    """
    # The refused call never started, so `sagacity.current_call()` is None here: the
    # saga and its refusal are those of the scope the work runs in.
    scope = current_scope()
    if scope is not None and can_interrupt():
        _pause_again(tool, call_id, refusal, scope, scope.owner.pending(scope.saga_id))


async def _apause_refused(tool: SagaTool, call_id: str | None, refusal: ApprovalError) -> None:
    """`_pause_refused` from async code: the store and journal are read on a worker thread."""
    scope = current_scope()
    if scope is not None and can_interrupt():
        pending = await asyncio.to_thread(scope.owner.pending, scope.saga_id)
        _pause_again(tool, call_id, refusal, scope, pending)


def _pause_again(
    tool: SagaTool,
    call_id: str | None,
    refusal: ApprovalError,
    scope: SagaScope,
    pending: list[ApprovalRequest],
) -> None:
    stored = [
        request
        for request in pending
        if request.call_id == call_id and request.tool_name == tool.name
    ]
    pause_graph(
        interrupt_value(
            stored[-1] if stored else None,
            saga_id=scope.saga_id,
            tool_name=tool.name,
            call_id=call_id,
            refused=refusal,
        )
    )
