"""An MCP server whose tools are journaled: `mcp_server` and the `SagaExtension` it uses."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ToolBinding
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import find_resolved_parameters
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp.types import CallToolRequestParams, CallToolResult

from sagacity.errors import SagacityError
from sagacity.integrations.mcp._control import (
    CONTROL_TOOLS,
    call_control_tool,
    control_tool_bindings,
    refuse_collisions,
)
from sagacity.integrations.mcp._end import handle_compensate_request, handle_end_request
from sagacity.integrations.mcp._sagas import current_tool_call, open_sagas
from sagacity.integrations.mcp._wire import (
    COMPENSATE_METHOD,
    END_METHOD,
    EXTENSION_ID,
    EndSagaParams,
    EndSagaResult,
    SagaOf,
    awaiting_result,
    call_id_from_meta,
    classify_mcp_error,
    error_result,
    saga_from_meta,
)
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["SagaExtension", "mcp_server", "tool_function"]


class SagaExtension(Extension):
    """Puts an `MCPServer`'s tool calls under sagas, and contributes wrapped tools.

    Pass it to `MCPServer(extensions=[...])`. It registers the wrapped tools of
    `sources` (a function per tool with the tool's own signature, so MCP derives the
    same schema), serves the `sagacity/end` and `sagacity/compensate` requests, and
    intercepts every `tools/call`:
    a call whose `_meta` names a saga runs inside that saga, so wrapped tools journal
    INTENT before and EXECUTED or FAILED after, seeing the raw exception that MCP then
    hides behind a generic `is_error` result. An IRREVERSIBLE call that waits for
    approval is not run and answers the `[AWAITING_APPROVAL]` text.

    Args:
        sagacity: Journals the calls.
        *sources: Objects with `compensable` methods, or functions, as for
            `Sagacity.wrap`; or `SagaTool`s already wrapped by `sagacity`.
        saga_of: Picks the saga of a call; by default `_meta["sagacity/saga_id"]`.
        control_tools: Also list the tools `sagacity_compensate` and `sagacity_end`,
            which do what the requests do for clients that can call only tools. Off by
            default: a model can call a listed tool, and any caller may then end or
            compensate any saga of the journal.

    Raises:
        ConfigurationError: With `control_tools`, a tool of `sources` has a control
            tool's name.
    """

    identifier = EXTENSION_ID

    def __init__(
        self,
        sagacity: Sagacity,
        *sources: object,
        saga_of: SagaOf | None = None,
        control_tools: bool = False,
    ) -> None:
        self.sagacity = sagacity
        self.saga_tools: list[SagaTool] = sagacity.wrap(*sources)
        """The journaled tools this extension registers."""
        self.control_tools = control_tools
        """Whether `sagacity_compensate` and `sagacity_end` are listed and answered."""
        if control_tools:
            refuse_collisions([tool.name for tool in self.saga_tools], "mcp_server")
        self._saga_of = saga_of or saga_from_meta
        self._sagas = open_sagas(sagacity)
        sagacity.add_classifier(classify_mcp_error)

    def tools(self) -> Sequence[ToolBinding]:
        """The wrapped tools, each registered under its sagacity name; the control tools."""
        wrapped = [
            ToolBinding(fn=tool_function(tool), kwargs={"name": tool.name})
            for tool in self.saga_tools
        ]
        return [*wrapped, *control_tool_bindings()] if self.control_tools else wrapped

    def methods(self) -> Sequence[MethodBinding]:
        """The `sagacity/end` and `sagacity/compensate` requests."""
        return [
            MethodBinding(END_METHOD, EndSagaParams, self._handle_end),
            MethodBinding(COMPENSATE_METHOD, EndSagaParams, self._handle_compensate),
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Run the call inside the saga its request names; outside any saga otherwise."""
        if self.control_tools and params.name in CONTROL_TOOLS:
            # Answered here, outside any saga: joining the saga it names would journal
            # it as one of the saga's calls, and ending would wait for itself.
            return await call_control_tool(self.sagacity, params.name, params.arguments)
        try:
            saga_id = self._saga_of(ctx, params)
            call_id = call_id_from_meta(params)
        except ValueError as error:
            return error_result(f"tool {params.name!r}: {error}")
        if saga_id is None:
            return await call_next(ctx)
        try:
            async with self._sagas.tool_call(saga_id, call_id) as call:
                result = await call_next(ctx)
        except SagacityError as error:  # raised on entering: the saga has ended
            return error_result(f"tool {params.name!r}: {error}")
        if call.awaiting is not None:
            produced = result if isinstance(result, CallToolResult) else None
            return awaiting_result(call.awaiting, produced)
        return result

    async def _handle_end(
        self, ctx: ServerRequestContext[Any, Any], params: EndSagaParams
    ) -> EndSagaResult:
        return await handle_end_request(self.sagacity, params)

    async def _handle_compensate(
        self, ctx: ServerRequestContext[Any, Any], params: EndSagaParams
    ) -> EndSagaResult:
        return await handle_compensate_request(self.sagacity, params)


def mcp_server(
    sagacity: Sagacity,
    *sources: object,
    name: str | None = None,
    saga_of: SagaOf | None = None,
    control_tools: bool = False,
    **options: Any,
) -> MCPServer[Any]:
    """An `MCPServer` exposing the wrapped tools of `sources`, journaled under sagas.

    The tools' names, descriptions and input and output schemas are those MCP derives
    from the unwrapped functions. A `tools/call` joins the saga named in its
    `_meta["sagacity/saga_id"]` (calls without one run outside any saga, where
    IRREVERSIBLE tools refuse) and is journaled under `_meta["sagacity/call_id"]` or the
    next `tool#n`. The saga stays open across requests until `end_saga(sagacity, id)` or
    a `sagacity/end` request ends it. See `docs/integrations/mcp.md`.

    Args:
        sagacity: Journals the calls.
        *sources: As for `Sagacity.wrap`, or `SagaTool`s.
        name: The server's name.
        saga_of: Picks the saga of a call; by default `_meta["sagacity/saga_id"]`.
        control_tools: Also list `sagacity_compensate` and `sagacity_end` (see
            `SagaExtension`); off by default.
        **options: Passed on to `MCPServer`; `extensions=` are kept, after sagacity's.

    Raises:
        ConfigurationError: With `control_tools`, a tool of `sources` has a control
            tool's name.
    """
    extension = SagaExtension(sagacity, *sources, saga_of=saga_of, control_tools=control_tools)
    extensions = [extension, *options.pop("extensions", ())]
    return MCPServer(name, extensions=extensions, **options)


def tool_function(tool: SagaTool) -> Callable[..., Any]:
    """A function with `tool`'s signature for `MCPServer.tool()`, calling it journaled.

    MCP derives the schema from this function exactly as from the tool's own (the
    signature, annotations, name and docstring are the tool's), injects its `Context`
    and `Resolve(...)` parameters as it would (they are left out of the journaled
    input), and runs a sync tool in a worker thread that sees the saga. Sagacity's
    refusals (an unapproved or changed input, a saga that ended) become `ToolError`s,
    whose text the client sees; the tool's own exceptions pass through unchanged.
    """
    injected = set(find_resolved_parameters(tool.func))
    context_parameter = find_context_parameter(tool.func)
    if context_parameter is not None:
        injected.add(context_parameter)
    journaled = tool.excluding(*injected) if injected else tool

    if journaled.is_async:

        @functools.wraps(tool.func)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            call = current_tool_call()
            try:
                if call is None:
                    return await journaled.ainvoke(args, kwargs)
                return await journaled.ainvoke(
                    args,
                    kwargs,
                    call_id=await call.acall_id_for(journaled, args, kwargs),
                    on_approval_needed=call.approval_needed,
                )
            except SagacityError as error:
                raise ToolError(str(error)) from error

        return call_async

    @functools.wraps(tool.func)
    def call_sync(*args: Any, **kwargs: Any) -> Any:
        call = current_tool_call()
        try:
            if call is None:
                return journaled.invoke(args, kwargs)
            return journaled.invoke(
                args,
                kwargs,
                call_id=call.call_id_for(journaled, args, kwargs),
                on_approval_needed=call.approval_needed,
            )
        except SagacityError as error:
            raise ToolError(str(error)) from error

    return call_sync
