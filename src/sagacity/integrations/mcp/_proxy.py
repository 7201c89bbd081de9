"""`mcp_proxy`: a server that puts any upstream MCP server's tools under sagas."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from mcp import Client

from sagacity.errors import ConfigurationError
from sagacity.integrations.mcp._proxied import Compensate
from sagacity.integrations.mcp._proxy_server import ProxyServer
from sagacity.integrations.mcp._proxy_tools import ProxiedTools
from sagacity.integrations.mcp._upstream import Connection, UpstreamFactory, open_owned
from sagacity.integrations.mcp._wire import (
    IsErrorPolicy,
    SagaOf,
    classify_mcp_error,
    saga_from_meta,
)
from sagacity.saga import Sagacity

__all__ = ["mcp_proxy"]


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
    lease_wait: float | None = 30.0,
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
        lease_wait: Seconds a call waits for its saga while another process (another
            proxy of the same saga) holds it, before it answers that the saga is busy;
            None uses the Sagacity's own `lease_wait` (0 by default: answer at once).

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
    if lease_wait is not None and lease_wait < 0:
        raise ConfigurationError(f"mcp_proxy: lease_wait must not be negative, not {lease_wait}")
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
        lease_wait=lease_wait,
    )
