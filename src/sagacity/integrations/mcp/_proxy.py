"""`mcp_proxy`: a server that puts any upstream MCP server's tools under sagas."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, get_args

from mcp import Client
from mcp.types import CallToolResult, Tool

from sagacity.annotations import Reversibility, compensable
from sagacity.compensation import CompensationContext
from sagacity.errors import ConfigurationError
from sagacity.integrations.mcp._control import CONTROL_TOOLS, refuse_collisions
from sagacity.integrations.mcp._proxy_server import ProxyServer
from sagacity.integrations.mcp._upstream import (
    Connection,
    UpstreamFactory,
    UpstreamUnavailableError,
    forwarding,
    open_owned,
    serving_connection,
)
from sagacity.integrations.mcp._wire import (
    IsErrorPolicy,
    SagaOf,
    UpstreamToolError,
    classify_mcp_error,
    saga_from_meta,
)
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["Compensate", "ProxiedTools", "UpstreamToolError", "mcp_proxy"]

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


async def mcp_proxy(
    sagacity: Sagacity,
    upstream: Client | UpstreamFactory,
    compensations: Mapping[str, Compensate] | None = None,
    *,
    irreversible: Iterable[str] = (),
    read_only: Iterable[str] = (),
    is_error: Mapping[str, IsErrorPolicy] | None = None,
    prefix: str = "",
    name: str | None = None,
    saga_of: SagaOf | None = None,
    reconnect_attempts: int = 3,
    reconnect_backoff: float = 0.25,
    elicit_approval: bool = True,
    control_tools: bool = False,
) -> ProxyServer:
    """A server exposing `upstream`'s tools unchanged, each call journaled under a saga.

    Each tool is listed exactly as `upstream` lists it. A call joins the saga named in
    its `_meta` (as for `mcp_server`), is journaled INTENT before it is forwarded and
    EXECUTED (the upstream's `CallToolResult`) or FAILED after. What a tool is, and how
    it is undone:

    | configured / annotated                      | journaled as   | undone by          |
    |---------------------------------------------|----------------|--------------------|
    | in `compensations`                          | COMPENSATABLE  | the `Compensate`   |
    | in `irreversible`                           | IRREVERSIBLE   | nothing: approval  |
    | in `read_only`, or `readOnlyHint: true`     | REVERSIBLE     | nothing to undo    |
    | any other (MCP defaults: destructive, not   | IRREVERSIBLE   | nothing: approval  |
    | idempotent)                                 |                |                    |

    What an upstream `isError` result does is the tool's `is_error` policy (see
    `IsErrorPolicy`): `"result"` for read-only tools by default (journaled EXECUTED with
    the error result: the saga goes on, the model reads the error and may call again),
    `"fail"` for every other tool (journaled FAILED: the saga is compensated when it
    ends); `"retry"` journals a retryable FAILED that a later success of the tool answers.

    Annotations are the upstream's own claims, trusted only as far as the upstream is: a
    tool that says `readOnlyHint: true` runs without approval. List a tool of an upstream
    you do not trust in `irreversible` to make it wait for approval whatever it says.

    `upstream` is a connected `mcp.Client`, or a factory of new ones (`lambda:
    Client(StdioServerParameters(...))`). With a factory the proxy opens the client
    itself, reconnects when the upstream has gone (before the next call is journaled,
    `reconnect_attempts` times with a backoff doubling from `reconnect_backoff` seconds)
    and relays the upstream's sampling, elicitation and roots requests, log messages
    and list changes to its own client; close it with `await proxy.aclose()`.

    Args:
        sagacity: Journals the calls and runs the compensations.
        upstream: A connected `mcp.Client`, or a factory of unentered ones.
        compensations: Upstream tool name → how to undo its calls.
        irreversible: Upstream tools that wait for approval whatever they declare.
        read_only: Upstream tools with nothing to undo whatever they declare.
        is_error: Upstream tool name → what its `isError` result does (`"fail"`,
            `"retry"` or `"result"`), over the default above.
        prefix: Put before each tool's name in the journal, when two upstreams share
            tool names within one Sagacity.
        name: The proxy server's name (default `sagacity-proxy`): its identity to clients.
        saga_of: Picks the saga of a call; by default `_meta["sagacity/saga_id"]`.
        reconnect_attempts: Connection attempts when the upstream has gone (factory only).
        reconnect_backoff: Seconds before the second attempt, doubled for each next one.
        elicit_approval: Where the client can elicit, a call that waits for approval asks
            its user to answer once an approver has approved, and then runs (the journal's
            APPROVED entry decides, never the answer).
        control_tools: Also list the tools `sagacity_compensate` and `sagacity_end`,
            which do what the `sagacity/compensate` and `sagacity/end` requests do, for
            clients that can call only tools. Off by default: a model can call a listed
            tool, and any client of the proxy may then end or compensate any saga id of
            the journal.

    Raises:
        ConfigurationError: A configured name is not an upstream tool, a tool is both
            compensated and irreversible, two tools map to one journal name, a journal
            name is taken by another upstream server or another open connection, or an
            `is_error` policy is not one of `"fail"`, `"retry"`, `"result"`, or (with
            `control_tools`) an upstream tool has a control tool's name.
        UpstreamUnavailableError: The factory's client could not be opened.
    """
    if reconnect_attempts < 1:
        raise ConfigurationError("mcp_proxy: reconnect_attempts must be at least 1")
    if isinstance(upstream, Client):
        info = upstream.server_info
        connection = Connection(
            upstream, asyncio.get_running_loop(), info.name if info is not None else None
        )
        client = upstream
    else:
        connection, client = await open_owned(
            upstream, attempts=reconnect_attempts, backoff=reconnect_backoff
        )
    try:
        tools = ProxiedTools(
            sagacity,
            connection,
            dict(compensations or {}),
            irreversible=set(irreversible),
            read_only=set(read_only),
            is_error=dict(is_error or {}),
            prefix=prefix,
            control_tools=control_tools,
        )
        await tools.refresh(client, check=True)
    except BaseException:
        await connection.aclose()
        raise
    connection.on_reconnect = tools.refresh_open
    sagacity.add_classifier(classify_mcp_error)
    return ProxyServer.build(
        name or "sagacity-proxy",
        sagacity,
        tools,
        connection,
        saga_of or saga_from_meta,
        elicit_approval=elicit_approval,
    )


class ProxiedTools:
    """The upstream's tools as the proxy lists and journals them, listed again on change."""

    def __init__(
        self,
        sagacity: Sagacity,
        connection: Connection,
        compensations: dict[str, Compensate],
        *,
        irreversible: set[str],
        read_only: set[str],
        is_error: dict[str, IsErrorPolicy],
        prefix: str,
        control_tools: bool = False,
    ) -> None:
        self.sagacity = sagacity
        self.connection = connection
        self.compensations = compensations
        self.irreversible = irreversible
        self.read_only = read_only
        self.is_error = is_error
        self.prefix = prefix
        self.listed: list[Tool] = []
        """The upstream's tools, exactly as it lists them."""
        self.wrapped: dict[str, SagaTool] = {}
        """Upstream tool name → its journaled tool."""
        self.control_tools = control_tools
        """Whether `sagacity_compensate` and `sagacity_end` are listed after the upstream's."""
        self.collisions: list[str] = []
        """Upstream tools, listed since the proxy was built, named as a control tool."""

    async def refresh_open(self) -> None:
        """List the tools again through the open client (after a reconnect or a change)."""
        await self.refresh(self.connection.client, check=False)

    async def refresh(self, client: Client, *, check: bool) -> None:
        """List the upstream's tools and wrap any not wrapped yet.

        Raises:
            ConfigurationError: (with `check`) the configuration names a tool the upstream
                does not offer, or an upstream tool has a control tool's name; (always) a
                journal name clashes.
        """
        listed = await _list_tools(client)
        if self.control_tools:
            names = [tool.name for tool in listed]
            if check:
                refuse_collisions(names, "mcp_proxy: the upstream server")
            # Listed later (a tools/list_changed): tools/list and a call of the name
            # are refused until the upstream drops the tool again.
            self.collisions = sorted(set(names) & set(CONTROL_TOOLS))
        if check:
            _check_configuration(
                {tool.name for tool in listed},
                self.compensations,
                self.irreversible,
                self.read_only,
                self.is_error,
            )
        new = [tool for tool in listed if tool.name not in self.wrapped]
        for tool, proxied in _bind(
            self.sagacity, self.prefix, new, self.connection, self.compensations
        ):
            self.wrapped[tool.name] = self._wrap(tool, proxied)
        self.listed = listed

    def _wrap(self, tool: Tool, proxied: _ProxiedTool) -> SagaTool:
        read_only = tool.name not in self.irreversible and (
            tool.name in self.read_only
            or bool(tool.annotations and tool.annotations.read_only_hint)
        )
        proxied.on_error = self.is_error.get(tool.name, "result" if read_only else "fail")
        if tool.name in self.compensations:
            declared = self.compensations[tool.name]
            compensable(by=proxied.undo, reversibility=declared.reversibility, name=proxied.name)(
                proxied.forward
            )
        elif read_only:
            compensable(
                by=_nothing_to_undo, reversibility=Reversibility.REVERSIBLE, name=proxied.name
            )(proxied.forward)
        else:
            compensable(reversibility=Reversibility.IRREVERSIBLE, name=proxied.name)(
                proxied.forward
            )
        (wrapped,) = self.sagacity.wrap(proxied.forward)
        return wrapped


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
    is_error: Mapping[str, str],
) -> None:
    offered = ", ".join(sorted(upstream_names)) or "none"
    for option, names in (
        ("compensations", set(compensations)),
        ("irreversible", irreversible),
        ("read_only", read_only),
        ("is_error", set(is_error)),
        ("a Compensate(tool=...)", {c.tool for c in compensations.values()}),
    ):
        unknown = sorted(names - upstream_names)
        if unknown:
            raise ConfigurationError(
                f"mcp_proxy: {option} names {', '.join(map(repr, unknown))}, which the upstream "
                f"server does not offer (it offers: {offered}); fix the name"
            )
    policies = set(get_args(IsErrorPolicy))
    for tool_name, policy in is_error.items():
        if policy not in policies:
            raise ConfigurationError(
                f"mcp_proxy: is_error[{tool_name!r}] is {policy!r}; it must be 'fail' (the saga "
                "fails), 'retry' (the model may call again) or 'result' (journaled as the "
                "call's result)"
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
        self.upstream: Connection | None = None
        self.compensate: Compensate | None = None
        self.on_error: IsErrorPolicy = "fail"
        """What an upstream `isError` result of the tool does to the saga."""
        self.forward = self._forwarding_function()
        self.undo = self._undoing_function()

    def refuse_rebinding(self, upstream_name: str, upstream: Connection) -> None:
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
        if (
            bound is not None
            and bound is not upstream
            and bound.client is not upstream.client
            and (bound.is_open or bound.owned)
        ):
            # Both servers may call themselves the same: only the connection tells them
            # apart, and a compensation run outside any call could not pick the right one.
            raise ConfigurationError(
                f"mcp_proxy: journal name {self.name!r} is bound to another open connection "
                f"(to server {bound.server_name!r}) by an earlier proxy of this Sagacity, and "
                "calls journaled under one name, and their compensations, must reach one "
                "upstream. Give this upstream another prefix=..., pass the same Client to "
                "both proxies, or close the first connection before building the proxy again"
            )

    def bind(self, upstream: Connection, tool: Tool, compensate: Compensate | None) -> None:
        self.upstream = upstream
        self.compensate = compensate
        self.forward.__doc__ = tool.description

    async def _client(self, upstream: Connection | None) -> Client:
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
        try:
            return await upstream.ensure_open()
        except UpstreamUnavailableError as error:
            raise UpstreamUnavailableError(f"tool {self.name!r}: {error}") from None

    def _forwarding_function(self) -> Callable[..., Any]:
        async def forward(**arguments: Any) -> CallToolResult:
            client = await self._client(serving_connection.get() or self.upstream)
            extra = forwarding.get()
            result = await client.call_tool(
                self.upstream_name,
                arguments,
                progress_callback=extra.progress if extra else None,
                meta=extra.meta if extra else None,  # type: ignore[arg-type]
            )
            if result.is_error and self.on_error != "result":
                retryable = self.on_error == "retry"
                raise UpstreamToolError(self.upstream_name, result, retryable=retryable)
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
            client = await self._client(self.upstream)
            outcome = await client.call_tool(compensate.tool, arguments)
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
    upstream: Connection,
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
