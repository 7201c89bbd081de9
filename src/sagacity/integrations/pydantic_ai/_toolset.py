"""`SagaToolset`: journal every call of a PydanticAI toolset's tools in the open saga."""

from __future__ import annotations

import dataclasses
from typing import Any, NoReturn

from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset

from sagacity.adapter import SagaScope, agent_run, current_scope, pausing_as
from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.errors import ApprovalError, SagaStateError
from sagacity.integrations.pydantic_ai._calls import FrameworkCall, handed_down, journaled_tool
from sagacity.integrations.pydantic_ai._policy import JournalPolicy
from sagacity.integrations.pydantic_ai._resumer import RESUMER
from sagacity.journal import JsonValue
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = [
    "DENIAL_SOURCE",
    "METADATA_KEY",
    "JournalPolicy",
    "SagaToolset",
    "run_provenance",
    "saga_toolset",
]

METADATA_KEY = "sagacity"
"""The key sagacity sets in `ToolDefinition.metadata` (never sent to the model) and in the
metadata of the `ApprovalRequired` it raises."""

DENIAL_SOURCE = "pydantic-ai ToolDenied"
"""The `source` of the REJECTED entry journaled for a call PydanticAI denied."""


def run_provenance(ctx: RunContext[Any]) -> dict[str, str | None]:
    """What PydanticAI's `RunContext` says of the run making a call, for `initiated_by`.

    `model`: the model's `model_name` (as the model reports it, such as `gpt-4o` or
    `function:script:`); `run_id`: the run's `run_id` (the one passed to `Agent.run`, or
    PydanticAI's own); `agent`: the agent's `name`, when it has one.
    """
    agent = ctx.agent
    return {
        "model": getattr(ctx.model, "model_name", None),
        "run_id": ctx.run_id,
        "agent": None if agent is None else agent.name,
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
        framework_call = FrameworkCall(self.wrapped, name, tool_args, ctx, tool)
        # A request asked here is resumed with DeferredToolResults, and records the run.
        with pausing_as(RESUMER), agent_run(**run_provenance(ctx)):
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
        if handed_down.get() is tool_args:
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
            decliner = journaled_tool(
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


async def _defer_unless_approved(tool: SagaTool, call: FrameworkCall, call_id: str | None) -> None:
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


def _pause_natively(request: ApprovalRequest) -> NoReturn:
    raise ApprovalRequired(metadata={METADATA_KEY: _approval_metadata(request)})


def _approval_metadata(request: ApprovalRequest) -> dict[str, JsonValue]:
    """What an approver is shown in `DeferredToolRequests.metadata[tool_call_id]["sagacity"]`."""
    return request.to_json()
