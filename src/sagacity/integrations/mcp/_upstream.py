"""The proxy's connection to its upstream server: liveness, reconnects and relays.

A proxy that is given a factory (`Callable[[], Client]`) owns its connection: it opens
the client in a task of its own (an MCP client must be closed by the task that opened
it), notices when the upstream has gone (its process died, the transport closed), and
opens a new one with bounded retries and backoff before the next call is journaled. The
clients it opens relay what the upstream asks of its client (sampling, elicitation,
roots) and what it tells it (log messages, list changes) to the proxy's own client.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import Client
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import (
    INTERNAL_ERROR,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    ListRootsRequest,
    ListRootsResult,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    PromptListChangedNotification,
    ResourceListChangedNotification,
    ToolListChangedNotification,
)

from sagacity.errors import SagacityError

__all__ = [
    "Connection",
    "Forwarding",
    "UpstreamFactory",
    "UpstreamUnavailableError",
    "downstream",
    "forwarding",
    "open_owned",
    "serving_connection",
    "serving_session",
]

logger = logging.getLogger(__name__)

RELAYS = frozenset({"sampling", "elicitation", "roots"})
"""What the proxy can relay from its upstream to its client, and so declare upstream."""

ROOTS_WAIT = 5.0
"""Seconds a client's first request waits for an upstream that reads roots to read its."""

ROOTS_FIRST_ASK = 1.0
"""Seconds an upstream reopened with roots has to ask for them before a client's first
request goes on: an upstream that reads roots (server-filesystem) asks at once."""

COALESCE_SECONDS = 0.05
"""List changes from one upstream within this time reach the proxy's clients once."""

UpstreamFactory = Callable[[], Client]
"""Makes a new, not yet entered `mcp.Client` to the upstream server, each time it is called."""


class UpstreamUnavailableError(SagacityError):
    """The upstream server cannot be reached: nothing was sent or journaled."""

    status_code = 503


serving_session: contextvars.ContextVar[ServerSession | None] = contextvars.ContextVar(
    "sagacity_mcp_proxy_session", default=None
)
"""The proxy's client session of the request running in this context."""


serving_connection: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "sagacity_mcp_proxy_upstream", default=None
)
"""The connection of the proxy handling the `tools/call` running in this context."""


@dataclasses.dataclass(frozen=True, slots=True)
class Forwarding:
    """What a `tools/call` hands on to the upstream besides its arguments (not journaled)."""

    meta: dict[str, Any] | None
    """The client's `_meta`, less sagacity's keys and the protocol's own."""
    progress: ProgressFnT | None
    """Relays the upstream's progress notifications to the client, if it asked for them."""


forwarding: contextvars.ContextVar[Forwarding | None] = contextvars.ContextVar(
    "sagacity_mcp_proxy_forwarding", default=None
)


def _connection_closed(client: Client) -> bool:
    """Whether the client's transport has closed (the upstream process died or hung up).

    The SDK has no public flag for it: its dispatchers keep one (`_closed`), set at EOF,
    and raise `CONNECTION_CLOSED` for any request sent afterwards. Checking it before a
    call is what lets the proxy tell "never sent" from "sent, then the line went dead".
    """
    try:
        session = client.session
    except RuntimeError:  # the client's `async with` has exited, or was never entered
        return True
    dispatcher = getattr(session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


class Connection:
    """One upstream, reached through the client that is open now.

    Built on a `Client` the caller entered (kept as it is, never reopened), or on a
    factory (opened, watched and reopened here).
    """

    def __init__(
        self,
        client: Client,
        loop: asyncio.AbstractEventLoop,
        server_name: str | None,
        *,
        factory: UpstreamFactory | None = None,
        attempts: int = 3,
        backoff: float = 0.25,
        keeper: _Keeper | None = None,
    ) -> None:
        self.client = client
        self.loop = loop
        self.server_name = server_name
        self.factory = factory
        self.attempts = attempts
        self.backoff = backoff
        self._keeper = keeper
        self._reconnecting = asyncio.Lock()
        self.on_reconnect: Callable[[], Awaitable[None]] | None = None
        """Run after a new client is open: the proxy lists the tools again."""
        self.sessions: list[ServerSession] = []
        """The proxy's client sessions, newest last: where notifications are relayed."""
        self.relays: frozenset[str] = frozenset()
        """What the upstream client declares (sampling, elicitation, roots): nothing
        until a client has connected, then what that client can answer (see `fit`)."""
        self.asks_roots = False
        """Whether the upstream has asked for roots: it reads them, so a client's are sent."""
        self._roots_asked = asyncio.Event()
        self._roots_answered = asyncio.Event()
        self._fitting = asyncio.Lock()
        self._changes: dict[type[Any], asyncio.Task[None]] = {}

    @property
    def is_open(self) -> bool:
        """Whether a call can be sent now: the client is entered, its line and loop alive."""
        return not self.loop.is_closed() and not _connection_closed(self.client)

    @property
    def owned(self) -> bool:
        """Whether this connection opens its clients itself (and can reopen them)."""
        return self.factory is not None

    def note_session(self, session: ServerSession) -> None:
        """Remember the proxy's client a request came from, newest last, for relays.

        The SDK makes a `ServerSession` per request; its connection (a private
        attribute, there is no public one) says which client it is.
        """
        connection = _client_connection(session)
        self.sessions = [s for s in self.sessions if _client_connection(s) is not connection]
        self.sessions.append(session)
        del self.sessions[:-16]  # a proxy has few clients; forget the oldest

    async def ensure_open(self) -> Client:
        """The open client, reconnecting first if the upstream has gone.

        Raises:
            UpstreamUnavailableError: The upstream has gone and cannot be reached again
                (no factory, or every attempt failed); nothing was sent.
        """
        if self._fitting.locked():  # a client is connecting: the upstream is being fitted
            async with self._fitting:
                pass
        changing = self._changes.get(ToolListChangedNotification)
        if changing is not None:  # the upstream said its tools changed: list them first
            await asyncio.shield(changing)
        if self.is_open:
            return self.client
        if self.factory is None:
            raise UpstreamUnavailableError(
                f"the connection to upstream server {self.server_name!r} is closed; nothing was "
                "sent or journaled. Build the proxy again on an open connection, or pass "
                "mcp_proxy a factory (lambda: Client(...)) so that it reconnects by itself"
            )
        async with self._reconnecting:
            if self.is_open:  # another request reconnected while this one waited
                return self.client
            await self._reconnect()
            return self.client

    async def _reconnect(self, first: Client | None = None) -> None:
        factory = self.factory
        assert factory is not None  # checked by the callers
        errors: list[str] = []
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
            client = first if first is not None and not attempt else factory()
            try:
                keeper = await _Keeper.open(relaying_client(client, self))
            except Exception as error:  # every failure is reported below
                errors.append(_describe(error))
                continue
            old, self._keeper = self._keeper, keeper
            self.client = keeper.client
            info = keeper.client.server_info
            self.server_name = info.name if info is not None else self.server_name
            if old is not None:
                await old.close()
                logger.warning(
                    "reconnected to upstream server %r (attempt %d)", self.server_name, attempt + 1
                )
            if self.on_reconnect is not None:
                await self.on_reconnect()
            return
        raise UpstreamUnavailableError(
            f"upstream server {self.server_name!r} is down and {self.attempts} attempts to "
            f"reconnect failed ({'; '.join(errors)}); nothing was sent or journaled. Try "
            "again once the upstream is back"
        )

    async def fit(self, session: ServerSession) -> None:
        """A client has connected: fit the upstream to what it can answer, and its roots.

        An owned upstream is reopened when the client cannot answer what it declares
        (sampling, elicitation, roots), so that the upstream does not offer its tools or
        behaviour on a capability no one answers; an upstream that reads roots is told
        they changed, and the client's first request waits (up to `ROOTS_WAIT` seconds)
        until it has read them, so that a narrower root applies from the first call.
        """
        self.note_session(session)
        wanted = client_relays(session)
        async with self._fitting:
            self._roots_asked.clear()
            self._roots_answered.clear()
            if self.owned and wanted != self.relays:
                self.relays = wanted
                async with self._reconnecting:
                    await self._reconnect()
                logger.info(
                    "upstream server %r reopened declaring %s, as its client does",
                    self.server_name,
                    ", ".join(sorted(wanted)) or "no client capability",
                )
                if "roots" in wanted and not self.asks_roots:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._roots_asked.wait(), ROOTS_FIRST_ASK)
            elif "roots" in wanted and self.asks_roots and self.is_open:
                await self.client.send_roots_list_changed()
            if "roots" in wanted and self.asks_roots:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._roots_answered.wait(), ROOTS_WAIT)

    async def roots_changed(self) -> None:
        """The proxy's client says its roots changed: tell an upstream that reads them."""
        if "roots" in self.relays and self.is_open:
            await self.client.send_roots_list_changed()

    async def aclose(self) -> None:
        """Close the client this connection opened, if it opened one."""
        for change in list(self._changes.values()):
            change.cancel()  # nothing to relay to once closed
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            await keeper.close()

    # -- relays to the proxy's client ------------------------------------------------

    def _target(self) -> ServerSession | None:
        """The proxy's client session to relay to: the request's own, else the newest."""
        return serving_session.get() or (self.sessions[-1] if self.sessions else None)

    async def relay_sampling(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | ErrorData:
        """Ask the proxy's client to sample, for the upstream."""
        session = self._target()
        if session is None:
            return _no_client("sampling")
        try:
            return await session.send_request(
                CreateMessageRequest(params=params), CreateMessageResult
            )
        except Exception as error:
            return ErrorData(code=INTERNAL_ERROR, message=f"the proxy's client: {error}")

    async def relay_elicitation(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """Ask the proxy's client to elicit input from its user, for the upstream."""
        session = self._target()
        if session is None:
            return _no_client("elicitation")
        try:
            return await session.send_request(ElicitRequest(params=params), ElicitResult)
        except Exception as error:
            return ErrorData(code=INTERNAL_ERROR, message=f"the proxy's client: {error}")

    async def relay_roots(self, context: ClientRequestContext) -> ListRootsResult | ErrorData:
        """Ask the proxy's client for its roots, for the upstream."""
        self.asks_roots = True
        self._roots_asked.set()
        session = self._target()
        if session is None:
            return _no_client("roots")
        try:
            return await session.send_request(ListRootsRequest(), ListRootsResult)
        except Exception as error:
            return ErrorData(code=INTERNAL_ERROR, message=f"the proxy's client: {error}")
        finally:
            self._roots_answered.set()  # answered or refused: the client's request goes on

    async def relay_log(self, params: LoggingMessageNotificationParams) -> None:
        """Pass an upstream log message on to the proxy's client."""
        request = serving_session.get()
        session = request or (self.sessions[-1] if self.sessions else None)
        if session is not None:
            with contextlib.suppress(Exception):  # a log line is not worth failing a call
                await session.send_notification(
                    LoggingMessageNotification(params=params),
                    # on the request's own stream while a call runs (2026-07-28 sends a
                    # call's log messages there only)
                    related_request_id="relay" if request is not None else None,
                )

    async def relay_message(self, message: IncomingMessage) -> None:
        """Relay list changes to every client of the proxy, each burst once.

        A burst of one kind (an upstream that restarts sends several) is relayed once,
        `COALESCE_SECONDS` after its first; for tools, after listing them again.
        """
        if isinstance(
            message,
            ToolListChangedNotification
            | ResourceListChangedNotification
            | PromptListChangedNotification,
        ):
            kind = type(message)
            if kind not in self._changes:
                self._changes[kind] = asyncio.create_task(self._relay_change(kind))

    async def _relay_change(self, kind: type[Any]) -> None:
        try:
            await asyncio.sleep(COALESCE_SECONDS)
        finally:
            del self._changes[kind]
        if kind is ToolListChangedNotification and self.on_reconnect is not None:
            try:
                await self.on_reconnect()
            except Exception:  # a new tool that cannot be journaled is not listed
                logger.exception("listing the tools of %r again failed", self.server_name)
        await self.notify_all(kind())

    async def notify_all(
        self,
        notification: ToolListChangedNotification
        | ResourceListChangedNotification
        | PromptListChangedNotification,
    ) -> None:
        """Send a notification to every client session of the proxy still reachable."""
        for session in list(self.sessions):
            try:
                await session.send_notification(notification)
            except Exception:
                self.sessions.remove(session)


def _describe(error: BaseException) -> str:
    """The innermost errors of an exception group (the SDK's task groups wrap them)."""
    if isinstance(error, BaseExceptionGroup):
        return ", ".join(_describe(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


def _client_connection(session: ServerSession) -> object:
    return getattr(session, "_connection", session)


def _no_client(feature: str) -> ErrorData:
    return ErrorData(
        code=INTERNAL_ERROR,
        message=f"the sagacity proxy has no client to relay the {feature} request to",
    )


def client_relays(session: ServerSession) -> frozenset[str]:
    """What the proxy's client can answer of what the proxy relays."""
    declared = session.client_capabilities
    if declared is None:
        return frozenset()
    return frozenset(name for name in RELAYS if getattr(declared, name, None) is not None)


def relaying_client(client: Client, connection: Connection) -> Client:
    """`client` with the proxy's relays in the callbacks it leaves unset.

    Sampling, elicitation and roots are relayed (and so declared to the upstream) only
    as far as `connection.relays` says: what the proxy's client can answer.
    """
    relays: dict[str, Any] = {
        "logging_callback": connection.relay_log,
        "message_handler": connection.relay_message,
    }
    wanted = connection.relays
    if "sampling" in wanted:
        relays["sampling_callback"] = connection.relay_sampling
    if "elicitation" in wanted:
        relays["elicitation_callback"] = connection.relay_elicitation
    if "roots" in wanted:
        relays["list_roots_callback"] = connection.relay_roots
    unset = {name: relay for name, relay in relays.items() if getattr(client, name) is None}
    return dataclasses.replace(client, **unset) if unset else client


class _Keeper:
    """A task that holds one client open until told to close it."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, client: Client) -> _Keeper:
        """Enter `client` in a task of its own; raise what entering it raised."""
        keeper = cls(client)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keeper._task = asyncio.create_task(keeper._hold(ready), name="sagacity-mcp-upstream")
        await ready
        return keeper

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        try:
            async with self.client:
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(
                    error if isinstance(error, Exception) else RuntimeError(str(error))
                )
            elif not isinstance(error, asyncio.CancelledError):
                logger.debug("upstream client closed with %r", error)

    async def close(self) -> None:
        """Close the client and wait for its task."""
        self._stop.set()
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()


async def open_owned(
    factory: UpstreamFactory, *, attempts: int, backoff: float
) -> tuple[Connection, Client]:
    """Open a connection from `factory`, retried as a reconnect is.

    Raises:
        UpstreamUnavailableError: Every attempt failed.
    """
    first = factory()
    # Not entered yet, so not open: the first attempt opens it, the next ones new clients.
    connection = Connection(
        first, asyncio.get_running_loop(), None, factory=factory, attempts=attempts, backoff=backoff
    )
    await connection._reconnect(first)
    return connection, connection.client


def downstream(session: ServerSession) -> contextvars.Token[ServerSession | None]:
    """Mark `session` as the proxy's client of the request running in this context."""
    return serving_session.set(session)
