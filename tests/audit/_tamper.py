"""Tampering with a stored journal the way an attacker with access to the storage would.

`MemoryTamper` edits the live lists of an `InMemoryJournal`; `SqliteTamper` drops the
append-only triggers and edits `sagacity_journal` with plain SQL. Positions are 1-based
indexes into `journal.entries(saga_id)` as it reads now.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any, Protocol

from sagacity.journal import InMemoryJournal, JournalEntry, Phase, SqliteJournal, canonical_bytes

FIELDS = [
    "saga_id",
    "seq",
    "phase",
    "tool_name",
    "call_id",
    "ref_seq",
    "payload",
    "recorded_at",
    "prev_hash",
    "hash",
]


class Tamper(Protocol):
    """What a test can do to a stored journal."""

    def set_field(self, saga_id: str, position: int, field: str, value: Any) -> bool:
        """Change one field of one entry; False when the storage cannot hold the result."""
        ...

    def delete(self, saga_id: str, position: int) -> None:
        """Delete one entry."""
        ...

    def swap(self, saga_id: str, first: int, second: int) -> None:
        """Exchange two entries of a saga."""
        ...

    def truncate(self, saga_id: str, keep: int) -> None:
        """Delete every entry after the first `keep`."""
        ...

    def replace(self, saga_id: str, position: int, entry: JournalEntry) -> None:
        """Overwrite one entry with another (a forger's rewrite)."""
        ...


class MemoryTamper:
    def __init__(self, journal: InMemoryJournal) -> None:
        self.chains = journal._chains()

    def set_field(self, saga_id: str, position: int, field: str, value: Any) -> bool:
        chain = self.chains[saga_id]
        chain[position - 1] = dataclasses.replace(chain[position - 1], **{field: value})
        return True

    def delete(self, saga_id: str, position: int) -> None:
        del self.chains[saga_id][position - 1]

    def swap(self, saga_id: str, first: int, second: int) -> None:
        chain = self.chains[saga_id]
        chain[first - 1], chain[second - 1] = chain[second - 1], chain[first - 1]

    def truncate(self, saga_id: str, keep: int) -> None:
        del self.chains[saga_id][keep:]

    def replace(self, saga_id: str, position: int, entry: JournalEntry) -> None:
        self.chains[saga_id][position - 1] = entry


class SqliteTamper:
    def __init__(self, journal: SqliteJournal) -> None:
        self.journal = journal
        self.conn = sqlite3.connect(journal.path, isolation_level=None)

    def edit(self, sql: str, params: Any = ()) -> None:
        """Run one edit with the triggers dropped, then put them back as they were.

        The triggers stop mistakes, not someone who can write the file; a careful one
        re-creates them, so that the missing-trigger check sees nothing.
        """
        triggers = self.conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall()
        for name, _ in triggers:
            self.conn.execute(f'DROP TRIGGER "{name}"')
        try:
            self.conn.execute(sql, params)
        finally:
            for _, create in triggers:
                self.conn.execute(create)

    def close(self) -> None:
        self.conn.close()

    def _key(self, saga_id: str, position: int) -> tuple[str, int]:
        entry = self.journal.entries(saga_id)[position - 1]
        return saga_id, entry.seq

    def set_field(self, saga_id: str, position: int, field: str, value: Any) -> bool:
        stored = _column_value(field, value)
        try:
            self.edit(
                f"UPDATE sagacity_journal SET {field} = ? WHERE saga_id = ? AND seq = ?",
                (stored, *self._key(saga_id, position)),
            )
        except sqlite3.IntegrityError:
            return False  # another row already has that (saga_id, seq)
        return True

    def delete(self, saga_id: str, position: int) -> None:
        self.edit(
            "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq = ?",
            self._key(saga_id, position),
        )

    def swap(self, saga_id: str, first: int, second: int) -> None:
        # Rows are ordered by seq: exchanging them means exchanging all else.
        entries = self.journal.entries(saga_id)
        one, other = entries[first - 1], entries[second - 1]
        self._overwrite(saga_id, one.seq, other)
        self._overwrite(saga_id, other.seq, one)

    def truncate(self, saga_id: str, keep: int) -> None:
        entries = self.journal.entries(saga_id)
        for entry in entries[keep:]:
            self.edit(
                "DELETE FROM sagacity_journal WHERE saga_id = ? AND seq = ?",
                (saga_id, entry.seq),
            )

    def replace(self, saga_id: str, position: int, entry: JournalEntry) -> None:
        seq = self._key(saga_id, position)[1]
        self._overwrite(saga_id, seq, entry)
        self.edit(
            "UPDATE sagacity_journal SET seq = ? WHERE saga_id = ? AND seq = ?",
            (entry.seq, saga_id, seq),
        )

    def _overwrite(self, saga_id: str, seq: int, source: JournalEntry) -> None:
        columns = [f for f in FIELDS if f not in ("saga_id", "seq")]
        self.edit(
            f"UPDATE sagacity_journal SET {', '.join(f'{c} = ?' for c in columns)} "
            "WHERE saga_id = ? AND seq = ?",
            (*(_column_value(c, getattr(source, c)) for c in columns), saga_id, seq),
        )


def _column_value(field: str, value: Any) -> Any:
    if field == "phase":
        return value.value if isinstance(value, Phase) else value
    if field == "payload":
        return canonical_bytes(value).decode()
    return value
