"""Watching a PostgreSQL journal: LISTEN/NOTIFY, and polling where LISTEN cannot work.

A trigger on the journal table, part of its schema (version 4), sends
`NOTIFY sagacity_decisions` for each APPROVED or REJECTED row, in the transaction that
appends it: the notification is delivered when, and only if, the decision commits. The
worker LISTENs on its own connection; a notification about another schema's journal in
the same database does not wake it.

Behind a pooler that hands a session's statements to different server connections
(PgBouncer in transaction mode), LISTEN is accepted but nothing is ever delivered. The
watch finds that out when it starts, by notifying itself and waiting for the echo, and
then polls (a query on the decision rows since the last look, through a partial index);
`listen=False` skips the test and polls. Either way a full look now and then finds what
a lost notification or a dropped connection missed.

Imported only for a PostgreSQL journal: psycopg is the `postgres` extra.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

import psycopg

from sagacity.errors import JournalError
from sagacity.journal import SideEffectJournal
from sagacity.worker._marks import Watermark

__all__ = ["CHANNEL", "PostgresWatch"]

logger = logging.getLogger("sagacity.worker")

CHANNEL = "sagacity_decisions"
"""The channel the journal's trigger notifies on (`sagacity_journal_notify_decision`, in
`sagacity.journal.postgres._schema`); the payload names the schema and the saga."""

_PROBE_WAIT = 2.0
"""Seconds to wait for the watch's own NOTIFY before deciding LISTEN is not delivered."""

_SLICE = 0.25
"""The longest a wait blocks on the socket before looking whether it was interrupted."""

_INDEX = """
    CREATE INDEX CONCURRENTLY IF NOT EXISTS sagacity_journal_decided ON {table} (recorded_at)
        WHERE phase IN ('APPROVED', 'REJECTED')
"""
"""Built without blocking the journal's appends (CONCURRENTLY), so a first worker on a
journal of millions of rows does not hold the writers up while it is built."""


class PostgresWatch:
    """Decisions in a PostgreSQL journal, by LISTEN/NOTIFY or by polling."""

    def __init__(self, journal: SideEffectJournal, *, listen: bool | None = None) -> None:
        self._db: Any = journal.database  # type: ignore[attr-defined]
        tables = self._db.tables
        self._table: str = tables.journal
        self._schema: str | None = self._db.settings.schema
        self._where: str = self._db.settings.where
        self._marks = Watermark()
        self._notified: set[str] = set()
        self._everything = False
        """A notification named no saga (or a connection dropped): look at recent rows."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._no_trigger = False
        self._install(tables.prefix)
        self.listening = False
        if listen is not False and not self._no_trigger:
            self.listening = self._listen()
            if not self.listening and listen:
                raise JournalError(
                    f"LISTEN on {self._where} delivers no notification (a pooler in "
                    "transaction mode?); run the worker with listen=False (--poll) to poll"
                )
            if not self.listening:
                logger.warning(
                    "LISTEN on %s delivers no notification (a pooler in transaction mode, "
                    "such as PgBouncer?): polling the journal for decisions instead",
                    self._where,
                )
        self.wakeup = "listen" if self.listening else "poll"

    # -- setup ---------------------------------------------------------------------------

    def _install(self, prefix: str) -> None:
        """Check the schema's decision trigger, and build the decisions' index if missing."""

        def trigger(conn: psycopg.Connection[Any]) -> bool:
            return (
                conn.execute(
                    "SELECT 1 FROM pg_trigger WHERE tgname = 'sagacity_journal_decision' "
                    "AND tgrelid = %s::regclass AND tgenabled <> 'D'",
                    (self._table,),
                ).fetchone()
                is not None
            )

        def index(conn: psycopg.Connection[Any]) -> None:
            found = conn.execute(
                "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = %s::regclass AND c.relname = 'sagacity_journal_decided' "
                "AND i.indisvalid",
                (self._table,),
            ).fetchone()
            if found is None:
                # A build another worker left invalid is dropped and made again.
                conn.execute(
                    f"DROP INDEX CONCURRENTLY IF EXISTS {prefix}sagacity_journal_decided".encode()
                )
                conn.execute(_INDEX.format(table=self._table).encode())

        if not self._db.run(lambda: f"cannot read the triggers of {self._where}", trigger):
            logger.warning(
                "%s has no enabled decision trigger (sagacity_journal_decision: its schema "
                "was opened without being upgraded to version 4, or the trigger was dropped "
                "or disabled): waking on decisions by polling only; open the journal once "
                "from a worker of this sagacity to restore it",
                self._where,
            )
            self._no_trigger = True
        try:
            self._db.run(lambda: f"cannot index the decisions in {self._where}", index)
        except JournalError as error:  # two workers building it at once: one wins
            logger.info("%s (another worker may be building it)", error)

    def _listen(self) -> bool:
        """LISTEN on a connection of its own, and check that a NOTIFY comes back."""
        try:
            conn = psycopg.connect(self._db.settings.conninfo, autocommit=True, connect_timeout=5)
            conn.execute(f"LISTEN {CHANNEL}".encode())
            token = uuid.uuid4().hex
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps({"probe": token})))
            deadline = time.monotonic() + _PROBE_WAIT
            while time.monotonic() < deadline:
                left = deadline - time.monotonic()
                for note in list(conn.notifies(timeout=max(left, 0.0), stop_after=1)):
                    if json.loads(note.payload).get("probe") == token:
                        self._conn = conn
                        return True
                    self._take(note.payload)
            conn.close()
        except psycopg.Error as error:
            logger.warning("cannot LISTEN on %s (%s): polling instead", self._where, error)
        return False

    # -- watching ------------------------------------------------------------------------

    def _take(self, payload: str) -> bool:
        """Note what a notification names; False if it is not about this journal."""
        try:
            said = json.loads(payload)
        except ValueError:
            self._everything = True
            return True
        if not isinstance(said, dict) or "probe" in said:
            return False
        if self._schema is not None and said.get("schema") != self._schema:
            return False  # another schema's journal in the same database
        saga_id = said.get("saga_id")
        if isinstance(saga_id, str):
            self._notified.add(saga_id)
        else:
            self._everything = True
        return True

    def wait(self, timeout: float) -> bool:
        """Wait for a notification (listening) or for `timeout` to pass (polling)."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            conn = self._conn
            if conn is None:
                self._stop.wait(min(left, _SLICE))
                continue
            try:
                # Each generator holds the connection's lock until it is exhausted: list it.
                notes = list(conn.notifies(timeout=min(left, _SLICE), stop_after=1))
                if notes:
                    notes += list(conn.notifies(timeout=0.0))  # those already here
                    with self._lock:
                        ours = [self._take(note.payload) for note in notes]
                    if any(ours):  # another schema's decisions do not wake this watch
                        return True
            except psycopg.Error as error:
                logger.warning(
                    "the LISTEN connection to %s failed (%s): polling until it is back",
                    self._where,
                    error,
                )
                self._drop()
        self._stop.clear()
        return True

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        with self._lock:
            self._everything = True
        if conn is not None:
            conn.close()

    def interrupt(self) -> None:
        self._stop.set()

    def changed(self) -> set[str]:
        """The sagas notified since the last look; after a timeout, the recent rows too."""
        if self.listening and self._conn is None:
            self.listening = self._listen()  # the connection dropped: try again
        with self._lock:
            notified, self._notified = self._notified, set()
            everything, self._everything = self._everything, False
        if self._conn is not None and not everything:
            return notified
        return notified | self._recent()

    def _recent(self) -> set[str]:
        floor = self._marks.floor() or ""
        rows = self._db.run(
            lambda: f"cannot read the decisions in {self._where}",
            lambda conn: conn.execute(
                f"SELECT saga_id, seq, recorded_at FROM {self._table} "
                "WHERE phase IN ('APPROVED', 'REJECTED') AND recorded_at >= %s",
                (floor,),
            ).fetchall(),
        )
        return self._marks.fresh(rows)

    def all_sagas(self) -> set[str]:
        rows = self._db.run(
            lambda: f"cannot read the decisions in {self._where}",
            lambda conn: conn.execute(
                f"SELECT DISTINCT d.saga_id FROM {self._table} d "
                "WHERE d.phase IN ('APPROVED', 'REJECTED') AND NOT EXISTS ("
                f" SELECT 1 FROM {self._table} e WHERE e.saga_id = d.saga_id"
                " AND e.seq > d.seq AND e.phase = 'ENDED'"
                " AND strpos(e.payload, '\"compensation_waiting\"') = 0)"
            ).fetchall(),
        )
        return {row[0] for row in rows}

    def close(self) -> None:
        self._stop.set()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
