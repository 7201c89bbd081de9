"""The SQLite journal's own guarantees: settings, and appends placed after the real head."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from sagacity import JournalError, Phase, SerializationError
from sagacity.audit import verify
from sagacity.journal import JournalEntry, SqliteJournal


def assert_one_chain(entries: list[JournalEntry], length: int) -> None:
    assert [e.seq for e in entries] == list(range(1, length + 1))
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(entries))


class TestSqliteJournal:
    def test_the_settings_the_guarantees_rest_on(self, tmp_path: Path) -> None:
        """WAL, synchronous=FULL and a busy timeout are set on the journal's connection."""
        journal = SqliteJournal(tmp_path / "journal.db", busy_timeout_ms=1234)
        conn = journal._conn
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (1234,)
        journal.close()

    def test_two_writers_alternating_on_one_saga(self, tmp_path: Path) -> None:
        """Each writer's remembered head goes stale at every turn; no seq is lost or reused."""
        first = SqliteJournal(tmp_path / "journal.db")
        second = SqliteJournal(tmp_path / "journal.db")
        for n in range(10):
            (first if n % 3 else second).append("order-1", Phase.INTENT, payload=n)
        entries = first.entries("order-1")
        assert_one_chain(entries, 10)
        assert [e.payload for e in entries] == list(range(10))
        assert verify(second).ok
        first.close()
        second.close()

    def test_rows_deleted_behind_the_writer_leave_their_gap(self, tmp_path: Path) -> None:
        """A writer goes on from the head it wrote: a deleted tail stays visible as a gap."""
        journal = SqliteJournal(tmp_path / "journal.db")
        written = [journal.append("order-1", Phase.INTENT, payload=n) for n in range(3)]
        conn = sqlite3.connect(journal.path, isolation_level=None)
        conn.execute("DROP TRIGGER sagacity_journal_no_delete")
        conn.execute("DELETE FROM sagacity_journal WHERE seq = 3")
        conn.close()
        entry = journal.append("order-1", Phase.EXECUTED)
        assert (entry.seq, entry.prev_hash) == (4, written[2].hash)
        (problem,) = verify(journal).problems
        assert (problem.saga_id, problem.seq) == ("order-1", 3)
        assert problem.reason == "gap: seq 3 is missing (next is 4)"
        journal.close()

    def test_a_refused_payload_leaves_the_next_append_in_place(self, tmp_path: Path) -> None:
        """SerializationError appends nothing and the next append takes the next seq."""
        journal = SqliteJournal(tmp_path / "journal.db")
        journal.append("order-1", Phase.INTENT)
        with pytest.raises(SerializationError):
            journal.append("order-1", Phase.EXECUTED, payload=float("inf"))
        assert journal.append("order-1", Phase.EXECUTED).seq == 2
        assert_one_chain(journal.entries("order-1"), 2)
        journal.close()

    def test_a_failed_write_raises_journal_error_naming_the_saga(self, tmp_path: Path) -> None:
        """When the database refuses the write, the append fails loudly; nothing is dropped."""
        journal = SqliteJournal(tmp_path / "journal.db", busy_timeout_ms=50)
        journal.append("order-1", Phase.INTENT)
        blocker = sqlite3.connect(journal.path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(JournalError, match=r"saga 'order-1': cannot append EXECUTED"):
            journal.append("order-1", Phase.EXECUTED)
        blocker.execute("ROLLBACK")
        blocker.close()
        assert journal.append("order-1", Phase.EXECUTED).seq == 2
        journal.close()
