"""The upstream's tools as a proxy lists and journals them: checked, wrapped, relisted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import get_args

from mcp import Client
from mcp.types import Tool

from sagacity.annotations import Reversibility, compensable
from sagacity.errors import ConfigurationError
from sagacity.integrations.mcp._control import CONTROL_TOOLS, refuse_collisions
from sagacity.integrations.mcp._proxied import Compensate, ProxiedTool, bind_tools
from sagacity.integrations.mcp._upstream import Connection
from sagacity.integrations.mcp._wire import IsErrorPolicy
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["ProxiedTools"]


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
        for tool, proxied in bind_tools(
            self.sagacity, self.prefix, new, self.connection, self.compensations
        ):
            self.wrapped[tool.name] = self._wrap(tool, proxied)
        self.listed = listed

    def _wrap(self, tool: Tool, proxied: ProxiedTool) -> SagaTool:
        read_only = tool.name not in self.irreversible and (
            tool.name in self.read_only
            or bool(tool.annotations and tool.annotations.read_only_hint)
        )
        proxied.on_error = self.is_error.get(tool.name, "result" if read_only else "fail")
        if tool.name in self.compensations:
            declared = self.compensations[tool.name]
            lookup = declared.reconcile
            compensable(
                by=proxied.undo,
                reversibility=declared.reversibility,
                name=proxied.name,
                reconcile=None if lookup is None else proxied.reconcile,
                reconcile_timeout=30.0 if lookup is None else lookup.timeout,
            )(proxied.forward)
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
        (
            "a Reconcile(tool=...)",
            {c.reconcile.tool for c in compensations.values() if c.reconcile is not None},
        ),
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
