"""The PostgreSQL journal: a total order per saga, under any number of workers.

The journal itself is the facade: appends go through its group commit (`_threads.py`)
to its `Appender` (`_appender.py`: the fast path, the locked path, conditional and fenced
appends, retries after a lost connection) one at a time, or as one statement (`_batch.py`);
async appends go through the writer of their event loop (`_async.py`). Leases are taken
with `_leases.py`'s statements; reads are here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import weakref
from collections.abc import Callable
from typing import Any

from sagacity._ids import require_id, require_lookup
from sagacity.errors import AppendConflictError, JournalError, LeaseLostError, SerializationError
from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import JournalEntry, Phase
from sagacity.journal._group import (
    AppendRequest,
    AppendWithdrawn,
    CommittedThenCancelled,
    GroupStats,
)
from sagacity.journal._lease import RELEASED, SagaLease, lost
from sagacity.journal._rows import entries_from_rows
from sagacity.journal.postgres._append import Append, AppendStats
from sagacity.journal.postgres._appender import COLUMNS, Appender
from sagacity.journal.postgres._async import LoopWriter
from sagacity.journal.postgres._batch import append_batch
from sagacity.journal.postgres._connections import IdleConnections
from sagacity.journal.postgres._database import PostgresDatabase
from sagacity.journal.postgres._leases import LeaseStatements, LeaseTake
from sagacity.journal.postgres._schema import LOCK_CLASS
from sagacity.journal.postgres._steps import ALL, Statement, Steps, run_steps
from sagacity.journal.postgres._threads import ThreadGroup

__all__ = ["PostgresJournal"]

_KNOWN_FATES = (
    AppendConflictError,
    LeaseLostError,
    SerializationError,
    AppendWithdrawn,
    CommittedThenCancelled,
)
"""What an append can raise with its fate known: refused (nothing written), or written."""


class PostgresJournal:
    """A journal in PostgreSQL, shared by any number of threads, processes and machines.

    Args:
        database: A `postgresql://` URL (see docs/postgres.md for its options), or a
            `PostgresDatabase` to share its pool with an approval store.

    Raises:
        JournalError: The server cannot be reached or the schema cannot be created.
        SchemaVersionError: The database holds a newer schema than this sagacity knows.
    """

    def __init__(self, database: str | PostgresDatabase) -> None:
        if isinstance(database, str):
            self._db = PostgresDatabase(database)
        else:
            database.acquire()
            self._db = database
        self._appender = Appender(self._db)
        """Appends one at a time, and the heads and leases this journal knows of."""
        table = self._db.tables.journal
        self._leases = LeaseStatements(self._db)
        self._sql_entries = f"SELECT {COLUMNS} FROM {table} WHERE saga_id = %s ORDER BY seq"
        self._sql_page = (
            f"SELECT {COLUMNS} FROM {table} WHERE (saga_id, seq) > (%s, %s::bigint) "
            "ORDER BY saga_id, seq LIMIT %s::bigint"
        )
        self._sql_sagas_after = _sql_sagas(table, ">")
        self._sql_sagas_from = _sql_sagas(table, ">=")  # the first page: '' is a saga id too
        appender = self._appender
        # As many commits in flight as the pool allows, one connection left for reads and
        # leases: the server merges their WAL flushes. Appends that find them all busy, or
        # their saga's commit in flight, queue and go together in the next batch; with
        # more threads than that, behind one commit in flight (see `ThreadGroup`).
        self._group = ThreadGroup(
            appender.append_request,
            lambda requests: append_batch(appender, requests),
            leaders=max(1, self._db.settings.pool_max_size - 1),
            fresh=1,
        )
        self._loop_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWriter] = (
            weakref.WeakKeyDictionary()
        )
        """Async appends, per event loop (see `_async.py`)."""
        self._async_idle = IdleConnections()
        """The async connections no loop is using now."""

    @property
    def group_stats(self) -> GroupStats:
        """How appends were committed: alone or in batches (see `ThreadGroup`)."""
        return self._group.stats

    @property
    def database(self) -> PostgresDatabase:
        """The database and pool this journal uses."""
        return self._db

    @property
    def stats(self) -> AppendStats:
        """How appends went so far: the fast path, the locked path, conflicts, reconnects."""
        return self._appender.stats()

    # -- appending ---------------------------------------------------------------------------

    def append(
        self,
        saga_id: str,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
        fence: SagaLease | None = None,
    ) -> JournalEntry:
        """Append an entry and commit it durably (see `SideEffectJournal.append`).

        Raises:
            AppendConflictError: `expected_seq` was given and is not the saga's last
                seq; nothing was written.
            LeaseLostError: `fence` no longer holds the saga; nothing was written.
            InvalidIdError: The saga id cannot be stored or shown (see `Sagacity.saga`).
            JournalError: The entry could not be committed (the message says whether it
                was surely not written, or may have been); it is never silently dropped.
        """
        require_id(saga_id, "saga id")
        request = AppendRequest(
            saga_id, phase, tool_name, call_id, ref_seq, payload, expected_seq, fence
        )
        if fence is None:
            return self._group.append(request)
        key = self._appender.begun(fence)
        try:
            entry = self._group.append(request)
        except _KNOWN_FATES:
            self._appender.ended(key)
            raise
        self._appender.ended(key)
        return entry

    async def aappend(
        self,
        saga_id: str,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
        fence: SagaLease | None = None,
    ) -> JournalEntry:
        """`append` for async code, on psycopg's async connections (see `_async.py`).

        Same guarantees and errors as `append`; see `committed` for cancellation.
        """
        require_id(saga_id, "saga id")
        writer = self._loop_writer(lambda: f"saga {saga_id!r}: cannot append {phase.value}")
        request = AppendRequest(
            saga_id, phase, tool_name, call_id, ref_seq, payload, expected_seq, fence
        )
        if fence is None:
            return await writer.append(request)
        key = self._appender.begun(fence)
        try:
            entry = await writer.append(request)
        except _KNOWN_FATES:
            self._appender.ended(key)
            raise
        self._appender.ended(key)
        return entry

    def _loop_writer(self, what: Callable[[], str]) -> LoopWriter:
        """The running loop's writer, made on its first use; `what` names a refusal."""
        loop = asyncio.get_running_loop()
        writer = self._loop_writers.get(loop)
        if writer is None:
            with self._appender.guard:
                if self._appender.closed:
                    raise JournalError(f"{what()}: the journal is closed; open a new one")
                writer = self._loop_writers.get(loop)
                if writer is None:
                    writer = self._loop_writers[loop] = self._new_loop_writer()
        return writer

    def _new_loop_writer(self) -> LoopWriter:
        """A writer for the running loop, on this journal's appender, group and connections."""
        return LoopWriter(self._appender, self._group, self._leases, self._async_idle)

    def _lock_key(self, saga_id: str) -> int:
        return self._appender.lock_key(saga_id)

    def advisory_lock_key(self, saga_id: str) -> tuple[int, int]:
        """The keys of the advisory lock that appends to `saga_id` on the locked path take.

        An operator holding `pg_advisory_xact_lock(k1, k2)` pauses those appends; the
        fast path does not take it (docs/postgres.md).
        """
        return LOCK_CLASS, self._lock_key(saga_id)

    # -- leases (see _leases.py) ------------------------------------------------------------

    def acquire_lease(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """Take the saga's lease if it is free at `now` (see `SideEffectJournal`).

        A lease taken over (expired, never released, its saga not ended) is journaled as
        TAKEN_OVER in the same transaction (`sagacity_take_lease`).
        """
        require_id(saga_id, "saga id")
        leases = self._leases
        take = self._take(saga_id, owner, now, expires_at)
        return self._appender.took(
            self._db.run(
                lambda: leases.acquiring(saga_id),
                lambda conn: run_steps(conn.cursor(), leases.acquire(take)),
            )
        )

    async def aacquire_lease(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """`acquire_lease` for async code, on the loop's async connections.

        Takes that overlap go together, in one statement (`LoopWriter.take_lease`).
        """
        require_id(saga_id, "saga id")
        take = self._take(saga_id, owner, now, expires_at)
        writer = self._loop_writer(lambda: self._leases.acquiring(saga_id))
        return self._appender.took(await writer.take_lease(take))

    def _take(
        self, saga_id: str, owner: str, now: datetime.datetime, expires_at: datetime.datetime
    ) -> LeaseTake:
        marker = Append(saga_id, Phase.TAKEN_OVER, None, None, None, {"owner": owner}, None, None)
        payload_text, before_prev, before_seq, after_seq = marker.pieces()
        return LeaseTake(
            self._lock_key(saga_id),
            saga_id,
            owner,
            expires_at,
            now,
            payload_text,
            marker.recorded_at,
            before_prev,
            before_seq,
            after_seq,
        )

    def renew_lease(self, lease: SagaLease, *, expires_at: datetime.datetime) -> SagaLease:
        """Move the lease's expiry; `LeaseLostError` if it was taken over."""
        if not self._set_expiry(lease, expires_at):
            self._appender.let_go(lease)
            raise lost(lease)
        return dataclasses.replace(lease, expires_at=expires_at)

    def release_lease(self, lease: SagaLease) -> None:
        """Free the saga, unless the lease was taken over.

        A worker that takes a released lease journals no TAKEN_OVER (see `_append.unchecked`), so
        the lease is released only once none of its appends through this journal is under
        way, or ended with its fate unknown. Else it is left to expire: the next worker
        then takes it over, and its TAKEN_OVER fences them.
        """
        if self._appender.let_go(lease):
            self._set_expiry(lease, RELEASED)

    def _set_expiry(self, lease: SagaLease, expires_at: datetime.datetime) -> bool:
        leases = self._leases
        return self._db.run(
            lambda: leases.updating(lease),
            lambda conn: run_steps(conn.cursor(), leases.set_expiry(lease, expires_at)),
        )

    # -- reading -------------------------------------------------------------------------------

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order."""
        require_lookup(saga_id, "saga id")
        rows = self._db.run(
            lambda: f"saga {saga_id!r}: cannot read the journal in {self._db.settings.where}",
            lambda conn: conn.execute(self._sql_entries, (saga_id,)).fetchall(),
        )
        return self._appender.read(saga_id, rows)

    async def aentries(self, saga_id: str) -> list[JournalEntry]:
        """`entries` for async code, on the loop's async connections."""
        require_lookup(saga_id, "saga id")

        def steps() -> Steps[list[tuple[Any, ...]]]:
            _, rows = yield Statement(self._sql_entries, (saga_id,), ALL)
            return rows  # type: ignore[no-any-return]

        def what() -> str:
            return f"saga {saga_id!r}: cannot read the journal in {self._db.settings.where}"

        return self._appender.read(saga_id, await self._loop_writer(what).run(what, steps))

    def list_sagas(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Return saga ids in ascending order (by code point), after `after`."""
        require_lookup(after, "listing position (after)")
        rows = self._db.run(
            lambda: f"cannot list the sagas in {self._db.settings.where}",
            lambda conn: conn.execute(
                self._sql_sagas_from if after is None else self._sql_sagas_after,
                ("" if after is None else after, limit),
            ).fetchall(),
        )
        return [str(row[0]) for row in rows]

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return entries ordered by (saga_id, seq), after `after`: one index range scan."""
        saga_id, seq = after if after is not None else ("", 0)
        require_lookup(saga_id, "listing position (after)")
        rows = self._db.run(
            lambda: f"cannot read the journal in {self._db.settings.where} after {after!r}",
            lambda conn: conn.execute(self._sql_page, (saga_id, seq, limit)).fetchall(),
        )
        return entries_from_rows(rows)

    def missing_triggers(self) -> list[str]:
        """The append-only triggers the journal table lacks or has disabled.

        Evidence that someone made it writable; read only, never re-created here.
        """
        expected = ("sagacity_journal_no_update_delete", "sagacity_journal_no_truncate")
        rows = self._db.run(
            lambda: f"cannot read the triggers in {self._db.settings.where}",
            lambda conn: conn.execute(
                b"SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass "
                b"AND tgenabled <> 'D' AND NOT tgisinternal",
                (self._db.tables.journal,),
                prepare=False,
            ).fetchall(),
        )
        present = {str(row[0]) for row in rows}
        return [name for name in expected if name not in present]

    def close(self) -> None:
        """Release this journal's hold on the connection pool; closing twice is harmless."""
        if not self._appender.closed:
            self._group.close()  # what is queued is committed first
            with self._appender.guard:
                self._appender.closed = True
            self._async_idle.close()
            self._db.release()


def _sql_sagas(table: str, operator: str) -> str:
    """Saga ids after (or from) a bound: a loose index scan, one probe per saga."""
    return f"""
        WITH RECURSIVE ids AS (
            (SELECT saga_id FROM {table} WHERE saga_id {operator} %s ORDER BY saga_id LIMIT 1)
            UNION ALL
            SELECT (SELECT j.saga_id FROM {table} j WHERE j.saga_id > ids.saga_id
                    ORDER BY j.saga_id LIMIT 1)
            FROM ids WHERE ids.saga_id IS NOT NULL
        )
        SELECT saga_id FROM ids WHERE saga_id IS NOT NULL LIMIT %s::bigint
    """
