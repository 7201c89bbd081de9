"""Watching the journal for decisions: which sagas may have one to act on, and waking up.

A watch only says where to look. What a saga waits for is always read from its own
journal (`awaiting_resume`), so a wake-up missed, late or repeated costs latency, never
correctness; a full look (`all_sagas`) now and then finds what the quick looks missed.

- SQLite: `PRAGMA data_version` tells in microseconds whether another connection
  committed since the last look; only then are the decision rows since the last one read
  (through a partial index on the decision rows, created on first use).
- Memory, and any other journal: every entry is read at each look (for tests and one
  process; cheap at that size).
- PostgreSQL: `sagacity.worker._postgres` (LISTEN/NOTIFY, polling where it cannot).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Protocol

from sagacity.errors import ConfigurationError, JournalError
from sagacity.journal import Phase, SideEffectJournal, SqliteJournal
from sagacity.worker._marks import Watermark

__all__ = [
    "DECIDING",
    "JournalWatch",
    "ScanWatch",
    "SqliteWatch",
    "open_watch",
]

DECIDING = (Phase.APPROVED.value, Phase.REJECTED.value)
"""The phases whose entries are decisions (an expiry is read from the requests' times)."""


class JournalWatch(Protocol):
    """Where a worker or a waiter looks for decisions, and what wakes it."""

    wakeup: str
    """`"listen"` when a notification wakes the watcher, `"poll"` when only time does."""

    def changed(self) -> set[str]:
        """The sagas with a decision row since the last look (may include old ones)."""
        ...

    def all_sagas(self) -> set[str]:
        """Every saga with a decision row that may still wait to be acted on."""
        ...

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a wake-up; True if one came (else time passed)."""
        ...

    def interrupt(self) -> None:
        """Wake a `wait` at once (to stop)."""
        ...

    def close(self) -> None:
        """Release the watch's connections."""
        ...


class _Sleeper:
    """A wait that `interrupt` cuts short."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def wait(self, timeout: float) -> bool:
        woke = self._event.wait(timeout)
        self._event.clear()
        return woke

    def interrupt(self) -> None:
        self._event.set()


class ScanWatch(_Sleeper):
    """Reads every entry at each look: for the memory journal and unknown backends."""

    wakeup = "poll"

    def __init__(self, journal: SideEffectJournal) -> None:
        super().__init__()
        self._journal = journal
        self._marks = Watermark()

    def _rows(self) -> list[tuple[str, int, str]]:
        rows = []
        after: tuple[str, int] | None = None
        while True:
            page = self._journal.list_entries(after=after, limit=1000)
            rows += [(e.saga_id, e.seq, e.recorded_at) for e in page if e.phase.value in DECIDING]
            if len(page) < 1000:
                return rows
            after = (page[-1].saga_id, page[-1].seq)

    def changed(self) -> set[str]:
        return self._marks.fresh(self._rows())

    def all_sagas(self) -> set[str]:
        return {saga_id for saga_id, _, _ in self._rows()}

    def close(self) -> None:
        pass


_INDEX = (
    "CREATE INDEX IF NOT EXISTS sagacity_journal_decided ON sagacity_journal (recorded_at) "
    "WHERE phase IN ('APPROVED', 'REJECTED')"
)
"""Decision rows by time: each quick look reads the newest few, not the whole journal."""

_SINCE = (
    "SELECT saga_id, seq, recorded_at FROM sagacity_journal "
    "WHERE phase IN ('APPROVED', 'REJECTED') AND recorded_at >= ?"
)
_ALL = (
    "SELECT DISTINCT d.saga_id FROM sagacity_journal d "
    "WHERE d.phase IN ('APPROVED', 'REJECTED') AND NOT EXISTS ("
    " SELECT 1 FROM sagacity_journal e WHERE e.saga_id = d.saga_id AND e.seq > d.seq"
    " AND e.phase = 'ENDED' AND instr(e.payload, '\"compensation_waiting\"') = 0)"
)
"""Sagas with a decision and no later ENDED, or one that left its undo to the tools."""


class SqliteWatch(_Sleeper):
    """Cheap polling of a SQLite journal: a look costs a pragma until something commits."""

    wakeup = "poll"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        try:
            setup = sqlite3.connect(path, timeout=30)
            try:
                with setup:
                    setup.execute(_INDEX)
            finally:
                setup.close()
            # Never written through: `data_version` then moves only for other writers.
            self._conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
        except sqlite3.Error as error:
            raise JournalError(f"cannot watch the journal in {path!r}: {error}") from error
        self._lock = threading.Lock()
        self._version: int | None = None
        self._marks = Watermark()

    def changed(self) -> set[str]:
        with self._lock:
            try:
                (version,) = self._conn.execute("PRAGMA data_version").fetchone()
                if version == self._version:
                    return set()
                self._version = version
                rows = self._conn.execute(_SINCE, (self._marks.floor() or "",)).fetchall()
            except sqlite3.Error as error:
                raise JournalError(f"cannot read the journal in {self.path!r}: {error}") from error
        return self._marks.fresh(rows)

    def all_sagas(self) -> set[str]:
        with self._lock:
            try:
                return {row[0] for row in self._conn.execute(_ALL).fetchall()}
            except sqlite3.Error as error:
                raise JournalError(f"cannot read the journal in {self.path!r}: {error}") from error

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def open_watch(journal: SideEffectJournal, *, listen: bool | None = None) -> JournalWatch:
    """The watch that fits `journal`'s backend (see the module docstring).

    Raises:
        ConfigurationError: `listen=True` on a journal that is not PostgreSQL.
    """
    postgres = type(journal).__module__.startswith("sagacity.journal.postgres")
    if listen and not postgres:
        raise ConfigurationError(
            f"listen=True needs a PostgreSQL journal; this one is {type(journal).__name__}"
        )
    if postgres:
        from sagacity.worker._postgres import PostgresWatch

        return PostgresWatch(journal, listen=listen)
    if isinstance(journal, SqliteJournal):
        return SqliteWatch(journal.path)
    return ScanWatch(journal)
