"""`SagaToolset`: journal every call of a PydanticAI toolset's tools in the open saga."""

from __future__ import annotations

import contextvars
import dataclasses
import re
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NoReturn

from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset

from sagacity.adapter import SagaScope, current_scope
from sagacity.annotations import Reversibility, compensable
from sagacity.approval import ApprovalRequest
from sagacity.errors import ApprovalError, ConfigurationError, SagaStateError
from sagacity.integrations.pydantic_ai._classify import classify_exception
from sagacity.journal import JsonValue
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["DENIAL_SOURCE", "METADATA_KEY", "JournalPolicy", "SagaToolset", "saga_toolset"]

METADATA_KEY = "sagacity"
"""The key sagacity sets in `ToolDefinition.metadata` (never sent to the model) and in the
metadata of the `ApprovalRequired` it raises."""

DENIAL_SOURCE = "pydantic-ai ToolDenied"
"""The `source` of the REJECTED entry journaled for a call PydanticAI denied."""

_COMPENSATION_ATTRIBUTE = "__sagacity_pydantic_ai_compensation__"

_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""The tool names `Sagacity.wrap` accepts."""

_handed_down: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "sagacity_pydantic_ai_handed_down", default=None
)
"""The argument dict of the call a SagaToolset journals and hands down to the toolset it
wraps: the very object, as every call has a dict of its own."""


class JournalPolicy:
    """Which tools of a toolset are journaled, and how.

    Tools wrapped by `Sagacity.wrap` are journaled as they were declared, whether they are
    given here or only share the name the agent calls them by. Any other tool (an MCP
    server's, a plain function toolset's) is known only by that name, so its
    reversibility and compensation are given here; a tool given nothing is IRREVERSIBLE.

    Args:
        sagacity: The Sagacity whose sagas the calls are journaled in.
        tools: Tools wrapped by `Sagacity.wrap`, journaled as declared.
        compensations: Other tools that are COMPENSATABLE, each with its compensation (a
            callable taking no arguments or one `CompensationContext`), checked now.
        irreversible: Other tools that are IRREVERSIBLE: every call waits for a human's
            approval of its exact input.
        read_only: Other tools that change nothing: called straight through, not journaled.
            The name is all that is checked: whatever the toolset runs under it is trusted
            to change nothing. A name `Sagacity.wrap` declared is journaled all the same.
        unlisted: The reversibility every other tool is journaled with; IRREVERSIBLE (the
            default) makes each of its calls wait for a human's approval. Such a tool has
            no compensation: with COMPENSATABLE, a failed saga records COMPENSATION_FAILED
            for it and ends COMPENSATION_FAILED, naming it as still dirty.

    Raises:
        ConfigurationError: A tool is named twice, a compensation has the wrong signature,
            a name with a compensation is not a valid sagacity tool name, or the Sagacity
            already has a tool of that name with another compensation.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        *,
        tools: Iterable[SagaTool] = (),
        compensations: Mapping[str, Callable[..., Any]] | None = None,
        irreversible: Collection[str] = (),
        read_only: Collection[str] = (),
        unlisted: Reversibility = Reversibility.IRREVERSIBLE,
    ) -> None:
        tools = list(tools)
        self.sagacity = sagacity
        self.unlisted = unlisted
        self.token = uuid.uuid4().hex[:16]
        """Tells this policy's marks in tool metadata from those of another SagaToolset."""
        self._journaled: dict[str, SagaTool] = {}
        """The tools given by `tools`, by name."""
        self._built: dict[tuple[str, Reversibility], SagaTool] = {}
        """The journaled tools of the other names, built on their first call."""
        self._reversibility: dict[str, Reversibility] = {}
        """The declared reversibility of tools not wrapped by `Sagacity.wrap`."""
        self._read_only = frozenset(read_only)
        compensations = dict(compensations or {})
        where: dict[str, str] = {}
        groups: list[tuple[str, Iterable[str]]] = [
            ("wrapped by Sagacity.wrap", [tool.name for tool in tools]),
            ("given a compensation", compensations),
            ("IRREVERSIBLE", irreversible),
            ("read-only", read_only),
        ]
        for group, names in groups:
            for name in names:
                if name in where:
                    raise ConfigurationError(
                        f"tool {name!r} is declared twice ({where[name]} and {group}); "
                        "declare each tool once"
                    )
                where[name] = group
        for tool in tools:
            if tool.owner is not sagacity:
                raise ConfigurationError(
                    f"tool {tool.name!r} was wrapped by another Sagacity; wrap it with the "
                    "Sagacity that journals this toolset"
                )
            self._journaled[tool.name] = _journaled_tool(
                sagacity, tool.name, tool.description, tool.reversibility
            )
        for name, compensation in compensations.items():
            _register_compensation(sagacity, name, compensation)
            self._reversibility[name] = Reversibility.COMPENSATABLE
        for name in irreversible:
            self._reversibility[name] = Reversibility.IRREVERSIBLE
        sagacity.add_classifier(classify_exception)

    def tool_for(self, name: str, tool_def: ToolDefinition) -> SagaTool | None:
        """The journaled tool a call of `name` runs through; None for a read-only tool.

        In order: a tool given by `tools`; a name given a compensation or declared
        IRREVERSIBLE here; a tool of this name wrapped by the Sagacity (its reversibility,
        and its compensation, which the walk finds by name); a read-only name; `unlisted`.
        """
        found = self._journaled.get(name)
        if found is not None:
            return found
        description = tool_def.description or ""
        reversibility = self._reversibility.get(name)
        if reversibility is None:
            wrapped = _wrapped(self.sagacity, name)
            if wrapped is not None:
                reversibility = wrapped.reversibility
                description = wrapped.description or description
            elif name in self._read_only:
                return None
            else:
                reversibility = self.unlisted
        found = self._built.get((name, reversibility))
        if found is None:
            found = _journaled_tool(self.sagacity, name, description, reversibility)
            self._built[name, reversibility] = found
        return found

    def mark(self, name: str, tool_def: ToolDefinition) -> dict[str, JsonValue]:
        """What this policy records in the tool's metadata (never sent to the model)."""
        tool = self.tool_for(name, tool_def)
        return {
            "policy": self.token,
            "journaled": tool is not None,
            "reversibility": None if tool is None else tool.reversibility.value,
        }


@dataclasses.dataclass(eq=False)
class _Run:
    """What the copies of a SagaToolset made for one agent run share."""

    scope: SagaScope
    """The saga open when the run began: the run calls tools only while it is open."""
    messages: list[ModelMessage] = dataclasses.field(default_factory=list)
    """The run's live message history, as the last step showed it."""


@dataclasses.dataclass
class SagaToolset(WrapperToolset[AgentDepsT]):
    """A toolset whose every tool call is journaled in the saga open around the agent run.

    It journals at `call_tool`, below PydanticAI's tool manager and every capability
    hook: it sees the tool's raw exception even when PydanticAI or a capability turns it
    into a message for the model, and a swallowed failure still fails the saga. The
    definitions the model is sent are the wrapped toolset's, unchanged but for a
    `metadata["sagacity"]` entry (metadata is never sent to the model).

    The call id is PydanticAI's `tool_call_id`. An IRREVERSIBLE call that has no
    approval raises PydanticAI's `ApprovalRequired` (its metadata under the key
    `"sagacity"`): the run ends with `DeferredToolRequests`. When the run is resumed with
    `DeferredToolResults`, sagacity's own check decides whether the call runs:
    PydanticAI's `tool_call_approved` is never trusted alone. A call that sagacity still
    holds, or refuses, is deferred again rather than raised, so the calls beside it run
    to their end. A call PydanticAI denied (`ToolDenied`) is journaled as REJECTED as soon
    as the denial shows in the run's messages.

    A tool that a SagaToolset further in journals (its metadata says so) is passed
    through untouched, and so is a call that a SagaToolset further out is journaling
    (it hands down the very argument dict it journaled), so `saga_toolset` and
    `SagaCapability` may be combined: each call is journaled once.

    A run that begins inside a saga calls its tools only while that saga's work runs: a
    call made after the work returned (a streamed run consumed later) raises
    `SagaStateError` and does not run.
    """

    policy: JournalPolicy
    """Which tools are journaled, and how."""
    _run: _Run | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    """The run this copy belongs to; None outside a saga."""

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        """This toolset for one run, bound to the saga open where the run begins."""
        scope = current_scope()
        return _bound(await super().for_run(ctx), None if scope is None else _Run(scope))

    async def for_run_step(self, ctx: RunContext[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        """This toolset for one step of the run, bound to the same saga.

        PydanticAI prepares the toolset for each step before the step's calls run, with
        the run's messages so far: the history the run began from and the results of the
        step before. Their denials are journaled here, before anything else of the step.
        """
        toolset = _bound(await super().for_run_step(ctx), self._run)
        if self._run is not None:
            self._run.messages = ctx.messages
        if isinstance(toolset, SagaToolset):
            await toolset._decline_denied(ctx.messages)
        return toolset

    async def __aexit__(self, *args: Any) -> bool | None:
        """Leave the run; denials of its last step, which no later step shows, are journaled."""
        try:
            if args and args[0] is None and self._run is not None:
                await self._decline_denied(self._run.messages)
        finally:
            exited = await super().__aexit__(*args)
        return exited

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        """The wrapped toolset's tools, each marked with how it is journaled."""
        tools = await super().get_tools(ctx)
        return {name: self._marked(name, tool) for name, tool in tools.items()}

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[AgentDepsT],
        tool: ToolsetTool[AgentDepsT],
    ) -> Any:
        """Call the tool through the wrapped toolset, journaled in the open saga.

        Raises:
            ApprovalRequired: The call is IRREVERSIBLE and may not run now: it waits for
                approval, or a check refused it (sagacity raises the refusal when the
                saga's work returns). The tool is not run.
            SagaStateError: The run began inside a saga whose work has returned (a streamed
                run consumed after it): the tool is not run, as no saga would journal it.
        """
        run = self._run
        if run is not None and current_scope() is not run.scope:
            raise SagaStateError(
                f"saga {run.scope.saga_id!r}: the agent run began inside it, but tool {name!r} "
                "was called after its work returned, so the call is not run. Consume a "
                "streamed run (run_stream, iter) inside the saga's work"
            )
        journaled = self._journaled(name, tool_args, tool)
        if journaled is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        framework_call = _FrameworkCall(self.wrapped, name, tool_args, ctx, tool)
        if journaled.reversibility is Reversibility.IRREVERSIBLE:
            await _defer_unless_approved(journaled, framework_call, ctx.tool_call_id)
        return await journaled.ainvoke(
            (framework_call,),
            tool_args,
            call_id=ctx.tool_call_id,
            on_approval_needed=_pause_natively,
        )

    def _marked(self, name: str, tool: ToolsetTool[AgentDepsT]) -> ToolsetTool[AgentDepsT]:
        metadata = tool.tool_def.metadata or {}
        if METADATA_KEY in metadata:
            return tool  # a SagaToolset further in journals it
        marked = {**metadata, METADATA_KEY: self.policy.mark(name, tool.tool_def)}
        return dataclasses.replace(
            tool, tool_def=dataclasses.replace(tool.tool_def, metadata=marked)
        )

    def _journaled(
        self, name: str, tool_args: dict[str, Any], tool: ToolsetTool[AgentDepsT]
    ) -> SagaTool | None:
        if _handed_down.get() is tool_args:
            # A SagaToolset further out journals this very call. The dict's identity, not
            # the call id, tells: an agent run inside a tool may reuse the running call's
            # id, and its calls are journaled (the core refuses an id used twice).
            return None
        mark = (tool.tool_def.metadata or {}).get(METADATA_KEY)
        if isinstance(mark, dict) and mark.get("policy") != self.policy.token:
            # The SagaToolset that marked it journals it: one further in, or one further
            # out that marked it again because a toolset between dropped this one's mark.
            return None
        return self.policy.tool_for(name, tool.tool_def)

    async def _decline_denied(self, messages: list[ModelMessage]) -> None:
        """Journal REJECTED for each call of `messages` that PydanticAI denied and sagacity holds.

        PydanticAI never calls a toolset for a denied call (`ToolDenied`, or `False` in
        `DeferredToolResults.approvals`): it gives the model a result with outcome
        `"denied"`. That result is where the denial shows, so the request the call waits
        on is declined here: the call can no longer run, however it is approved or resumed.
        """
        run = self._run
        if run is None or current_scope() is not run.scope:
            return
        scope = run.scope
        if scope.owner is not self.policy.sagacity:
            return
        denied = [
            part
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart) and part.outcome == "denied"
        ]
        if not denied:
            return
        await scope.settled()  # the history is read under the scope's lock
        with scope.lock:
            open_requests = scope.history.open_requests()
        waiting = {(entry.call_id, entry.tool_name) for entry in open_requests}
        for part in denied:
            if (part.tool_call_id, part.tool_name) not in waiting:
                continue  # sagacity never asked for it, or it was decided already
            decliner = _journaled_tool(
                self.policy.sagacity, part.tool_name, "", Reversibility.IRREVERSIBLE
            )
            try:
                await decliner.adecline(
                    (None,),
                    {},
                    call_id=part.tool_call_id,
                    source=DENIAL_SOURCE,
                    reason=str(part.content),
                )
            except ApprovalError:
                continue  # decided meanwhile in another process: rejected, or run


def _bound(toolset: AbstractToolset[Any], run: _Run | None) -> AbstractToolset[Any]:
    """`toolset`, or a copy of it, bound to `run` if it is a SagaToolset."""
    if not isinstance(toolset, SagaToolset) or toolset._run is run:
        return toolset
    bound = dataclasses.replace(toolset)
    bound._run = run
    return bound


async def _defer_unless_approved(tool: SagaTool, call: _FrameworkCall, call_id: str | None) -> None:
    """Raise PydanticAI's `ApprovalRequired` unless this IRREVERSIBLE call may run now.

    A call that waits for approval, or one an approval check refuses, is deferred:
    PydanticAI lets the calls beside it finish, and the run ends with
    `DeferredToolRequests`. Raised through PydanticAI, a refusal would cancel them
    mid-call (an approved sibling would be left in doubt). The refusal is still raised by
    `Sagacity.saga` when the work returns. A replay refusal (`InDoubtError`,
    `ReplayMismatchError`: the call id ran before) is raised as it is, as for every tool.
    """
    scope = current_scope()
    if scope is None or scope.failed:
        return  # the call itself says why it does not run (NoSagaError, SagaStateError)
    try:
        waiting = await tool.apending_approval((call,), call.tool_args, call_id=call_id)
    except ApprovalError as refusal:
        raise ApprovalRequired(
            metadata={
                METADATA_KEY: {
                    "refused": type(refusal).__name__,
                    "error": str(refusal),
                    "call_id": call_id,
                    "tool_name": tool.name,
                }
            }
        ) from refusal
    if waiting is not None:
        _pause_natively(waiting)


def saga_toolset(sagacity: Sagacity, *sources: object, **options: Any) -> SagaToolset[Any]:
    """Give an agent the tools of `sources`, journaled in the saga open around its run.

    Args:
        sagacity: The Sagacity that wraps the tools and journals their calls.
        *sources: What `Sagacity.wrap` takes (objects with `compensable` methods, declared
            functions), or `SagaTool`s it returned. A tool may take PydanticAI's
            `RunContext` as its first parameter; it is left out of the journaled input.
        **options: Passed to the `FunctionToolset` built from the functions (`max_retries`,
            `timeout`, `docstring_format`, `id`, ...).

    Returns:
        A `SagaToolset` around a `FunctionToolset` of the original functions, so the
        definitions sent to the model are exactly those of the unwrapped functions.
    """
    tools = sagacity.wrap(*sources)
    functions: FunctionToolset[Any] = FunctionToolset(**options)
    for tool in tools:
        functions.add_function(tool.func, name=tool.name)
    return SagaToolset(functions, JournalPolicy(sagacity, tools=tools))


class _FrameworkCall:
    """The wrapped toolset's own call of one tool: what a journaled call runs."""

    __slots__ = ("ctx", "name", "tool", "tool_args", "toolset")

    def __init__(
        self,
        toolset: AbstractToolset[Any],
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> None:
        self.toolset = toolset
        self.name = name
        self.tool_args = tool_args
        self.ctx = ctx
        self.tool = tool

    async def __call__(self) -> Any:
        token = _handed_down.set(self.tool_args)
        try:
            return await self.toolset.call_tool(self.name, self.tool_args, self.ctx, self.tool)
        finally:
            _handed_down.reset(token)


async def _through_framework(call: _FrameworkCall, /, **tool_args: Any) -> Any:
    """Run the call the way PydanticAI would: sync tools in a worker thread, timeouts, ctx.

    `tool_args` is what is journaled; the call passes on the dict it was given, equal to
    it, whose identity tells a SagaToolset further in that this call is journaled.
    """
    return await call()


def _journaled_tool(
    sagacity: Sagacity, name: str, description: str, reversibility: Reversibility
) -> SagaTool:
    # The journaled input is the validated arguments the model sent: `call` is left out,
    # and so is `RunContext`, which PydanticAI adds only when it calls the function.
    return SagaTool(
        sagacity,
        _through_framework,
        name=name,
        description=description,
        reversibility=reversibility,
        excluded=frozenset({"call"}),
    )


def _pause_natively(request: ApprovalRequest) -> NoReturn:
    raise ApprovalRequired(metadata={METADATA_KEY: _approval_metadata(request)})


def _approval_metadata(request: ApprovalRequest) -> dict[str, JsonValue]:
    """What an approver is shown in `DeferredToolRequests.metadata[tool_call_id]["sagacity"]`."""
    return request.to_json()


def _wrapped(sagacity: Sagacity, name: str) -> SagaTool | None:
    """The tool `Sagacity.wrap` declared under `name`, if there is one."""
    try:
        return sagacity.tool(name)
    except ConfigurationError:
        return None


def _register_compensation(sagacity: Sagacity, name: str, compensation: Callable[..., Any]) -> None:
    """Declare a foreign tool's compensation through `Sagacity.wrap`, which checks it now.

    The tool registered under `name` only carries the compensation: its calls run through
    the PydanticAI toolset. Declaring the same compensation again (a second agent, a
    copy of the capability) is a no-op.
    """
    if not _TOOL_NAME.fullmatch(name):
        raise ConfigurationError(
            f"PydanticAI tool {name!r} is given a compensation, but sagacity keeps "
            "compensations under tool names of 1 to 64 letters, digits, '_', '-' or '.'; "
            f"expose the tool under another name with toolset.renamed({{'new_name': {name!r}}})"
        )
    existing = _wrapped(sagacity, name)
    if existing is not None:
        if getattr(existing.func, _COMPENSATION_ATTRIBUTE, None) == compensation:
            return
        raise ConfigurationError(
            f"tool {name!r} is already wrapped by this Sagacity ({existing.func.__qualname__}); "
            "a PydanticAI tool given a compensation must not share its name with another tool"
        )

    def foreign_tool(**tool_args: Any) -> NoReturn:
        raise ConfigurationError(
            f"tool {name!r} belongs to a PydanticAI toolset and runs only through it; resume "
            "its saga with Sagacity.aresume_saga(saga_id, work), work re-running the agent"
        )

    foreign_tool.__name__ = name
    foreign_tool.__qualname__ = f"pydantic_ai_tool.{name}"
    setattr(foreign_tool, _COMPENSATION_ATTRIBUTE, compensation)
    sagacity.wrap(compensable(by=compensation, name=name)(foreign_tool))
