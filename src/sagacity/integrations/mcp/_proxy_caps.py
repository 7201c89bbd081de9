"""What a proxy declares to its client, and the client's side of what it relays upstream.

The proxy declares what it relays: `listChanged` for tools, resources and prompts where
its upstream declares it (the proxy relays those notifications), and `logging` where
the upstream logs (`logging/setLevel` is forwarded). When a client connects, the
upstream is fitted to it (`Connection.fit`): sampling, elicitation and roots are
declared upstream only if the client can answer them, and an upstream that reads roots
reads the client's before the client's first call goes through.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import (
    INTERNAL_ERROR,
    EmptyResult,
    LoggingCapability,
    NotificationParams,
    ServerCapabilities,
    SetLevelRequestParams,
)

from sagacity.integrations.mcp._upstream import Connection, UpstreamUnavailableError

__all__ = ["ClientSide", "attach_client_side", "declared_as_upstream", "upstream_capabilities"]

_MODERN = "2026-07-28"
"""From this protocol version, list changes travel on `subscriptions/listen` streams."""


def upstream_capabilities(connection: Connection) -> dict[str, Any]:
    """What the upstream declared when the connection was opened, as wire JSON."""
    try:
        declared = connection.client.server_capabilities
    except RuntimeError:  # pragma: no cover - the client is open when the proxy is built
        return {}
    return declared.model_dump(exclude_none=True, by_alias=True) if declared else {}


def declared_as_upstream(
    capabilities: ServerCapabilities, connection: Connection, protocol_version: str | None
) -> ServerCapabilities:
    """`capabilities` with the list changes and logging the proxy relays from upstream.

    A flag the caller's `NotificationOptions` set stays set; one the upstream declares is
    added, since the proxy relays that upstream's notifications of that kind.
    """
    upstream = upstream_capabilities(connection)
    update: dict[str, Any] = {}
    modern = protocol_version is not None and protocol_version >= _MODERN
    for kind in ("tools", "resources", "prompts"):
        own = getattr(capabilities, kind)
        if own is None or modern:
            continue
        if upstream.get(kind, {}).get("listChanged"):
            update[kind] = own.model_copy(update={"list_changed": True})
    if "logging" in upstream and capabilities.logging is None:
        update["logging"] = LoggingCapability()
    return capabilities.model_copy(update=update) if update else capabilities


def attach_client_side(server: Server[Any], connection: Connection, *, logging: bool) -> None:
    """Register the handlers of `ClientSide` on the proxy's server.

    `logging/setLevel` only where the upstream logs.
    """
    client_side = ClientSide(connection)
    server.add_notification_handler(
        "notifications/initialized", NotificationParams, client_side.initialized
    )
    server.add_notification_handler(
        "notifications/roots/list_changed", NotificationParams, client_side.roots_changed
    )
    if logging:
        server.add_request_handler("logging/setLevel", SetLevelRequestParams, client_side.set_level)


class ClientSide:
    """The proxy's handlers for what its client says about itself."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    async def initialized(
        self, ctx: ServerRequestContext[Any, Any], params: NotificationParams
    ) -> None:
        """A client connected: fit the upstream to its capabilities and its roots."""
        # If the upstream is down, the client's requests say so, each with its error.
        with contextlib.suppress(UpstreamUnavailableError):
            await self.connection.fit(ctx.session)

    async def roots_changed(
        self, ctx: ServerRequestContext[Any, Any], params: NotificationParams
    ) -> None:
        """The client's roots changed: the upstream is told, and asks for them again."""
        self.connection.note_session(ctx.session)
        await self.connection.roots_changed()

    async def set_level(
        self, ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams
    ) -> EmptyResult:
        """`logging/setLevel`, forwarded to the upstream whose log messages are relayed."""
        self.connection.note_session(ctx.session)
        try:
            client = await self.connection.ensure_open()
        except UpstreamUnavailableError as error:
            raise MCPError(code=INTERNAL_ERROR, message=str(error)) from None
        with warnings.catch_warnings():
            # Deprecated from 2026-07-28, and still what a handshake-era upstream answers.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level(params.level)
        return EmptyResult()
