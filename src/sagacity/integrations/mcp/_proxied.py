"""One upstream tool as the proxy journals it: its forwarding function and its undo.

`Compensate` says how a call is undone (by another upstream tool). A `ProxiedTool` is
made once per Sagacity and journal name and re-bound to the upstream connection of each
proxy built over it (`bind_tools`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from mcp import Client
from mcp.types import CallToolResult, Tool

from sagacity import Evidence, ReconcileContext, Reconciled
from sagacity.annotations import Reversibility
from sagacity.compensation import CompensationContext
from sagacity.errors import ConfigurationError
from sagacity.integrations.mcp._upstream import (
    Connection,
    UpstreamUnavailableError,
    forwarding,
    serving_connection,
)
from sagacity.integrations.mcp._wire import IsErrorPolicy, UpstreamToolError
from sagacity.saga import Sagacity

__all__ = ["Compensate", "CompensationArgs", "ProxiedTool", "Reconcile", "bind_tools"]

CompensationArgs = Callable[[dict[str, Any], CallToolResult], Mapping[str, Any]]
"""Maps a call's input and its upstream result to the arguments of the undoing tool."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reconcile:
    """How to find out whether a call in doubt took effect: ask another upstream tool.

    ```python
    Reconcile(tool="get_charge", args=lambda call_input, ctx: {"key": call_input["key"]})
    ```

    The tool must only read. Its answer becomes the verdict: by `verdict` when given;
    else an `isError` result is *unknown*, a result with no content and no structured
    content *did not land*, and any other *landed*, the lookup's result standing in for
    the call's (the `Compensate.args` of the call then reads it). The answer's JSON is the
    evidence (reference `<tool>`, its SHA-256).
    """

    tool: str
    """The upstream tool that looks the call up."""
    args: Callable[[dict[str, Any], ReconcileContext], Mapping[str, Any]] | None = None
    """Builds its arguments from the call's journaled input and the context (its call
    id, the idempotency key); None passes the call's input unchanged."""
    verdict: Callable[[CallToolResult], Reconciled] | None = None
    """Turns its result into the verdict; None: the rule above."""
    timeout: float = 30.0
    """Seconds the lookup may take before the doubt is left to a human."""


def _default_verdict(result: CallToolResult) -> Reconciled:
    if result.is_error:
        return Reconciled.unknown("the lookup answered with an error")
    if not result.content and not result.structured_content:
        return Reconciled.did_not_land()
    return Reconciled.landed(result)


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
    reconcile: Reconcile | None = None
    """How to find out whether a call in doubt took effect; None: a human settles it."""

    def __post_init__(self) -> None:
        if self.reversibility is Reversibility.IRREVERSIBLE:
            raise ConfigurationError(
                f"Compensate(tool={self.tool!r}) cannot be IRREVERSIBLE: an effect with an undo "
                "is COMPENSATABLE; list tools without one in irreversible=[...]"
            )


def _journal_name(prefix: str, tool_name: str) -> str:
    """The tool's name in the journal: MCP allows `-`, `.` and `/`, sagacity identifiers."""
    name = re.sub(r"\W", "_", prefix + tool_name)
    return f"_{name}" if not name.isidentifier() else name


class ProxiedTool:
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
        self.reconcile = self._reconciling_function()

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

    def _reconciling_function(self) -> Callable[[ReconcileContext], Any]:
        async def reconcile(ctx: ReconcileContext) -> Reconciled:
            declared = self.compensate.reconcile if self.compensate is not None else None
            if declared is None:
                return Reconciled.unknown(f"tool {self.name!r} has no Reconcile in this process")
            arguments = (
                dict(ctx.input)
                if declared.args is None
                else dict(declared.args(dict(ctx.input), ctx))
            )
            client = await self._client(self.upstream)
            answer = await client.call_tool(declared.tool, arguments)
            found = (declared.verdict or _default_verdict)(answer)
            if found.evidence is None:
                sent = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
                found = dataclasses.replace(found, evidence=Evidence.of(declared.tool, sent))
            return found

        reconcile.__name__ = reconcile.__qualname__ = f"reconcile_{self.name}"
        return reconcile


_proxied_lock = threading.Lock()
_proxied_tools: weakref.WeakKeyDictionary[Sagacity, dict[str, ProxiedTool]] = (
    weakref.WeakKeyDictionary()
)


def bind_tools(
    sagacity: Sagacity,
    prefix: str,
    listed: list[Tool],
    upstream: Connection,
    compensations: Mapping[str, Compensate],
) -> list[tuple[Tool, ProxiedTool]]:
    """Point each listed tool's journal name at `upstream`, after checking every one.

    Raises:
        ConfigurationError: Two tools map to one journal name, or a name is refused by
            `ProxiedTool.refuse_rebinding`; nothing is bound then.
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
        bound: list[tuple[Tool, ProxiedTool]] = []
        for name, tool in named:
            proxied = known.get(name)
            if proxied is None:
                proxied = known[name] = ProxiedTool(name, tool.name, upstream.server_name)
            proxied.bind(upstream, tool, compensations.get(tool.name))
            bound.append((tool, proxied))
        return bound
