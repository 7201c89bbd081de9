"""The SQLite journal's reads: a saga's entries, the sagas, every entry, the triggers, leases.

Reads share the journal's connection and lock; a lease is read without being taken.
"""

from __future__ import annotations

import datetime
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from sagacity._ids import require_lookup
from sagacity._sqlite import TRIGGERS
from sagacity.errors import JournalError
from sagacity.journal._entry import JournalEntry
from sagacity.journal._lease import SagaLease
from sagacity.journal._rows import entries_from_rows
from sagacity.journal._sqlite_sql import COLUMNS

__all__ = ["SqliteReader"]

_MOST_PARAMETERS = 500
"""Saga ids looked up in one statement: under SQLite's oldest limit of 999 parameters."""


class SqliteReader:
    """Reads a SQLite journal through its connection, under its lock.

    Args:
        conn: The journal's connection.
        lock: The journal's lock: one statement at a time on the connection.
        path: The database file, for error messages.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock, path: str) -> None:
        self._conn = conn
        self._lock = lock
        self._path = path

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order."""
        require_lookup(saga_id, "saga id")
        return self._select(
            f"SELECT {COLUMNS} FROM sagacity_journal WHERE saga_id = ? ORDER BY seq", (saga_id,)
        )

    def list_sagas(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Return saga ids in ascending order, after `after`."""
        require_lookup(after, "listing position (after)")
        # ">= ''" when starting, so that even an empty saga id is listed.
        bound = ">= ''" if after is None else "> ?"
        params = (limit,) if after is None else (after, limit)
        with self._lock:
            try:
                rows = self._conn.execute(
                    f"SELECT DISTINCT saga_id FROM sagacity_journal WHERE saga_id {bound} "
                    "ORDER BY saga_id LIMIT ?",
                    params,
                ).fetchall()
            except sqlite3.Error as error:
                raise JournalError(f"cannot list the sagas in {self._path!r}: {error}") from error
        return [row[0] for row in rows]

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return entries ordered by (saga_id, seq), after `after`."""
        saga_id, seq = after if after is not None else ("", 0)
        require_lookup(saga_id, "listing position (after)")
        return self._select(
            f"SELECT {COLUMNS} FROM sagacity_journal "
            "WHERE (saga_id, seq) > (?, ?) ORDER BY saga_id, seq LIMIT ?",
            (saga_id, seq, limit),
        )

    def missing_triggers(self) -> list[str]:
        """The append-only triggers the journal table lacks (see `SqliteJournal`)."""
        with self._lock:
            try:
                rows = self._conn.execute(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                    "AND tbl_name = 'sagacity_journal'"
                ).fetchall()
            except sqlite3.Error as error:
                raise JournalError(
                    f"cannot read the triggers in {self._path!r}: {error}"
                ) from error
        # A trigger of the right name whose body no longer refuses counts as missing.
        present = {row[0] for row in rows if "RAISE(ABORT" in str(row[1]).upper()}
        return [name for name in TRIGGERS if name not in present]

    def leases(self, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
        """The lease rows of `saga_ids` (those that have one), read without taking anything.

        A database made before leases has no lease table: none to show.
        """
        found: dict[str, SagaLease] = {}
        with self._lock:
            for start in range(0, len(saga_ids), _MOST_PARAMETERS):
                chunk = list(saga_ids[start : start + _MOST_PARAMETERS])
                query = (
                    "SELECT saga_id, owner, token, expires_at FROM sagacity_lease WHERE saga_id "
                    f"IN ({', '.join('?' for _ in chunk)})"
                )
                try:
                    rows = self._conn.execute(query, chunk).fetchall()
                except sqlite3.Error:  # a database made before leases: none to show
                    return {}
                for saga_id, owner, token, expires in rows:
                    found[saga_id] = SagaLease(
                        saga_id=saga_id,
                        owner=owner,
                        token=token,
                        expires_at=datetime.datetime.fromisoformat(expires),
                    )
        return found

    def _select(self, sql: str, params: tuple[Any, ...]) -> list[JournalEntry]:
        """Read entries; a row that cannot be read raises `UnreadableRowError` (a JournalError)."""
        with self._lock:
            try:
                try:
                    rows = self._conn.execute(sql, params).fetchall()
                except sqlite3.OperationalError as error:  # "Could not decode to UTF-8 …"
                    if "UTF-8" not in str(error):
                        raise
                    rows = self._select_raw(sql, params)
            except sqlite3.Error as error:
                raise JournalError(f"cannot read the journal in {self._path!r}: {error}") from error
        return entries_from_rows(rows)

    def _select_raw(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        """Read again (under the lock), keeping text that is not UTF-8 as bytes.

        Such text fails the whole read; as bytes, it is a column of the wrong type in the
        row that holds it, which the row mapping names by saga and seq.
        """
        self._conn.text_factory = _text_or_bytes
        try:
            return self._conn.execute(sql, params).fetchall()
        finally:
            self._conn.text_factory = str


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data
