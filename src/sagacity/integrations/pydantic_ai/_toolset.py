"""`SagaToolset`: journal every call of a PydanticAI toolset's tools in the open saga."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NoReturn

from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset

from sagacity._scope import current_call
from sagacity.annotations import Reversibility, compensable
from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError
from sagacity.integrations.pydantic_ai._classify import classify_exception
from sagacity.journal import JsonValue
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["METADATA_KEY", "JournalPolicy", "SagaToolset", "saga_toolset"]

METADATA_KEY = "sagacity"
"""The key sagacity sets in `ToolDefinition.metadata` (never sent to the model) and in the
metadata of the `ApprovalRequired` it raises."""

_COMPENSATION_ATTRIBUTE = "__sagacity_pydantic_ai_compensation__"


class JournalPolicy:
    """Which tools of a toolset are journaled, and how.

    Tools wrapped by `Sagacity.wrap` are journaled as they were declared. Any other tool
    (an MCP server's, a plain function toolset's) is known only by the name the agent
    calls it by, so its reversibility and compensation are given here.

    Args:
        sagacity: The Sagacity whose sagas the calls are journaled in.
        tools: Tools wrapped by `Sagacity.wrap`, journaled as declared.
        compensations: Other tools that are COMPENSATABLE, each with its compensation (a
            callable taking no arguments or one `CompensationContext`), checked now.
        irreversible: Other tools that are IRREVERSIBLE: every call waits for a human's
            approval of its exact input.
        read_only: Other tools that change nothing: called straight through, not journaled.
        unlisted: The reversibility every other tool is journaled with. Such a tool has no
            compensation: when its saga fails, the walk records COMPENSATION_FAILED for it
            and the saga ends COMPENSATION_FAILED, naming it as still dirty. IRREVERSIBLE
            makes every unlisted tool wait for approval.

    Raises:
        ConfigurationError: A tool is named twice, a compensation has the wrong signature,
            a name with a compensation is not a Python identifier, or the Sagacity already
            has a tool of that name with another compensation.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        *,
        tools: Iterable[SagaTool] = (),
        compensations: Mapping[str, Callable[..., Any]] | None = None,
        irreversible: Collection[str] = (),
        read_only: Collection[str] = (),
        unlisted: Reversibility = Reversibility.COMPENSATABLE,
    ) -> None:
        tools = list(tools)
        self.sagacity = sagacity
        self.unlisted = unlisted
        self.token = uuid.uuid4().hex[:16]
        """Tells this policy's marks in tool metadata from those of another SagaToolset."""
        self._journaled: dict[str, SagaTool] = {}
        """Journaled tools by name: the declared ones now, the others on their first call."""
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
        """The journaled tool a call of `name` runs through; None for a read-only tool."""
        if name in self._read_only:
            return None
        found = self._journaled.get(name)
        if found is None:
            reversibility = self._reversibility.get(name, self.unlisted)
            found = _journaled_tool(self.sagacity, name, tool_def.description or "", reversibility)
            self._journaled[name] = found
        return found

    def mark(self, name: str, tool_def: ToolDefinition) -> dict[str, JsonValue]:
        """What this policy records in the tool's metadata (never sent to the model)."""
        tool = self.tool_for(name, tool_def)
        return {
            "policy": self.token,
            "journaled": tool is not None,
            "reversibility": None if tool is None else tool.reversibility.value,
        }


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
    PydanticAI's `tool_call_approved` is never trusted alone.

    A tool that a SagaToolset further in already journals is passed through untouched,
    so `saga_toolset` and `SagaCapability` may be combined.
    """

    policy: JournalPolicy
    """Which tools are journaled, and how."""

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
        """Call the tool through the wrapped toolset, journaled in the open saga."""
        journaled = self._journaled(name, ctx, tool)
        if journaled is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        return await journaled.ainvoke(
            (_FrameworkCall(self.wrapped, name, ctx, tool),),
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
        self, name: str, ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> SagaTool | None:
        mark = (tool.tool_def.metadata or {}).get(METADATA_KEY)
        if isinstance(mark, dict) and mark.get("policy") != self.policy.token:
            return None  # a SagaToolset further in journals it
        running = current_call()
        if running is not None and running.call_id == ctx.tool_call_id:
            return None  # a SagaToolset further out journals this call already
        return self.policy.tool_for(name, tool.tool_def)


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
    tools: list[SagaTool] = []
    for source in sources:
        if isinstance(source, SagaTool):
            tools.append(source)
        else:
            tools.extend(sagacity.wrap(source))
    functions: FunctionToolset[Any] = FunctionToolset(**options)
    for tool in tools:
        functions.add_function(tool.func, name=tool.name)
    return SagaToolset(functions, JournalPolicy(sagacity, tools=tools))


class _FrameworkCall:
    """The wrapped toolset's own call of one tool: what a journaled call runs."""

    __slots__ = ("ctx", "name", "tool", "toolset")

    def __init__(
        self,
        toolset: AbstractToolset[Any],
        name: str,
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> None:
        self.toolset = toolset
        self.name = name
        self.ctx = ctx
        self.tool = tool

    async def __call__(self, tool_args: dict[str, Any]) -> Any:
        return await self.toolset.call_tool(self.name, tool_args, self.ctx, self.tool)


async def _through_framework(call: _FrameworkCall, /, **tool_args: Any) -> Any:
    """Run the call the way PydanticAI would: sync tools in a worker thread, timeouts, ctx."""
    return await call(tool_args)


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
    return {
        "saga_id": request.saga_id,
        "request_id": request.request_id,
        "tool_name": request.tool_name,
        "call_id": request.call_id,
        "input": request.input,
        "input_sha256": request.input_sha256,
        "reason": request.reason,
        "expires_at": None if request.expires_at is None else request.expires_at.isoformat(),
    }


def _register_compensation(sagacity: Sagacity, name: str, compensation: Callable[..., Any]) -> None:
    """Declare a foreign tool's compensation through `Sagacity.wrap`, which checks it now.

    The tool registered under `name` only carries the compensation: its calls run through
    the PydanticAI toolset. Declaring the same compensation again (a second agent, a
    copy of the capability) is a no-op.
    """
    if not name.isidentifier():
        raise ConfigurationError(
            f"PydanticAI tool {name!r} is given a compensation, but sagacity keeps "
            "compensations under tool names that are Python identifiers; expose the tool "
            f"under another name with toolset.renamed({{'new_name': {name!r}}})"
        )
    try:
        existing: SagaTool | None = sagacity.tool(name)
    except ConfigurationError:
        existing = None
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
