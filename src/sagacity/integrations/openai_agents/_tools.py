"""SagaTools as the OpenAI Agents SDK's `FunctionTool`s, and IRREVERSIBLE calls as its approvals.

The wrap point is the Python function handed to the SDK's `function_tool`: the SDK
catches a tool's exception inside `on_invoke_tool` and gives the model a message
instead (`default_tool_error_function`), so only code that runs inside it sees the
failure. A proxy around `on_invoke_tool` would see the message as a success.

The SDK passes a tool's call id only in its `ToolContext`. The function given to
`function_tool` therefore takes a `ToolContext` first, a parameter the SDK recognises
and leaves out of the schema, so the schema the model sees is the undecorated tool's.

The SDK never calls a tool or its approval policy for a call rejected with
`state.reject`. The one place an adapter sees that rejection is the run context, which
the SDK hands to every tool's `is_enabled` each time it prepares an agent's tools: an
IRREVERSIBLE tool's `is_enabled` journals it there (`_RejectionWatch`).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NoReturn

import pydantic
from agents import FunctionTool, Tool, function_tool
from agents.exceptions import MCPToolCancellationError, ModelBehaviorError, ToolTimeoutError
from agents.function_schema import FuncSchema, function_schema
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext
from agents.tracing import get_current_trace

from sagacity.adapter import agent_run, current_scope, pausing_as
from sagacity.annotations import Reversibility
from sagacity.errors import ApprovalError, ConfigurationError
from sagacity.integrations.openai_agents._resumer import RESUMER
from sagacity.saga import Sagacity
from sagacity.tools import FailureKind, SagaTool

__all__ = ["REJECTION_SOURCE", "as_function_tool", "classify_agents_error", "function_tools"]

_CONTEXT_PARAMETER = "sagacity_tool_context"

REJECTION_SOURCE = "openai-agents state.reject"
"""The `source` of the REJECTED entry journaled for a call the SDK's run state rejected."""


def function_tools(sagacity: Sagacity, *sources: object, **options: Any) -> list[Tool]:
    """Wrap `sources` with `sagacity` and return them as the SDK's `FunctionTool`s.

    Args:
        sagacity: The Sagacity whose sagas journal the calls.
        *sources: Objects with `compensable` methods, `compensable` functions, as for
            `Sagacity.wrap`, and `SagaTool`s that `sagacity.wrap` already made.
        **options: Passed to the SDK's `function_tool` for every tool (for example
            `failure_error_function`, `strict_mode`); see `as_function_tool`.

    Returns:
        One `FunctionTool` per tool, with the name, description and parameter schema the
        SDK gives the undecorated function; typed as the SDK's `Tool`, as `Agent(tools=...)`
        takes them. A given `SagaTool` is where it was given; the tools of the other
        sources are in the order `wrap` returns them.

    Raises:
        ConfigurationError: A `SagaTool` was wrapped by another Sagacity, two tools have
            one name, or `wrap` refused a source.
    """
    return [as_function_tool(tool, **options) for tool in sagacity.wrap(*sources)]


def as_function_tool(tool: SagaTool, **options: Any) -> FunctionTool:
    """Return one wrapped tool as the SDK's `FunctionTool`.

    Use it for options that suit one tool only, such as `timeout=` on an async tool.
    An IRREVERSIBLE tool gets a `needs_approval` policy that asks sagacity: the run is
    interrupted (`result.interruptions`) until a human approves the call's exact input
    through `Sagacity.approve`.

    Args:
        tool: A tool made by `Sagacity.wrap`.
        **options: Passed to the SDK's `function_tool`, except `needs_approval` on an
            IRREVERSIBLE tool, which sagacity decides.

    Raises:
        ConfigurationError: `needs_approval` was given for an IRREVERSIBLE tool, or the
            tool's annotations cannot be resolved.
    """
    irreversible = tool.reversibility is Reversibility.IRREVERSIBLE
    if irreversible and "needs_approval" in options:
        raise ConfigurationError(
            f"tool {tool.name!r} is IRREVERSIBLE: sagacity decides whether its calls need "
            "approval; leave needs_approval out"
        )
    tool.owner.add_classifier(classify_agents_error)
    function, journaled, takes_context = _tool_function(tool)
    built = function_tool(function, **options)
    if irreversible:
        schema = function_schema(function, strict_json_schema=options.get("strict_mode", True))
        _gate(built, _ApprovalPolicy(journaled, schema, takes_context=takes_context))
    return built


def classify_agents_error(error: BaseException) -> FailureKind | None:
    """A nested tool that timed out or was cancelled left its outcome unknown.

    `as_function_tool` installs this classifier on the tool's Sagacity. The SDK's own
    timeout of a tool reaches the tool as `asyncio.CancelledError`, which sagacity
    already journals as an unknown outcome.
    """
    if isinstance(error, ToolTimeoutError | MCPToolCancellationError):
        return FailureKind.OUTCOME_UNKNOWN
    return None


def _tool_function(tool: SagaTool) -> tuple[Callable[..., Any], SagaTool, bool]:
    """Return the function for `function_tool`, the tool it calls, and if that takes the context.

    The function has the tool's name, docstring, annotations and signature, with a
    `ToolContext` first unless the tool takes the SDK's context itself (its value is
    then left out of the journaled input).
    """
    try:
        hints = typing.get_type_hints(tool.func, include_extras=True)
    except (NameError, TypeError) as error:
        raise ConfigurationError(
            f"tool {tool.name!r}: its annotations cannot be resolved ({error}); define the "
            "types they name at module level"
        ) from error
    parameters = list(tool.signature.parameters.values())
    first = parameters[0] if parameters else None
    if first is not None and _is_context(hints.get(first.name, first.annotation)):
        takes_context = True
        journaled = tool.excluding(first.name)
        signature = tool.signature
    else:
        takes_context = False
        journaled = tool
        name = _CONTEXT_PARAMETER
        while name in tool.signature.parameters:
            name = f"_{name}"
        context = inspect.Parameter(
            name, inspect.Parameter.POSITIONAL_ONLY, annotation=ToolContext[Any]
        )
        signature = tool.signature.replace(parameters=[context, *parameters])
        hints = {name: ToolContext[Any], **hints}

    function: Callable[..., Any]
    if tool.is_async:

        async def call_async(context: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
            arguments = (context, *args) if takes_context else args
            with pausing_as(RESUMER), agent_run(**run_provenance()):
                return await journaled.ainvoke(arguments, kwargs, call_id=_call_id(context))

        function = call_async
    else:

        def call(context: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
            arguments = (context, *args) if takes_context else args
            with pausing_as(RESUMER), agent_run(**run_provenance()):
                return journaled.invoke(arguments, kwargs, call_id=_call_id(context))

        function = call
    function.__name__ = tool.name
    function.__qualname__ = getattr(tool.func, "__qualname__", tool.name)
    function.__module__ = getattr(tool.func, "__module__", __name__)
    function.__doc__ = inspect.getdoc(tool.func)
    function.__annotations__ = hints
    # inspect.signature() reads __signature__: the SDK derives the schema from it.
    function.__dict__["__signature__"] = signature
    return function, journaled, takes_context


def run_provenance() -> dict[str, str | None]:
    """What the SDK exposes of the run making a call, for `initiated_by`: its `trace_id`.

    The SDK's run has no id of its own but its trace (`RunConfig.trace_id`, or one the SDK
    made), readable with `agents.tracing.get_current_trace()` while tracing is on; with
    tracing off the trace is a no-op and nothing is recorded. The model is not recorded:
    the `needs_approval` check that asks gets a `RunContextWrapper`, which names no agent.
    """
    trace = get_current_trace()
    if trace is None or trace.export() is None:  # no trace, or tracing off (a no-op)
        return {}
    return {"trace_id": trace.trace_id}


class _ApprovalPolicy:
    """The SDK's `needs_approval` for an IRREVERSIBLE tool: asks sagacity about each call."""

    def __init__(self, tool: SagaTool, schema: FuncSchema, *, takes_context: bool) -> None:
        self.tool = tool
        self.schema = schema
        self.takes_context = takes_context

    async def __call__(
        self, run_context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        """True while sagacity has no usable approval for this call.

        The first time a call is seen this journals AWAITING_APPROVAL and stores the
        request. A refusal (rejected, or another input than the approved one) also
        answers True, failing closed: sagacity records it and raises it when the saga's
        work returns. Arguments that do not validate answer True: the call fails
        validation when it runs, and nothing runs.
        """
        try:
            parsed = self.schema.params_pydantic_model(**params)
            args, kwargs = self.schema.to_call_args(parsed)
        except (pydantic.ValidationError, ModelBehaviorError):
            return True
        arguments = (run_context, *args) if self.takes_context else tuple(args)
        try:
            with pausing_as(RESUMER), agent_run(**run_provenance()):
                waiting = await self.tool.apending_approval(arguments, kwargs, call_id=call_id)
        except ApprovalError:
            return True
        return waiting is not None


def _gate(built: FunctionTool, policy: _ApprovalPolicy) -> None:
    """Make the SDK consult `policy` for every call of `built`.

    The SDK shows a callable policy the arguments of a tool made by `function_tool` only
    when validation leaves them unchanged (no Decimal, datetime, enum, model or pattern);
    for the others it interrupts the run without asking the policy, and sagacity would not
    know that the run waits. An invoker that only hands the call on to the SDK's own
    (`_PolicyGate`) is asked about with the model's arguments, which the policy validates
    with the tool's parameter model, as the call will. It journals nothing and catches
    nothing: the journaling function still runs inside the SDK's invoker, below its
    failure handling.
    """
    built.on_invoke_tool = _PolicyGate(built.on_invoke_tool)
    built.needs_approval = policy
    built.is_enabled = _RejectionWatch(policy.tool, built.is_enabled)


_EnabledOption = bool | Callable[[RunContextWrapper[Any], Any], Any]
"""What the SDK takes as a tool's `is_enabled`."""


class _RejectionWatch:
    """An IRREVERSIBLE tool's `is_enabled`: journals the SDK's rejections of its calls.

    The SDK asks it each time it prepares the agent's tools, with the run context, in
    which `state.reject(item)` recorded its decision before the run resumed; the SDK then
    gives the model the rejection without calling the tool or its approval policy. Each
    of the tool's requests in the open saga that the context rejects is declined
    (journaled REJECTED, source `REJECTION_SOURCE`): the call can no longer run, whatever
    sagacity was told. The answer is the tool's own `is_enabled`, unchanged.
    """

    def __init__(self, tool: SagaTool, is_enabled: _EnabledOption) -> None:
        self.tool = tool
        self.is_enabled = is_enabled
        self.decliner = SagaTool(
            tool.owner,
            _never_called,
            name=tool.name,
            description=tool.description,
            reversibility=tool.reversibility,
        )
        """Declines by call id: a decline journals no input, and the tool has no arguments
        to give here."""

    async def __call__(self, run_context: RunContextWrapper[Any], agent: Any) -> bool:
        """Journal the rejections the run context holds, then answer the tool's own option."""
        await self.decline_rejected(run_context)
        if isinstance(self.is_enabled, bool):
            return self.is_enabled
        enabled = self.is_enabled(run_context, agent)
        if inspect.isawaitable(enabled):
            enabled = await enabled
        return bool(enabled)

    async def decline_rejected(self, run_context: RunContextWrapper[Any]) -> None:
        """Decline the tool's open requests that the run context rejects."""
        scope = current_scope()
        if scope is None or scope.owner is not self.tool.owner:
            return
        name = self.tool.name
        await scope.settled()  # the history is read under the scope's lock
        with scope.lock:
            open_requests = scope.history.open_requests()
        for awaiting in open_requests:
            call_id = awaiting.call_id
            if awaiting.tool_name != name or call_id is None:
                continue
            if run_context.is_tool_approved(name, call_id) is not False:
                continue
            try:
                await self.decliner.adecline(
                    call_id=call_id,
                    source=REJECTION_SOURCE,
                    reason=run_context.get_rejection_message(name, call_id) or "",
                )
            except ApprovalError:
                continue  # decided meanwhile in another process: rejected, or run


def _never_called(**arguments: Any) -> NoReturn:
    raise AssertionError("a decline never runs the tool")  # pragma: no cover


class _PolicyGate:
    """An invoker that hands each call on to the SDK's own invoker, unchanged.

    The SDK binds its invoker to the `FunctionTool` it belongs to, and binds it again
    to a copy (`copy.copy`, as `tool_namespace` makes): a failure is then handled by the
    copy's failure policy. The gate follows, so that a copy's gate calls the copy's
    invoker.
    """

    def __init__(self, sdk_invoker: Callable[[ToolContext[Any], str], Awaitable[Any]]) -> None:
        self.sdk_invoker = sdk_invoker

    async def __call__(self, context: ToolContext[Any], arguments: str) -> Any:
        return await self.sdk_invoker(context, arguments)

    def __agents_bind_function_tool__(self, function_tool: FunctionTool) -> _PolicyGate:
        """Called by the SDK when a `FunctionTool` is built or copied with this invoker."""
        bind = getattr(self.sdk_invoker, "__agents_bind_function_tool__", None)
        if not callable(bind):
            return self
        bound = bind(function_tool)
        return self if bound is self.sdk_invoker else _PolicyGate(bound)


def _call_id(context: object) -> str | None:
    call_id = getattr(context, "tool_call_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


def _is_context(annotation: Any) -> bool:
    """Whether the SDK treats a first parameter with this annotation as its context."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation) or annotation
    return origin is RunContextWrapper or origin is ToolContext
