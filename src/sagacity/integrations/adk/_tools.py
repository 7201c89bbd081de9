"""SagaTools as Google ADK `FunctionTool`s, and IRREVERSIBLE calls as ADK's confirmations.

The wrap point is the Python function handed to ADK's `FunctionTool`: ADK catches a
tool's exception around `run_async` and hands it to the `on_tool_error_callback`s of the
plugins and the agent, which may answer the model instead; only code inside the function
sees the failure as raised. A plugin's `after_tool_callback` or `on_tool_error_callback`
would see the callback's answer, or the error after the fact.

ADK passes a call's id only in its `ToolContext`. The function given to `FunctionTool`
therefore takes one (annotated `ToolContext`, which ADK injects and leaves out of the
declaration), so the model sees the undecorated tool's declaration.

An IRREVERSIBLE tool gets `require_confirmation=` a policy that asks sagacity
(`_ConfirmationPolicy`): ADK's own gate then pauses the call with an
`adk_request_confirmation` until a `ToolConfirmation` answers it. The confirmation is
never trusted alone: a confirmed call runs through sagacity's hash-bound approval check.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

from google.adk.agents.context import Context
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext

from sagacity.adapter import (
    FinishedThenCancelled,
    agent_run,
    current_scope,
    finished_off_loop,
    pausing_as,
)
from sagacity.annotations import Reversibility
from sagacity.errors import (
    ApprovalError,
    ApprovalMissingError,
    ConfigurationError,
    InDoubtError,
    NoSagaError,
    ReplayMismatchError,
)
from sagacity.integrations.adk._confirm import REQUEST_CONFIRMATION
from sagacity.integrations.adk._resumer import RESUMER
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["CONFIRMATION_SOURCE", "as_function_tool", "function_tools"]

_REFUSALS = (ApprovalError, InDoubtError, ReplayMismatchError)
"""What sagacity's approval check raises instead of letting a call run."""

CONFIRMATION_SOURCE = "adk ToolConfirmation"
"""The `source` of the REJECTED entry journaled for a call an ADK `ToolConfirmation`
declined (`confirmed=False`)."""

_CONTEXT_PARAMETER = "tool_context"


def function_tools(sagacity: Sagacity, *sources: object) -> list[FunctionTool]:
    """Wrap `sources` with `sagacity` and return them as ADK `FunctionTool`s.

    Args:
        sagacity: The Sagacity whose sagas journal the calls.
        *sources: Objects with `compensable` methods, `compensable` functions, as for
            `Sagacity.wrap`, and `SagaTool`s that `sagacity.wrap` already made.

    Returns:
        One `FunctionTool` per tool, with the declaration ADK gives the undecorated
        function, in the order `wrap` returns them; put them in `LlmAgent(tools=...)`.

    Raises:
        ConfigurationError: A `SagaTool` was wrapped by another Sagacity, two tools have
            one name, or `wrap` refused a source.
    """
    return [as_function_tool(tool) for tool in sagacity.wrap(*sources)]


def as_function_tool(tool: SagaTool) -> FunctionTool:
    """Return one wrapped tool as an ADK `FunctionTool`.

    An IRREVERSIBLE tool's calls wait on ADK's native confirmation: the run pauses with
    an `adk_request_confirmation` call, and the call runs when a `ToolConfirmation` with
    `confirmed=True` answers it (`confirmation_message` builds that answer) and
    sagacity holds an approval of its exact input. A `confirmed=False` answer is
    journaled as REJECTED (source `CONFIRMATION_SOURCE`) and the call never runs.

    Args:
        tool: A tool made by `Sagacity.wrap`.

    Raises:
        ConfigurationError: The tool's annotations cannot be resolved.
    """
    function, journaled, context_name, passes_context = _tool_function(tool)
    if tool.reversibility is Reversibility.IRREVERSIBLE:
        policy = _ConfirmationPolicy(journaled, context_name, passes_context=passes_context)
        # ADK awaits an async policy (FunctionTool._invoke_callable); its hint says bool.
        return FunctionTool(function, require_confirmation=typing.cast(Any, policy))
    return FunctionTool(function)


def _tool_function(tool: SagaTool) -> tuple[Callable[..., Any], SagaTool, str, bool]:
    """The function for `FunctionTool`, the tool it calls, its context, and if the tool takes it.

    The function has the tool's name, docstring, annotations and signature, with a
    `ToolContext` parameter added unless the tool takes ADK's context itself (its value
    is then passed on, and left out of the journaled input).
    """
    try:
        hints = typing.get_type_hints(tool.func, include_extras=True)
    except (NameError, TypeError) as error:
        raise ConfigurationError(
            f"tool {tool.name!r}: its annotations cannot be resolved ({error}); define the "
            "types they name at module level"
        ) from error
    parameters = list(tool.signature.parameters.values())
    own = next((p for p in parameters if _is_context(hints.get(p.name, p.annotation))), None)
    if own is not None:
        passes_context = True
        context_name = own.name
        journaled = tool.excluding(own.name)
        signature = tool.signature
    else:
        passes_context = False
        context_name = _CONTEXT_PARAMETER
        while context_name in tool.signature.parameters:
            context_name = f"_{context_name}"
        journaled = tool
        added = inspect.Parameter(
            context_name, inspect.Parameter.KEYWORD_ONLY, annotation=ToolContext
        )
        keyword = [p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD]
        plain = [p for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
        signature = tool.signature.replace(parameters=[*plain, added, *keyword])
        hints = {**hints, context_name: ToolContext}

    async def call(*args: Any, **kwargs: Any) -> Any:
        context = kwargs[context_name] if passes_context else kwargs.pop(context_name)
        call_id = _call_id(context)
        try:
            with pausing_as(RESUMER), agent_run(**run_provenance(context)):
                if journaled.is_async or not _threaded(context):
                    return await journaled.ainvoke(args, kwargs, call_id=call_id)
                try:
                    return await finished_off_loop(
                        lambda: journaled.invoke(args, kwargs, call_id=call_id)
                    )
                except FinishedThenCancelled as cancelled:
                    # The call ran to its end and is journaled; the caller gets a plain cancel.
                    raise asyncio.CancelledError(*cancelled.args) from cancelled
        except ApprovalMissingError:
            # Confirmed in ADK, not approved in sagacity. Raised, the call gets no answer,
            # so ADK keeps its confirmation request open: approve, and confirm again.
            raise
        except ApprovalError as refusal:
            if current_scope() is None:
                raise
            return _refused(refusal)

    call.__name__ = tool.name
    call.__qualname__ = getattr(tool.func, "__qualname__", tool.name)
    call.__module__ = getattr(tool.func, "__module__", __name__)
    call.__doc__ = inspect.getdoc(tool.func)
    call.__annotations__ = hints
    # inspect.signature() reads __signature__: ADK derives the declaration from it.
    call.__dict__["__signature__"] = signature
    return call, journaled, context_name, passes_context


class _ConfirmationPolicy:
    """An IRREVERSIBLE tool's `require_confirmation`: asks sagacity about each call.

    ADK asks it with the call's arguments as the function will get them (its context
    among them) when the model calls the tool, when a confirmation resumes the call, and
    again before it runs it.
    """

    def __init__(self, tool: SagaTool, context_name: str, *, passes_context: bool) -> None:
        self.tool = tool
        self.context_name = context_name
        self.passes_context = passes_context

    async def __call__(self, *args: Any, **kwargs: Any) -> bool:
        """True while sagacity has no usable approval for this call.

        The first time a call is seen this journals AWAITING_APPROVAL and stores the
        request. When a confirmation resumes a call sagacity asked about, the answer is
        True without asking again: the call's own approval check decides, once, when ADK
        runs it. A `ToolConfirmation` with `confirmed=False` is journaled REJECTED, and
        answers True: ADK then tells the model the call was rejected. A refusal (another
        tool under an asked id, an id that ran before with other input) is journaled
        REFUSED and answers True: sagacity raises it when the saga's work returns.
        Outside a saga the answer is True: should a confirmation let the call run, it
        raises `NoSagaError`.
        """
        context = kwargs[self.context_name]
        call_id = _call_id(context)
        if self.passes_context:
            call_args = kwargs  # the tool takes the context: the call passes it on
        else:
            call_args = {k: v for k, v in kwargs.items() if k != self.context_name}
        confirmation = getattr(context, "tool_confirmation", None)
        if confirmation is not None and not confirmation.confirmed:
            if current_scope() is None:
                return True  # a "no" given after the saga ended (a worker's): nothing to journal
            # Decided meanwhile (rejected, or run), it is not declined: ADK does not run it.
            with contextlib.suppress(ApprovalError):
                await self.tool.adecline(
                    args,
                    call_args,
                    call_id=call_id,
                    source=CONFIRMATION_SOURCE,
                    reason=_reason(confirmation.payload),
                )
            return True
        scope = current_scope()
        if (
            scope is not None
            and call_id is not None
            and _confirming(context, call_id, self.tool.name)
        ):
            await scope.settled()  # the history is read under the scope's lock
            with scope.lock:
                asked = call_id in scope.history.asked
            if asked:
                # A confirmation resumes a call sagacity asked about: ADK may run it, and
                # the call's own approval check decides, once (asking here as well would
                # journal a refusal at each of ADK's checks).
                return True
        try:
            with pausing_as(RESUMER), agent_run(**run_provenance(context)):
                waiting = await self.tool.apending_approval(args, call_args, call_id=call_id)
        except NoSagaError:
            # Outside a saga ADK holds the call for confirmation; should a confirmation
            # let it run, the call raises NoSagaError itself.
            return True
        except _REFUSALS:
            # Journaled REFUSED, and raised when the saga's work returns. ADK holds the
            # call; should a confirmation let it run, the call is refused again.
            return True
        return waiting is not None


def _refused(refusal: ApprovalError) -> dict[str, str]:
    """What the model is told of a call sagacity refused for good; nothing ran.

    Raised, the refusal would make ADK cancel the calls of the same turn that are still
    running (an approved one among them, left in doubt); sagacity raises it when the
    saga's work returns instead.
    """
    return {"error": f"sagacity refused this call, and it did not run: {refusal}"}


def _confirming(context: Any, call_id: str, tool_name: str) -> bool:
    """Whether ADK is resuming this call with a `ToolConfirmation`, or checking one for it.

    True once the session holds an `adk_request_confirmation` for this call of this tool:
    ADK asked the client about it before, so this is not the model's first call of it (a
    model reusing the id for another tool is asked about, and refused).
    """
    if getattr(context, "tool_confirmation", None) is not None:
        return True
    session = getattr(context, "session", None)
    for event in getattr(session, "events", None) or []:
        if event.author == "user":
            continue
        for function_call in event.get_function_calls():
            if function_call.name != REQUEST_CONFIRMATION:
                continue
            original = (function_call.args or {}).get("originalFunctionCall")
            if (
                isinstance(original, dict)
                and original.get("id") == call_id
                and original.get("name") == tool_name
            ):
                return True
    return False


def _reason(payload: object) -> str:
    """The reason a declining `ToolConfirmation` gives: its payload's text, or its `reason`."""
    if isinstance(payload, dict):
        payload = payload.get("reason")
    return payload if isinstance(payload, str) else ""


def run_provenance(context: Any) -> dict[str, str | None]:
    """What ADK's `ToolContext` says of the run making a call, for `initiated_by`.

    `invocation_id`: the invocation (one user turn's run); `agent`: the agent's name (ADK
    says "unknown" when it has none: left out). The model is not recorded: the tool
    context reaches the agent only through ADK's private invocation context.
    """
    name = getattr(context, "agent_name", None)
    return {
        "invocation_id": getattr(context, "invocation_id", None),
        "agent": name if name != "unknown" else None,
    }


def _call_id(context: object) -> str | None:
    call_id = getattr(context, "function_call_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


def _threaded(context: object) -> bool:
    """Whether ADK runs sync tools on its tool thread pool in this run (see `RunConfig`)."""
    run_config = getattr(context, "run_config", None)
    pool = getattr(run_config, "tool_thread_pool_config", None)
    return pool is not None


def _is_context(annotation: Any) -> bool:
    """Whether ADK injects its context into a parameter with this annotation."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return isinstance(annotation, type) and issubclass(annotation, Context)
