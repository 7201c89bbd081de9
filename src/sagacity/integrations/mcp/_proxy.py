"""`mcp_proxy`: a server that puts any upstream MCP server's tools under sagas."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mcp import Client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

from sagacity.annotations import Reversibility, compensable
from sagacity.compensation import CompensationContext
from sagacity.errors import ConfigurationError, SagacityError
from sagacity.integrations.mcp._sagas import (
    ToolCall,
    handle_end_request,
    open_sagas,
)
from sagacity.integrations.mcp._wire import (
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

__all__ = ["Compensate", "UpstreamToolError", "mcp_proxy"]

logger = logging.getLogger(__name__)

CompensationArgs = Callable[[dict[str, Any], CallToolResult], Mapping[str, Any]]
"""Maps a call's input and its upstream result to the arguments of the undoing tool."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Compensate:
    """How to undo a call of an upstream tool: by calling another upstream tool.

    ```python
    Compensate(tool="release", args=lambda input, result: {"id": result.structured_content["id"]})
    ```
    """

    tool: str
    """The upstream tool that undoes the call."""
    args: CompensationArgs | None = None
    """Builds its arguments from the call's input (the journaled JSON arguments) and its
    result (the journaled `CallToolResult`); None passes the call's input unchanged."""
    reversibility: Reversibility = Reversibility.COMPENSATABLE
    """REVERSIBLE or COMPENSATABLE: recorded in the journal for reviewers."""

    def __post_init__(self) -> None:
        if self.reversibility is Reversibility.IRREVERSIBLE:
            raise ConfigurationError(
                f"Compensate(tool={self.tool!r}) cannot be IRREVERSIBLE: an effect with an undo "
                "is COMPENSATABLE; list tools without one in irreversible=[...]"
            )


class UpstreamToolError(Exception):
    """The upstream tool answered `is_error=True`: journaled as FAILED."""

    def __init__(self, tool_name: str, result: CallToolResult) -> None:
        text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
        super().__init__(f"upstream tool {tool_name!r} returned an error: {text}")
        self.tool_name = tool_name
        """The upstream tool."""
        self.result = result
        """Its error result, handed to the proxy's client unchanged."""


async def mcp_proxy(
    sagacity: Sagacity,
    upstream: Client,
    compensations: Mapping[str, Compensate] | None = None,
    *,
    irreversible: Iterable[str] = (),
    read_only: Iterable[str] = (),
    prefix: str = "",
    name: str | None = None,
    saga_of: SagaOf | None = None,
) -> Server[Any]:
    """A server exposing `upstream`'s tools unchanged, each call journaled under a saga.

    Each tool is listed exactly as `upstream` lists it. A call joins the saga named in
    its `_meta` (as for `mcp_server`), is journaled INTENT before it is forwarded and
    EXECUTED (the upstream's `CallToolResult`) or FAILED after; an `is_error` answer is
    a failure and fails the saga. What a tool is, and how it is undone:

    | configured / annotated                      | journaled as   | undone by          |
    |---------------------------------------------|----------------|--------------------|
    | in `compensations`                          | COMPENSATABLE  | the `Compensate`   |
    | in `irreversible`                           | IRREVERSIBLE   | nothing: approval  |
    | in `read_only`, or `readOnlyHint: true`     | REVERSIBLE     | nothing to undo    |
    | any other (MCP defaults: destructive, not   | IRREVERSIBLE   | nothing: approval  |
    | idempotent)                                 |                |                    |

    Annotations are the upstream's own claims, trusted only as far as the upstream is: a
    tool that says `readOnlyHint: true` runs without approval. List a tool of an upstream
    you do not trust in `irreversible` to make it wait for approval whatever it says.

    Each proxy forwards the calls it handles through its own `upstream`. Building a proxy
    again with the same `sagacity` re-binds the journaled tools, so compensations (and
    `resume_saga` running an approved call) go through the newest connection; while the
    earlier connection is still open, an upstream whose tools get the same journal names
    is refused: give it another `prefix`.

    Args:
        sagacity: Journals the calls and runs the compensations.
        upstream: A connected `mcp.Client`; calls and compensations are sent through it.
        compensations: Upstream tool name → how to undo its calls.
        irreversible: Upstream tools that wait for approval whatever they declare.
        read_only: Upstream tools with nothing to undo whatever they declare.
        prefix: Put before each tool's name in the journal, when two upstreams share
            tool names within one Sagacity.
        name: The proxy server's name.
        saga_of: Picks the saga of a call; by default `_meta["sagacity/saga_id"]`.

    Raises:
        ConfigurationError: A configured name is not an upstream tool, a tool is both
            compensated and irreversible, two tools map to one journal name, or a journal
            name is taken by another upstream server or another open connection.
    """
    listed = await _list_tools(upstream)
    compensations = dict(compensations or {})
    irreversible_names, read_only_names = set(irreversible), set(read_only)
    _check_configuration(
        {tool.name for tool in listed}, compensations, irreversible_names, read_only_names
    )
    sagacity.add_classifier(classify_mcp_error)
    server_name = upstream.server_info.name if upstream.server_info is not None else None
    connection = _Upstream(upstream, asyncio.get_running_loop(), server_name)
    tools: dict[str, SagaTool] = {}
    for tool, proxied in _bind(sagacity, prefix, listed, connection, compensations):
        if tool.name in compensations:
            declared = compensations[tool.name]
            compensable(by=proxied.undo, reversibility=declared.reversibility, name=proxied.name)(
                proxied.forward
            )
        elif tool.name not in irreversible_names and (
            tool.name in read_only_names or (tool.annotations and tool.annotations.read_only_hint)
        ):
            compensable(
                by=_nothing_to_undo, reversibility=Reversibility.REVERSIBLE, name=proxied.name
            )(proxied.forward)
        else:
            compensable(reversibility=Reversibility.IRREVERSIBLE, name=proxied.name)(
                proxied.forward
            )
        (tools[tool.name],) = sagacity.wrap(proxied.forward)
    return _ProxyServer(sagacity, listed, tools, saga_of or saga_from_meta, connection).server(
        name or "sagacity-proxy"
    )


def _nothing_to_undo() -> None:
    """The compensation of a read-only call: it changed nothing."""


async def _list_tools(upstream: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await upstream.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools


def _check_configuration(
    upstream_names: set[str],
    compensations: Mapping[str, Compensate],
    irreversible: set[str],
    read_only: set[str],
) -> None:
    offered = ", ".join(sorted(upstream_names)) or "none"
    for option, names in (
        ("compensations", set(compensations)),
        ("irreversible", irreversible),
        ("read_only", read_only),
        ("a Compensate(tool=...)", {c.tool for c in compensations.values()}),
    ):
        unknown = sorted(names - upstream_names)
        if unknown:
            raise ConfigurationError(
                f"mcp_proxy: {option} names {', '.join(map(repr, unknown))}, which the upstream "
                f"server does not offer (it offers: {offered}); fix the name"
            )
    for left, right, first, second in (
        (set(compensations), irreversible, "compensations", "irreversible"),
        (set(compensations), read_only, "compensations", "read_only"),
        (irreversible, read_only, "irreversible", "read_only"),
    ):
        both = sorted(left & right)
        if both:
            raise ConfigurationError(
                f"mcp_proxy: {', '.join(map(repr, both))} is in both {first} and {second}; "
                "name each tool once"
            )


def _journal_name(prefix: str, tool_name: str) -> str:
    """The tool's name in the journal: MCP allows `-`, `.` and `/`, sagacity identifiers."""
    name = re.sub(r"\W", "_", prefix + tool_name)
    return f"_{name}" if not name.isidentifier() else name


@dataclasses.dataclass(frozen=True, slots=True)
class _Upstream:
    """One connection to an upstream server, and the event loop that opened it."""

    client: Client
    loop: asyncio.AbstractEventLoop
    server_name: str | None

    @property
    def is_open(self) -> bool:
        """Whether calls can still be sent: the client's context is entered, its loop alive."""
        if self.loop.is_closed():
            return False
        try:
            return self.client.session is not None
        except RuntimeError:  # the client's `async with` has exited
            return False


_serving: contextvars.ContextVar[_Upstream | None] = contextvars.ContextVar(
    "sagacity_mcp_proxy_upstream", default=None
)
"""The connection of the proxy handling the `tools/call` running in this context."""


class _ProxiedTool:
    """One upstream tool as journaled: a forwarding function and its undo, made once.

    Made once per Sagacity and journal name, so that building the proxy again (after
    the upstream reconnects) re-wraps the same functions and points them at the new
    connection, instead of clashing with the tools wrapped the first time. A call that
    a proxy handles is forwarded through that proxy's own connection; the latest binding
    serves what runs outside any proxy's call: compensations, and `resume_saga` running
    an approved call with its stored input.
    """

    def __init__(self, name: str, upstream_name: str, server_name: str | None) -> None:
        self.name = name
        self.upstream_name = upstream_name
        self.server_name = server_name
        self.upstream: _Upstream | None = None
        self.compensate: Compensate | None = None
        self.forward = self._forwarding_function()
        self.undo = self._undoing_function()

    def refuse_rebinding(self, upstream_name: str, upstream: _Upstream) -> None:
        """Refuse to point this journal name at another tool, server or open connection.

        Raises:
            ConfigurationError: The name stands for another upstream tool or server, or
                is bound to another connection that is still open.
        """
        if self.upstream_name != upstream_name or (
            upstream.server_name is not None
            and self.server_name is not None
            and self.server_name != upstream.server_name
        ):
            raise ConfigurationError(
                f"mcp_proxy: journal name {self.name!r} already stands for tool "
                f"{self.upstream_name!r} of server {self.server_name!r}; give this upstream "
                "another prefix=..."
            )
        bound = self.upstream
        if bound is not None and bound.client is not upstream.client and bound.is_open:
            # Both servers may call themselves the same: only the connection tells them
            # apart, and a compensation run outside any call could not pick the right one.
            raise ConfigurationError(
                f"mcp_proxy: journal name {self.name!r} is bound to another open connection "
                f"(to server {bound.server_name!r}) by an earlier proxy of this Sagacity, and "
                "calls journaled under one name, and their compensations, must reach one "
                "upstream. Give this upstream another prefix=..., pass the same Client to "
                "both proxies, or close the first connection before building the proxy again"
            )

    def bind(self, upstream: _Upstream, tool: Tool, compensate: Compensate | None) -> None:
        self.upstream = upstream
        self.compensate = compensate
        self.forward.__doc__ = tool.description

    def _client(self, upstream: _Upstream | None) -> Client:
        if upstream is None:  # pragma: no cover - bound before it is wrapped
            raise ConfigurationError(f"tool {self.name!r} is not bound to an upstream server")
        if asyncio.get_running_loop() is not upstream.loop:
            # An MCP connection belongs to the event loop that opened it; from another
            # one (Sagacity.compensate runs async compensations on a fresh loop) the
            # call would fail or hang instead of reaching the upstream.
            raise ConfigurationError(
                f"tool {self.name!r}: the upstream connection belongs to another event loop; "
                "compensate from that loop: await end_saga(...) or await "
                "Sagacity.acompensate(...)"
            )
        if not upstream.is_open:
            raise ConfigurationError(
                f"tool {self.name!r}: the connection to upstream server "
                f"{upstream.server_name!r} is closed, so nothing was sent; build the proxy "
                "again on an open connection (await mcp_proxy(...)) and retry"
            )
        return upstream.client

    def _forwarding_function(self) -> Callable[..., Any]:
        async def forward(**arguments: Any) -> CallToolResult:
            client = self._client(_serving.get() or self.upstream)
            result = await client.call_tool(self.upstream_name, arguments)
            if result.is_error:
                raise UpstreamToolError(self.upstream_name, result)
            return result

        forward.__name__ = forward.__qualname__ = self.name
        return forward

    def _undoing_function(self) -> Callable[[CompensationContext], Any]:
        async def undo(context: CompensationContext) -> None:
            compensate = self.compensate
            if compensate is None:
                raise ConfigurationError(
                    f"tool {self.name!r} has no Compensate configured in this process; build "
                    "the proxy with compensations={...} and compensate again"
                )
            if compensate.args is None:
                arguments = dict(context.input)
            else:
                result = CallToolResult.model_validate(context.result)
                arguments = dict(compensate.args(dict(context.input), result))
            outcome = await self._client(self.upstream).call_tool(compensate.tool, arguments)
            if outcome.is_error:
                raise UpstreamToolError(compensate.tool, outcome)

        undo.__name__ = undo.__qualname__ = f"undo_{self.name}"
        return undo


_proxied_lock = threading.Lock()
_proxied_tools: weakref.WeakKeyDictionary[Sagacity, dict[str, _ProxiedTool]] = (
    weakref.WeakKeyDictionary()
)


def _bind(
    sagacity: Sagacity,
    prefix: str,
    listed: list[Tool],
    upstream: _Upstream,
    compensations: Mapping[str, Compensate],
) -> list[tuple[Tool, _ProxiedTool]]:
    """Point each listed tool's journal name at `upstream`, after checking every one.

    Raises:
        ConfigurationError: Two tools map to one journal name, or a name is refused by
            `_ProxiedTool.refuse_rebinding`; nothing is bound then.
    """
    named = [(_journal_name(prefix, tool.name), tool) for tool in listed]
    seen: dict[str, str] = {}
    for name, tool in named:
        if name in seen:
            raise ConfigurationError(
                f"mcp_proxy: upstream tools {seen[name]!r} and {tool.name!r} are both journaled "
                f"as {name!r}; rename one of them on the upstream server"
            )
        seen[name] = tool.name
    with _proxied_lock:
        known = _proxied_tools.setdefault(sagacity, {})
        for name, tool in named:
            if name in known:
                known[name].refuse_rebinding(tool.name, upstream)
        bound: list[tuple[Tool, _ProxiedTool]] = []
        for name, tool in named:
            proxied = known.get(name)
            if proxied is None:
                proxied = known[name] = _ProxiedTool(name, tool.name, upstream.server_name)
            proxied.bind(upstream, tool, compensations.get(tool.name))
            bound.append((tool, proxied))
        return bound


class _ProxyServer:
    """The low-level MCP server of one proxy: lists and forwards the upstream tools."""

    def __init__(
        self,
        sagacity: Sagacity,
        listed: list[Tool],
        tools: dict[str, SagaTool],
        saga_of: SagaOf,
        upstream: _Upstream,
    ) -> None:
        self.sagacity = sagacity
        self.listed = listed
        self.tools = tools
        self.saga_of = saga_of
        self.upstream = upstream
        self.sagas = open_sagas(sagacity)
        self.schemas = {tool.name: tool.input_schema for tool in listed}
        self.output_schemas = {tool.name: tool.output_schema for tool in listed}

    def server(self, name: str) -> Server[Any]:
        server: Server[Any] = Server(
            name,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            get_tool_input_schema=self.schemas.get,
        )
        server.add_request_handler(END_METHOD, EndSagaParams, self.end)
        server.extensions[EXTENSION_ID] = {}
        return server

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=self.listed)

    async def end(
        self, ctx: ServerRequestContext[Any, Any], params: EndSagaParams
    ) -> EndSagaResult:
        return await handle_end_request(self.sagacity, params)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        tool = self.tools.get(params.name)
        if tool is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        if not self.upstream.is_open:
            return error_result(
                f"tool {params.name!r}: this proxy's connection to upstream server "
                f"{self.upstream.server_name!r} is closed; nothing was sent or journaled. "
                "Build the proxy again on an open connection"
            )
        arguments = dict(params.arguments or {})
        try:
            saga_id = self.saga_of(ctx, params)
            call_id = call_id_from_meta(params)
        except ValueError as error:
            return error_result(f"tool {params.name!r}: {error}")
        token = _serving.set(self.upstream)  # forwarded through this proxy's connection
        try:
            if saga_id is None:
                return await self._run(tool, params.name, arguments, None)
            with self.sagas.tool_call(saga_id, call_id) as call:
                return await self._run(tool, params.name, arguments, call)
        except SagacityError as error:  # raised on entering: the saga has ended
            return error_result(f"tool {params.name!r}: {error}")
        finally:
            _serving.reset(token)

    async def _run(
        self, tool: SagaTool, name: str, arguments: dict[str, Any], call: ToolCall | None
    ) -> CallToolResult:
        try:
            if call is None:
                value = await tool.ainvoke((), arguments)
            else:
                value = await tool.ainvoke(
                    (),
                    arguments,
                    call_id=call.call_id_for(tool, (), arguments),
                    on_approval_needed=call.approval_needed,
                )
        except UpstreamToolError as error:
            return error.result
        except SagacityError as error:
            return error_result(f"tool {name!r}: {error}")
        except MCPError:
            raise
        except Exception:
            # As MCPServer does: the exception stays in the server's log and the journal.
            logger.exception("Tool %r raised an unexpected exception", name)
            return error_result(f"Error executing tool {name}")
        if call is not None and call.awaiting is not None:
            return awaiting_result(call.awaiting, None, self.output_schemas.get(name))
        if isinstance(value, CallToolResult):
            return value
        # A call replayed from the journal returns its journaled result.
        return CallToolResult.model_validate(value)
