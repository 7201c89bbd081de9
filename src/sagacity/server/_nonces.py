"""Single-use marks: an e-mail link opened once, a Slack interaction taken once.

A mark is a security nonce, not a fact about a saga: the journal stays the only truth
about decisions (an approval made after opening a link is journaled as any other).
What a mark says is only "this link (or this signed Slack request) was already taken",
so that a forwarded or replayed one is refused. Marks live in a small table beside the
approval requests, in the same database: `sagacity_channel_nonce` (scope, nonce, who
took it, when, until when it matters). A mark is kept until what it guards expires (a
link's own expiry, a Slack request's five minutes), then purged: an expired link or
request is refused for its age anyway.

`nonce_store_for(approvals)` picks the backend of an approval store: memory for
`InMemoryApprovalStore`, the same SQLite file, or the same PostgreSQL pool and schema,
so that every server process sharing one database refuses a mark another one took.
"""

from __future__ import annotations

import datetime
import secrets
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sagacity._sqlite import connect
from sagacity.approval import ApprovalStore, InMemoryApprovalStore, SqliteApprovalStore
from sagacity.errors import ConfigurationError, JournalError

if TYPE_CHECKING:
    from sagacity.journal.postgres._database import PostgresDatabase

__all__ = [
    "InMemoryNonceStore",
    "NonceStore",
    "PostgresNonceStore",
    "SqliteNonceStore",
    "nonce_store_for",
]

TABLE = "sagacity_channel_nonce"


@runtime_checkable
class NonceStore(Protocol):
    """Where single-use marks are taken, shared by every process of one database."""

    def take(
        self, scope: str, nonce: str, *, by: str, now: datetime.datetime, until: datetime.datetime
    ) -> bool:
        """Take the mark `nonce` of `scope` for `by`; False when it was taken before.

        `until` is when the mark stops mattering (what it guards expires): it may be
        forgotten after that. Taking is atomic across threads and processes.
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...


class InMemoryNonceStore:
    """Marks in this process's memory (a `memory://` Sagacity, tests); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: dict[tuple[str, str], datetime.datetime] = {}

    def take(
        self, scope: str, nonce: str, *, by: str, now: datetime.datetime, until: datetime.datetime
    ) -> bool:
        """Take the mark; False when it was taken before (see `NonceStore.take`)."""
        with self._lock:
            for key in [k for k, expiry in self._taken.items() if expiry < now]:
                del self._taken[key]
            if (scope, nonce) in self._taken:
                return False
            self._taken[(scope, nonce)] = until
            return True

    def close(self) -> None:
        """Nothing to release."""


_SQLITE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    scope      TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    taken_by   TEXT NOT NULL,
    taken_at   TEXT NOT NULL,
    expires_at TEXT NOT NULL,  -- UTC ISO 8601: sorts as it compares
    PRIMARY KEY (scope, nonce)
) WITHOUT ROWID
"""


def _text(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SqliteNonceStore:
    """Marks in the SQLite file of the journal and approval requests."""

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = str(path)
        # The file exists: the approval store beside which the marks live opened it.
        self._conn = connect(path, busy_timeout_ms=busy_timeout_ms, create=False)
        self._lock = threading.Lock()
        try:
            self._conn.execute("PRAGMA synchronous = FULL")
            self._conn.execute(_SQLITE_TABLE)
        except sqlite3.Error as error:
            self._conn.close()
            raise JournalError(f"cannot create {TABLE} in {self.path!r}: {error}") from error

    def take(
        self, scope: str, nonce: str, *, by: str, now: datetime.datetime, until: datetime.datetime
    ) -> bool:
        """Take the mark; False when it was taken before (see `NonceStore.take`)."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.execute(f"DELETE FROM {TABLE} WHERE expires_at < ?", (_text(now),))
                    taken = self._conn.execute(
                        f"INSERT INTO {TABLE} (scope, nonce, taken_by, taken_at, expires_at) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (scope, nonce) DO NOTHING",
                        (scope, nonce, by, _text(now), _text(until)),
                    ).rowcount
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise JournalError(
                    f"cannot take the single-use mark of a {scope} in {self.path!r}: {error}"
                ) from error
        return taken == 1

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


class PostgresNonceStore:
    """Marks in the PostgreSQL database (and schema, and pool) of the approval requests."""

    def __init__(self, database: PostgresDatabase) -> None:
        database.acquire()
        self._db = database
        self._closed = False
        table = database.tables.prefix + TABLE
        self._sql_purge = f"DELETE FROM {table} WHERE expires_at < %s"
        # `claim` tells our own insert, committed before a lost reply and retried, from
        # another taker's: the retry finds the row and sees its own claim.
        self._sql_take = (
            f"INSERT INTO {table} (scope, nonce, taken_by, taken_at, expires_at, claim) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (scope, nonce) DO NOTHING"
        )
        self._sql_claim = f"SELECT claim FROM {table} WHERE scope = %s AND nonce = %s"
        create = f"""
            CREATE TABLE IF NOT EXISTS {table} (
                scope      text COLLATE "C" NOT NULL,
                nonce      text COLLATE "C" NOT NULL,
                taken_by   text NOT NULL,
                taken_at   timestamptz NOT NULL,
                expires_at timestamptz NOT NULL,
                claim      text NOT NULL,
                PRIMARY KEY (scope, nonce)
            )
        """
        try:
            self._db.run(lambda: f"cannot create {table}", lambda conn: conn.execute(create))
        except BaseException:
            self.close()
            raise

    def take(
        self, scope: str, nonce: str, *, by: str, now: datetime.datetime, until: datetime.datetime
    ) -> bool:
        """Take the mark; False when it was taken before (see `NonceStore.take`)."""
        if self._closed:
            raise JournalError(f"cannot take the single-use mark of a {scope}: the store is closed")
        claim = secrets.token_hex(16)

        def take(conn: Any) -> bool:
            conn.execute(self._sql_purge, (now,))
            if conn.execute(self._sql_take, (scope, nonce, by, now, until, claim)).rowcount == 1:
                return True
            row = conn.execute(self._sql_claim, (scope, nonce)).fetchone()
            return row is not None and row[0] == claim

        taken: bool = self._db.run(
            lambda: f"cannot take the single-use mark of a {scope} in {self._db.settings.where}",
            take,
        )
        return taken

    def close(self) -> None:
        """Release this store's hold on the pool; closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._db.release()


def nonce_store_for(approvals: ApprovalStore) -> NonceStore:
    """The mark store beside `approvals`: the same memory, SQLite file or PostgreSQL pool.

    Raises:
        ConfigurationError: An approval store of another kind: pass a `NonceStore`.
    """
    if isinstance(approvals, InMemoryApprovalStore):
        return InMemoryNonceStore()
    if isinstance(approvals, SqliteApprovalStore):
        return SqliteNonceStore(approvals.path)
    database = getattr(approvals, "database", None)
    if database is not None and type(approvals).__name__ == "PostgresApprovalStore":
        return PostgresNonceStore(database)
    raise ConfigurationError(
        f"no single-use mark store for an approval store of type {type(approvals).__name__}: "
        "pass nonces= a NonceStore shared by every process that serves the links"
    )
