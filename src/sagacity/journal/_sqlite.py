"""The SQLite journal: the embedded default, for one machine and many processes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import orjson

from sagacity._sqlite import connect
from sagacity.errors import JournalError
from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import GENESIS_HASH, JournalEntry, Phase, seal

__all__ = ["SqliteJournal"]

_COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"


class SqliteJournal:
    """A journal in a SQLite file, shared safely by threads and processes.

    Each append is one `BEGIN IMMEDIATE` transaction: it takes the database's write
    lock before reading the saga's head, so the seq and `prev_hash` it computes cannot
    be stale, whichever process appends next.
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = str(path)
        self._conn = connect(path, busy_timeout_ms=busy_timeout_ms)
        self._lock = threading.Lock()

    def append(
        self,
        saga_id: str,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
    ) -> JournalEntry:
        """Append an entry and commit it durably (see `SideEffectJournal.append`)."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    head = conn.execute(
                        "SELECT seq, hash FROM sagacity_journal WHERE saga_id = ? "
                        "ORDER BY seq DESC LIMIT 1",
                        (saga_id,),
                    ).fetchone()
                    seq, prev_hash = (head[0] + 1, head[1]) if head else (1, GENESIS_HASH)
                    entry, payload_bytes = seal(
                        saga_id,
                        seq,
                        phase,
                        tool_name=tool_name,
                        call_id=call_id,
                        ref_seq=ref_seq,
                        payload=payload,
                        prev_hash=prev_hash,
                    )
                    conn.execute(
                        f"INSERT INTO sagacity_journal ({_COLUMNS}) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            saga_id,
                            seq,
                            phase.value,
                            tool_name,
                            call_id,
                            ref_seq,
                            payload_bytes.decode(),
                            entry.recorded_at,
                            prev_hash,
                            entry.hash,
                        ),
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise JournalError(
                    f"saga {saga_id!r}: cannot append {phase.value} to {self.path!r}: {error}"
                ) from error
            return entry

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order."""
        return self._select(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? ORDER BY seq", (saga_id,)
        )

    def list_sagas(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Return saga ids in ascending order, after `after`."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT saga_id FROM sagacity_journal WHERE saga_id > ? "
                "ORDER BY saga_id LIMIT ?",
                ("" if after is None else after, limit),
            ).fetchall()
        return [row[0] for row in rows]

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return entries ordered by (saga_id, seq), after `after`."""
        saga_id, seq = after if after is not None else ("", 0)
        return self._select(
            f"SELECT {_COLUMNS} FROM sagacity_journal "
            "WHERE (saga_id, seq) > (?, ?) ORDER BY saga_id, seq LIMIT ?",
            (saga_id, seq, limit),
        )

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()

    def _select(self, sql: str, params: tuple[Any, ...]) -> list[JournalEntry]:
        with self._lock:
            try:
                rows = self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as error:
                raise JournalError(f"cannot read the journal in {self.path!r}: {error}") from error
        return [_entry_from_row(row) for row in rows]


def _entry_from_row(row: tuple[Any, ...]) -> JournalEntry:
    return JournalEntry(
        saga_id=row[0],
        seq=row[1],
        phase=Phase(row[2]),
        tool_name=row[3],
        call_id=row[4],
        ref_seq=row[5],
        payload=orjson.loads(row[6]),
        recorded_at=row[7],
        prev_hash=row[8],
        hash=row[9],
    )
