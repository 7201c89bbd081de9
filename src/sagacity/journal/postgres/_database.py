"""One PostgreSQL database as the stores see it: URL options, the pool, the schema, retries."""

from __future__ import annotations

import contextlib
import dataclasses
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool

from sagacity.errors import ConfigurationError, JournalError
from sagacity.journal.postgres._schema import SCHEMA_VERSION, check_schema, ensure_schema

__all__ = ["SCHEMA_VERSION", "Lease", "PostgresDatabase", "Settings", "is_transient", "parse_url"]

T = TypeVar("T")

_DEFAULT_POOL_MIN_SIZE = 1
_DEFAULT_POOL_MAX_SIZE = 10
_DEFAULT_POOL_TIMEOUT = 10.0
_KEPT_SECONDS = 30.0
_CONNECTION_OK = psycopg.pq.ConnStatus.OK
_IDLE = psycopg.pq.TransactionStatus.IDLE

# SQLSTATEs after which the same statement may succeed on another connection: the
# server shut the session down or is starting, or a transaction lost a serialization race.
_TRANSIENT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "40001", "40P01"})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """What a `postgresql://` URL asks for, the sagacity options split from libpq's."""

    conninfo: str
    """The URL without sagacity's own options, for libpq."""
    schema: str | None
    """The schema holding the tables (created on first use); None for the search_path."""
    pool_min_size: int
    """Connections the pool keeps open."""
    pool_max_size: int
    """Connections the pool may open at most."""
    timeout: float
    """Seconds an operation may spend waiting for a connection and retrying before it fails."""
    where: str
    """The server, database and schema, without credentials, for error messages."""


def parse_url(url: str) -> Settings:
    """Split sagacity's options (`schema`, `pool_*`) from a `postgresql://` URL.

    Raises:
        ConfigurationError: An option is malformed.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in query if key in _OPTION_NAMES}
    rest = [(key, value) for key, value in query if key not in _OPTION_NAMES]
    conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    schema = ours.get("schema") or None
    if schema is not None and len(schema.encode()) > 63:
        raise ConfigurationError(
            f"database URL schema {schema!r} is longer than PostgreSQL's 63-byte identifiers"
        )
    if schema is not None and ("%" in schema or "\x00" in schema):
        # The tables' names go into statements with placeholders, where % starts one.
        raise ConfigurationError(
            f"database URL schema {schema!r} holds a '%' or a NUL character: name a schema "
            "without them"
        )
    min_size = _number(ours, "pool_min_size", _DEFAULT_POOL_MIN_SIZE, int)
    max_size = _number(ours, "pool_max_size", max(_DEFAULT_POOL_MAX_SIZE, min_size), int)
    timeout = _number(ours, "pool_timeout", _DEFAULT_POOL_TIMEOUT, float)
    if not 0 <= min_size <= max_size or max_size < 1 or timeout <= 0:
        raise ConfigurationError(
            f"database URL options need 0 <= pool_min_size <= pool_max_size, pool_max_size "
            f">= 1 and pool_timeout > 0; got {min_size}, {max_size} and {timeout}"
        )
    host = parts.hostname or "localhost"
    where = f"PostgreSQL {host}:{parts.port or 5432}{parts.path or '/'}"
    if schema is not None:
        where += f" (schema {schema})"
    return Settings(
        conninfo=conninfo,
        schema=schema,
        pool_min_size=min_size,
        pool_max_size=max_size,
        timeout=timeout,
        where=where,
    )


_OPTION_NAMES = frozenset({"schema", "pool_min_size", "pool_max_size", "pool_timeout"})


def _number(options: dict[str, str], name: str, default: T, kind: Callable[[str], T]) -> T:
    if name not in options:
        return default
    try:
        return kind(options[name])
    except ValueError:
        raise ConfigurationError(
            f"database URL option {name}={options[name]!r} is not a {kind.__name__}"
        ) from None


def quote_identifier(name: str) -> str:
    """Quote a PostgreSQL identifier, doubling inner quotes."""
    return '"' + name.replace('"', '""') + '"'


def is_transient(error: BaseException) -> bool:
    """Tell whether `error` may not recur on a fresh connection (so a retry makes sense)."""
    if isinstance(error, psycopg_pool.PoolClosed):
        return False
    if isinstance(error, psycopg_pool.PoolTimeout | psycopg.InterfaceError):
        return True
    if not isinstance(error, psycopg.OperationalError):
        return False
    sqlstate = error.sqlstate
    if sqlstate is None:
        return True  # no server answer at all: the connection was lost or refused
    return sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES


class PostgresDatabase:
    """The connection pool and schema of one URL, shared by a journal and an approval store.

    Reference-counted: created holding one reference; `acquire` adds one, `release`
    drops one, and the pool closes when none is left.

    Raises:
        JournalError: The server cannot be reached in `pool_timeout` seconds, or the
            schema cannot be created.
        SchemaVersionError: The schema is newer than this sagacity.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.settings = parse_url(url)
        # create=False: an existing sagacity schema only; nothing is created or migrated.
        prepare_schema = ensure_schema if create else check_schema
        self.tables = _Tables(self.settings.schema)
        self._references = 1
        self._guard = threading.Lock()
        self._idle: list[Lease] = []
        """The connections kept aside by `checkin`, the most recently given back last."""
        self._keep = self.settings.pool_max_size if self.settings.pool_min_size else 0
        self._waiting = 0
        """Threads waiting for the pool; while any does, connections go back to it."""
        self._leases_guard = threading.Lock()
        self._prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = (
            weakref.WeakKeyDictionary()
        )
        """The statements prepared on each connection of the pool (see `run_steps`)."""
        self.pool: psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = (
            psycopg_pool.ConnectionPool(
                self.settings.conninfo,
                # Autocommit: an append is one INSERT, committed by the server as it runs.
                # prepare_threshold=0: every statement is prepared on its first use.
                kwargs={"autocommit": True, "prepare_threshold": 0, "client_encoding": "utf8"},
                min_size=self.settings.pool_min_size,
                max_size=self.settings.pool_max_size,
                timeout=self.settings.timeout,
                check=self._drop_if_server_spoke,
                # Give up on a failed connection at once rather than retry it in the
                # background with a growing delay: `checkout` asks again when needed.
                reconnect_timeout=0,
                name=self.settings.where,
                num_workers=1,
                open=False,
            )
        )
        try:
            self.pool.open(wait=self.settings.pool_min_size > 0, timeout=self.settings.timeout)
            self.run(
                lambda: f"cannot open the sagacity schema in {self.settings.where}",
                lambda conn: prepare_schema(conn, self.settings.schema, self.settings.where),
            )
        except psycopg_pool.PoolTimeout:
            self.pool.close()
            raise JournalError(
                f"cannot connect to {self.settings.where}: {self.unavailable_reason()}; "
                "check that the server is up and the URL is right"
            ) from None
        except BaseException:
            self.pool.close()
            raise

    def acquire(self) -> None:
        """Add a reference: the pool stays open until it is released."""
        with self._guard:
            if self._references == 0:
                raise JournalError(f"the connection pool of {self.settings.where} is closed")
            self._references += 1

    def release(self) -> None:
        """Drop a reference; the last one closes the pool."""
        with self._guard:
            if self._references == 0:
                return
            self._references -= 1
            last = self._references == 0
        if last:
            with self._leases_guard:
                idle, self._idle = self._idle, []
            for lease in idle:
                self._give_back(lease)
            self.pool.close()

    @property
    def closed(self) -> bool:
        """True once every reference was released."""
        return self._references == 0

    def run(
        self,
        describe: Callable[[], str],
        operation: Callable[[psycopg.Connection[tuple[Any, ...]]], T],
    ) -> T:
        """Run `operation` on a pooled connection, retrying on a lost connection.

        Only for operations that may safely run twice (reads, and writes whose second
        run fails harmlessly or is checked by the caller).

        Raises:
            JournalError: The operation failed for good, or kept failing for
                `pool_timeout` seconds; the message starts with `describe()`.
        """
        deadline = time.monotonic() + self.settings.timeout
        attempt = 0
        while True:
            try:
                with self.connection(deadline) as conn:
                    return operation(conn)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
                attempt += 1
                if not self.may_retry(error, deadline, attempt):
                    raise JournalError(f"{describe()}: {self.describe_error(error)}") from error

    def checkout(self, deadline: float) -> Lease:
        """Take a connection, waiting at most until `deadline` (`time.monotonic()`).

        A connection given back a moment ago is reused first, without a trip through
        the pool (see `checkin`). Otherwise the pool is asked again every fraction of a
        second: each request that finds it empty lets it try a new connection at once,
        so a server that comes back is used within moments rather than after the pool's
        reconnection backoff. Give the lease back with `checkin`.
        """
        if self._references == 0:
            raise psycopg_pool.PoolClosed(f"the connection pool of {self.settings.where} is closed")
        while True:
            with self._leases_guard:
                if not self._idle:
                    self._waiting += 1
                    break
                lease = self._idle.pop()
            if server_spoke(lease.conn):
                lease.conn.close()
                self._give_back(lease)  # closed: the pool discards it and opens another
                continue
            return lease
        try:
            wait = 0.05
            while True:
                remaining = deadline - time.monotonic()
                try:
                    conn = self.pool.getconn(timeout=max(min(wait, remaining), 0.001))
                    with self._leases_guard:
                        prepared = self._prepared.setdefault(conn, set())
                    return Lease(conn, time.monotonic(), prepared)
                except psycopg_pool.PoolTimeout:
                    if remaining <= wait:
                        raise
                    wait = min(wait * 2, 0.5)
        finally:
            with self._leases_guard:
                self._waiting -= 1

    def checkin(self, lease: Lease) -> None:
        """Give a lease back.

        A healthy connection is kept aside for the next checkout, with its lease and
        cursor (none when `pool_min_size` is 0), while no thread waits for one: handing
        it over costs a list operation instead of the pool's bookkeeping and a new
        cursor, a measurable part of an append (with sixteen threads, a fifth of the
        client's time for one). Each still goes back to the pool once it has been out
        of it for 30 seconds, so that the pool's lifetime limit applies to it: when it
        is given back then, or when another is, if it has waited aside since.
        """
        pgconn = lease.conn.pgconn
        now = time.monotonic()
        stale = None
        kept = False
        if (
            pgconn.status == _CONNECTION_OK
            and pgconn.transaction_status == _IDLE
            and now - lease.since < _KEPT_SECONDS
        ):
            with self._leases_guard:
                idle = self._idle
                if idle and now - idle[0].since >= _KEPT_SECONDS:
                    stale = idle.pop(0)  # the least recently used: unused 30 s, or old
                if self._waiting == 0 and len(idle) < self._keep and self._references:
                    idle.append(lease)
                    kept = True
        if stale is not None:
            self._give_back(stale)
        if not kept:
            self._give_back(lease)

    def _give_back(self, lease: Lease) -> None:
        self.pool.putconn(lease.conn)

    def _drop_if_server_spoke(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's check: close a connection the server ended while it sat idle."""
        if server_spoke(conn):
            conn.close()  # closed, the pool discards it and opens another
            raise psycopg.OperationalError("the server ended this idle connection")

    @contextlib.contextmanager
    def connection(self, deadline: float) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """`checkout` and `checkin` as a context manager."""
        lease = self.checkout(deadline)
        try:
            yield lease.conn
        finally:
            self.checkin(lease)

    def may_retry(self, error: BaseException, deadline: float, attempt: int) -> bool:
        """After a failed attempt: wait a little and say yes, or say no to give up."""
        pause = self.retry_pause(error, deadline, attempt)
        if pause is None:
            return False
        time.sleep(pause)
        return True

    def retry_pause(self, error: BaseException, deadline: float, attempt: int) -> float | None:
        """After a failed attempt: how long to wait before the next, or None to give up."""
        if self.closed or not is_transient(error):
            return None
        pause: float = min(0.02 * 2**attempt, 0.5)
        if time.monotonic() + pause >= deadline:
            return None
        return pause

    def describe_error(self, error: BaseException) -> str:
        """Say why an operation failed, in words an operator can act on."""
        if isinstance(error, psycopg_pool.PoolClosed):
            return "the store was closed; open a new one"
        if isinstance(error, psycopg_pool.PoolTimeout):
            return self.unavailable_reason()
        text = str(error).strip().replace("\n", " ")
        if is_transient(error):
            return (
                f"{text} (the connection to the server was lost and could not be replaced "
                f"within {self.settings.timeout:g} s)"
            )
        return text

    def unavailable_reason(self) -> str:
        """Explain why the pool had no connection: connect once, outside it, to ask."""
        try:
            with psycopg.connect(self.settings.conninfo, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as error:
            return f"the server refuses connections: {str(error).strip()}".replace("\n", " ")
        return (
            f"all {self.settings.pool_max_size} connections of the pool stayed busy for "
            f"{self.settings.timeout:g} s; raise pool_max_size in the URL or run fewer threads"
        )


class Lease:
    """A connection taken from the pool, with a cursor kept for its statements."""

    __slots__ = ("conn", "cursor", "prepared", "since")

    def __init__(
        self, conn: psycopg.Connection[tuple[Any, ...]], since: float, prepared: set[bytes]
    ) -> None:
        self.conn = conn
        self.cursor = conn.cursor()
        """Reused for the fast path's statements: creating a cursor per statement costs
        more than a tenth of the client's time for an append."""
        self.since = since
        """When it came out of the pool (`time.monotonic()`)."""
        self.prepared = prepared
        """The statements prepared on the connection, whichever lease held it (`run_steps`)."""


def server_spoke(conn: psycopg.BaseConnection[Any]) -> bool:
    """Tell whether the server wrote to an idle connection: unprompted, only to end it.

    (A restart, a failover, `pg_terminate_backend`.) One non-blocking `select`, under a
    microsecond; it keeps an append from being sent on a dead connection, where its
    fate would be unknown.
    """
    try:
        return bool(select.select([conn.pgconn.socket], [], [], 0)[0])
    except (psycopg.OperationalError, OSError, ValueError):
        return True


class _Tables:
    """The schema-qualified names of sagacity's tables."""

    def __init__(self, schema: str | None) -> None:
        prefix = "" if schema is None else quote_identifier(schema) + "."
        self.prefix = prefix
        self.journal = prefix + "sagacity_journal"
        self.approval = prefix + "sagacity_approval_request"
        self.lease = prefix + "sagacity_lease"
        self.qualifier = schema or ""
