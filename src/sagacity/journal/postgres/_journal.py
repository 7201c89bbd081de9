"""The PostgreSQL journal: a total order per saga, under any number of workers.

How an append finds its seq (docs/postgres.md has the reasoning and the measurements):

- **Fast path.** Each journal keeps the head (seq, hash) of the sagas it has read or
  written. An append seals the next entry on that head and writes it with one prepared
  `INSERT`, committed as it runs: the physical floor of one durable write. The primary
  key is the backstop: if another writer took that seq, nothing is written and the
  append takes the locked path.
- **Locked path.** One call of the schema's `sagacity_append_locked` function: it takes
  a transaction-scoped advisory lock on the saga, reads its head (after the lock is
  granted, so never stale), hashes the entry from the pieces the journal sends, inserts
  and commits, in one round trip. Used for a saga this journal has not seen, and for a
  while after a conflict: writers that share a saga queue on its lock, in the server,
  instead of colliding on the key. The journal checks the server's hash with `seal`.

A conditional append (`expected_seq=n`) takes neither path as is: its entry can only be
seq n + 1, chained to the hash of seq n, so it is one `INSERT` at n + 1, which the
primary key refuses if any writer got there first (rows are never deleted and seqs have
no gaps, so a free n + 1 after an existing n means n is the last). The hash of seq n is
the cached head's when that head is n; otherwise the saga's head is read first, and a
head other than n is a conflict before anything is sent. Nothing is locked and nothing
is redone: a refused `INSERT` raises `AppendConflictError`.

Fencing (docs/postgres.md, Leases): a fenced append takes the fast path unchecked when
the journal knows its lease's token held the saga at the head it follows; a takeover
since would have journaled TAKEN_OVER at that very seq, so the primary key refuses the
row, and the locked path checks the token. Otherwise the `INSERT` checks the token.

A lost connection is retried with the entry unchanged: on the fast path (and for a
conditional append), a row at the entry's seq with the entry's hash is the entry,
written by the try whose reply was lost; on the locked path, the function looks for an
identical row before it writes. An append is never dropped: it succeeds once, or raises
`JournalError`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool

from sagacity._ids import require_id, require_lookup
from sagacity.errors import AppendConflictError, JournalError, LeaseLostError, SerializationError
from sagacity.journal._canonical import JsonValue, canonical_bytes
from sagacity.journal._entry import (
    GENESIS_HASH,
    JournalEntry,
    Phase,
    hashed_bytes,
    refused_entry,
    seal,
    utc_timestamp,
)
from sagacity.journal._group import (
    AppendRequest,
    AppendWithdrawn,
    CommittedThenCancelled,
    GroupCommit,
    GroupStats,
)
from sagacity.journal._lease import RELEASED, SagaLease, lost
from sagacity.journal._rows import entries_from_rows, row_of
from sagacity.journal.postgres._async import FRESH_COMMITS, IdleConnections, LoopWriter
from sagacity.journal.postgres._batch import append_batch, bulk_insert_sql
from sagacity.journal.postgres._database import PostgresDatabase, is_transient
from sagacity.journal.postgres._leases import LeaseStatements, LeaseTake, Taken
from sagacity.journal.postgres._schema import LEASE_LOST, LOCK_CLASS, advisory_key
from sagacity.journal.postgres._steps import (
    ALL,
    NOTHING,
    ONE,
    PreparedSql,
    Statement,
    Steps,
    run_steps,
)

__all__ = ["AppendStats", "PostgresJournal"]

_COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"

_KNOWN_FATES = (
    AppendConflictError,
    LeaseLostError,
    SerializationError,
    AppendWithdrawn,
    CommittedThenCancelled,
)
"""What an append can raise with its fate known: refused (nothing written), or written."""

_CONTENDED_STREAK = 16
"""After a conflict, how many locked appends in a row must find no other writer's entry
since the head they started from before the saga goes back to the fast path."""

_PREV_MARK = "~" * 64
_SEQ_MARK = 2**53 - 1
_SEQ_MARK_JSON = str(_SEQ_MARK).encode()
_PREV_FIELD = b'"prev_hash":"' + _PREV_MARK.encode() + b'"'
_SEQ_FIELD = b'"seq":' + _SEQ_MARK_JSON

_HEAD_CACHE_SIZE = 10_000
"""Sagas whose head a journal remembers; the least recently used is forgotten first."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AppendStats:
    """How a journal's appends went, counted since it was opened."""

    appends: int
    """Appends committed."""
    fast: int
    """Of those, committed by the one-INSERT fast path."""
    locked: int
    """Of those, committed under the saga's advisory lock."""
    conflicts: int
    """INSERTs that found their seq already taken by another worker and were redone."""
    reconnects: int
    """Attempts redone on a new connection after the server or the network dropped one."""

    @property
    def retries(self) -> int:
        """Attempts redone for any reason: conflicts plus reconnects."""
        return self.conflicts + self.reconnects


class _Head:
    """The last entry of a saga this journal knows of, and how contended the saga is."""

    __slots__ = ("fenced_by", "hash", "quiet_needed", "seq")

    def __init__(self, seq: int, hash: str, quiet_needed: int = 0) -> None:
        self.seq = seq
        self.hash = hash
        self.quiet_needed = quiet_needed
        """Locked appends still needed, finding no other writer, before the fast path."""
        self.fenced_by: int | None = None
        """The lease token that held the saga at this head, as this journal knows it: an
        append fenced by it takes the fast path unchecked (see `_attempt`)."""


class _Append:
    """One append in progress: what to write, and what became of the last try."""

    __slots__ = (
        "_pieces",
        "call_id",
        "expected_seq",
        "fence",
        "in_doubt",
        "locked_sent",
        "payload",
        "phase",
        "recorded_at",
        "ref_seq",
        "saga_id",
        "sent",
        "tool_name",
    )

    def __init__(
        self,
        saga_id: str,
        phase: Phase,
        tool_name: str | None,
        call_id: str | None,
        ref_seq: int | None,
        payload: JsonValue,
        expected_seq: int | None,
        fence: SagaLease | None,
    ) -> None:
        self.saga_id = saga_id
        self.fence = fence
        """The lease whose token must still hold the saga when the entry is written."""
        self.phase = phase
        self.tool_name = tool_name
        self.call_id = call_id
        self.ref_seq = ref_seq
        self.payload = payload
        self.expected_seq = expected_seq
        """The last seq a conditional append requires; None for an unconditional one."""
        self.sent: tuple[JournalEntry, bytes] | None = None
        """The entry last sent, until the server answers for it. After a lost connection
        it is sent again unchanged: a row at its seq with its hash is that entry."""
        self.in_doubt = False
        """A connection was lost while `sent` was on its way."""
        self.locked_sent = False
        """The locked path's statement was sent and its reply not received: the next
        try looks for the entry before it writes."""
        self.recorded_at = ""
        self._pieces: tuple[str, bytes, bytes, bytes] | None = None

    def pieces(self) -> tuple[str, bytes, bytes, bytes]:
        """The pieces the locked path sends, made once per append.

        The payload's canonical text, and the entry's canonical JSON cut around the
        values of `prev_hash` and `seq`, which the server fills in.
        """
        if self._pieces is None:
            try:
                payload_bytes = canonical_bytes(self.payload)
                recorded_at = utc_timestamp()
                whole = hashed_bytes(
                    self.saga_id,
                    _SEQ_MARK,
                    self.phase,
                    self.tool_name,
                    self.call_id,
                    self.ref_seq,
                    payload_bytes,
                    recorded_at,
                    _PREV_MARK,
                )
            except SerializationError as error:
                raise refused_entry(
                    error, self.saga_id, self.phase, self.tool_name, self.call_id
                ) from error
            self.recorded_at = recorded_at
            # The payload comes before both fields and only strings after them, so the
            # last occurrence of each is the field itself.
            cut = whole.rindex(_PREV_FIELD) + len(_PREV_FIELD) - len(_PREV_MARK) - 1
            before_prev, rest = whole[:cut], whole[cut + len(_PREV_MARK) :]
            cut = rest.rindex(_SEQ_FIELD) + len(_SEQ_FIELD) - len(_SEQ_MARK_JSON)
            before_seq, after_seq = rest[:cut], rest[cut + len(_SEQ_MARK_JSON) :]
            self._pieces = (payload_bytes.decode(), before_prev, before_seq, after_seq)
        return self._pieces

    def token(self) -> int | None:
        """The fencing token of the append's lease, if it is fenced."""
        return None if self.fence is None else self.fence.token

    def locked_args(
        self, lock_key: int, find_own: bool, fence_token: int | None
    ) -> tuple[object, ...]:
        """The arguments of `sagacity_append_locked` for this append."""
        payload_text, before_prev, before_seq, after_seq = self.pieces()
        return (
            lock_key,
            self.saga_id,
            self.phase.value,
            self.tool_name,
            self.call_id,
            self.ref_seq,
            payload_text,
            self.recorded_at,
            before_prev,
            before_seq,
            after_seq,
            find_own,
            fence_token,
        )

    def seal_locked(
        self, row: tuple[Any, ...] | None, where: str
    ) -> tuple[JournalEntry, bytes, int]:
        """Seal the entry `sagacity_append_locked` answered `row` for, checking its hash.

        Returns the entry, its payload's bytes, and how many seqs the server found taken.
        """
        if row is None:  # the function returns one row or raises: the schema was altered
            raise JournalError(
                f"saga {self.saga_id!r}: sagacity_append_locked returned no row in {where}; "
                "its schema was changed outside sagacity"
            )
        seq, prev_hash, digest, lost = row
        entry, payload_bytes = seal(
            self.saga_id,
            seq,
            self.phase,
            tool_name=self.tool_name,
            call_id=self.call_id,
            ref_seq=self.ref_seq,
            payload=self.payload,
            prev_hash=prev_hash,
            recorded_at=self.recorded_at,
        )
        if entry.hash != digest:
            raise JournalError(
                f"saga {self.saga_id!r}: the database hashed seq {seq} to {digest[:12]}…, but "
                f"the entry hashes to {entry.hash[:12]}…; verify the saga "
                "(sagacity.audit.verify) and report this as a bug"
            )
        return entry, payload_bytes, int(lost)

    def seal_after(self, seq: int, prev_hash: str) -> tuple[JournalEntry, bytes]:
        """Seal the entry that follows (`seq`, `prev_hash`)."""
        return seal(
            self.saga_id,
            seq + 1,
            self.phase,
            tool_name=self.tool_name,
            call_id=self.call_id,
            ref_seq=self.ref_seq,
            payload=self.payload,
            prev_hash=prev_hash,
        )


def _unchecked(append: _Append, head: _Head) -> bool:
    """Whether `append` may be written after `head` with no look at the lease.

    So when it is not fenced, or when its token held the saga at that head: a worker that
    took the lease over since journaled TAKEN_OVER at the next seq, which the append's
    `INSERT` then meets as a taken seq (and the locked path refuses it). A token let go
    here (released, or its saga ended) fences no head again (`release_lease`, `_done`):
    a worker takes such a lease with no TAKEN_OVER.
    """
    fence = append.fence
    return fence is None or (fence.saga_id == append.saga_id and head.fenced_by == fence.token)


def new_append(request: AppendRequest) -> _Append:
    """The append in progress for a request."""
    return _Append(
        request.saga_id,
        request.phase,
        request.tool_name,
        request.call_id,
        request.ref_seq,
        request.payload,
        request.expected_seq,
        request.fence,
    )


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
        self._closed = False
        table = self._db.tables.journal
        self._lock_prefix = f"{self._db.tables.qualifier}\x00"
        self._sql_insert = (
            f"INSERT INTO {table} ({_COLUMNS}) VALUES "
            "(%s, %s::bigint, %s, %s, %s, %s::bigint, %s, %s, %s, %s)"
        ).encode()
        leases = self._db.tables.lease
        # Written only while the token is the saga's; FOR SHARE keeps a takeover waiting
        # until the entry commits, so that the new holder reads it.
        self._sql_insert_fenced = (
            f"INSERT INTO {table} ({_COLUMNS}) SELECT "
            "%s, %s::bigint, %s, %s, %s, %s::bigint, %s, %s, %s, %s "
            f"WHERE EXISTS (SELECT 1 FROM {leases} WHERE saga_id = %s AND token = %s::bigint "
            "FOR SHARE)"
        ).encode()
        self._prepared_insert = PreparedSql.of(self._sql_insert)
        self._prepared_insert_fenced = PreparedSql.of(self._sql_insert_fenced)
        self._sql_insert_bulk = bulk_insert_sql(table, _COLUMNS)  # see _batch.py
        self._leases = LeaseStatements(self._db)
        function = self._db.tables.prefix + "sagacity_append_locked"
        self._sql_append_locked = (
            f"SELECT seq, prev_hash, hash, lost FROM {function}"
            "(%s::integer, %s, %s, %s, %s, %s::bigint, %s, %s, %s, %s, %s, %s, %s::bigint)"
        ).encode()
        self._sql_hash_at = f"SELECT hash FROM {table} WHERE saga_id = %s AND seq = %s::bigint"
        self._sql_head = (
            f"SELECT seq, hash FROM {table} WHERE saga_id = %s ORDER BY seq DESC LIMIT 1"
        ).encode()
        self._sql_entries = f"SELECT {_COLUMNS} FROM {table} WHERE saga_id = %s ORDER BY seq"
        self._sql_page = (
            f"SELECT {_COLUMNS} FROM {table} WHERE (saga_id, seq) > (%s, %s::bigint) "
            "ORDER BY saga_id, seq LIMIT %s::bigint"
        )
        self._sql_sagas_after = _sql_sagas(table, ">")
        self._sql_sagas_from = _sql_sagas(table, ">=")  # the first page: '' is a saga id too
        # One guard for the small shared state below; never held across a statement.
        self._guard = threading.Lock()
        self._heads: collections.OrderedDict[str, _Head] = collections.OrderedDict()
        self._under_way: dict[tuple[str, int], int] = {}
        """Per saga and token, fenced appends under way, or ended with their fate unknown:
        while any is, that lease is not released (see `release_lease`)."""
        self._retired: collections.OrderedDict[str, int] = collections.OrderedDict()
        """Per saga, the newest token this journal let go: no head is fenced by it again."""
        self._fast = self._locked = self._conflicts = self._reconnects = 0
        # As many commits in flight as the pool allows, one connection left for reads and
        # leases: the server merges their WAL flushes; appends that find them all busy
        # queue and go together in the next batch.
        self._group = GroupCommit(
            self._append_request,
            lambda requests: append_batch(self, requests),
            name=f"sagacity-postgres {self._db.settings.where}",
            leaders=max(1, self._db.settings.pool_max_size - 1),
            fresh=FRESH_COMMITS,
        )
        self._loop_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWriter] = (
            weakref.WeakKeyDictionary()
        )
        """Async appends, per event loop (see `_async.py`)."""
        self._async_idle = IdleConnections()
        """The async connections no loop is using now."""

    @property
    def group_stats(self) -> GroupStats:
        """How appends were committed: alone or in batches (see `GroupCommit`)."""
        return self._group.stats

    @property
    def database(self) -> PostgresDatabase:
        """The database and pool this journal uses."""
        return self._db

    @property
    def stats(self) -> AppendStats:
        """How appends went so far: the fast path, the locked path, conflicts, reconnects."""
        with self._guard:
            return AppendStats(
                appends=self._fast + self._locked,
                fast=self._fast,
                locked=self._locked,
                conflicts=self._conflicts,
                reconnects=self._reconnects,
            )

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
        key = self._begun(fence)
        try:
            entry = self._group.append(request)
        except _KNOWN_FATES:
            self._ended(key)
            raise
        self._ended(key)
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
        key = self._begun(fence)
        try:
            entry = await writer.append(request)
        except _KNOWN_FATES:
            self._ended(key)
            raise
        self._ended(key)
        return entry

    def _loop_writer(self, what: Callable[[], str]) -> LoopWriter:
        """The running loop's writer, made on its first use; `what` names a refusal."""
        loop = asyncio.get_running_loop()
        writer = self._loop_writers.get(loop)
        if writer is None:
            with self._guard:
                if self._closed:
                    raise JournalError(f"{what()}: the journal is closed; open a new one")
                writer = self._loop_writers.get(loop)
                if writer is None:
                    writer = self._loop_writers[loop] = LoopWriter(self)
        return writer

    def _append_request(self, request: AppendRequest) -> JournalEntry:
        """Append one entry on its own: the fast path, else the locked path."""
        return self._append(self._new_append(request))

    def _new_append(self, request: AppendRequest) -> _Append:
        """The append in progress for `request`; `JournalError` once the journal is closed."""
        if self._closed:
            raise JournalError(
                f"saga {request.saga_id!r}: cannot append {request.phase.value}: the journal "
                "is closed; open a new one"
            )
        return new_append(request)

    def _append(self, append: _Append) -> JournalEntry:
        """Commit an append on a pooled connection, redoing it after a lost connection."""
        db = self._db
        deadline = time.monotonic() + db.settings.timeout
        attempts = 0
        while True:
            attempts += 1
            try:
                lease = db.checkout(deadline)
                try:
                    return run_steps(lease.cursor, self._attempt(append), lease.prepared)
                finally:
                    db.checkin(lease)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
                pause = self._failed_try(append, error, deadline, attempts)
            time.sleep(pause)

    def _failed_try(
        self,
        append: _Append,
        error: psycopg.Error | psycopg_pool.PoolTimeout,
        deadline: float,
        attempts: int,
    ) -> float:
        """After a try failed: how long to pause before the next, or raise to give up."""
        if isinstance(error, psycopg.Error) and error.sqlstate == LEASE_LOST:
            assert append.fence is not None  # only a fenced append is refused so
            raise lost(append.fence) from None  # on the locked path: nothing written
        if append.sent is not None:
            append.in_doubt = append.in_doubt or is_transient(error)
            if not append.in_doubt:
                append.sent = None  # the server refused it: nothing was written
        if append.locked_sent and not is_transient(error):
            append.locked_sent = False  # refused, so not written
        pause = self._db.retry_pause(error, deadline, attempts)
        if pause is None:
            raise JournalError(self._failure(append, error)) from error
        with self._guard:
            self._reconnects += 1
            self._heads.pop(append.saga_id, None)
        return pause

    def _attempt(self, append: _Append) -> Steps[JournalEntry]:
        """One try on one connection: the in-doubt entry, the fast path, the locked path."""
        saga_id = append.saga_id
        if append.sent is not None and append.in_doubt:
            entry = append.sent[0]
            written = yield from self._insert(append, checked=True, refused_if_gone=False)
            if written or (yield from self._hash_at(entry)) == entry.hash:
                return self._done(entry, fast=True, append=append)
            if written is None:
                assert append.fence is not None
                raise lost(append.fence)  # the lost try did not write it, and now cannot
            append.sent, append.in_doubt = None, False  # another entry holds the seq
            if append.expected_seq is not None:
                raise (yield from self._refused(saga_id, append.expected_seq))
            self._conflict(append)
        if append.expected_seq is not None:
            return (yield from self._append_expected(append, append.expected_seq))
        fast = checked = False
        with self._guard:  # seq and hash read together: another thread may move the head
            head = self._heads.get(saga_id)
            if head is not None:
                self._heads.move_to_end(saga_id)
                seen = (head.seq, head.hash)
                # After a locked try whose reply was lost, only the locked path may tell
                # whether that try wrote the entry.
                fast = head.quiet_needed == 0 and not append.locked_sent
                checked = fast and not _unchecked(append, head)
        if fast:
            append.sent = append.seal_after(*seen)
            if (yield from self._insert(append, checked=checked)):
                return self._done(append.sent[0], fast=True, append=append, checked=checked)
            append.sent = None
            self._conflict(append)
        return (yield from self._append_locked(append, None if head is None else (head, seen)))

    def _append_expected(self, append: _Append, expected: int) -> Steps[JournalEntry]:
        """Append at seq `expected` + 1 with one `INSERT`, or raise `AppendConflictError`.

        The entry is chained to the hash of seq `expected`: the cached head's if it is
        that seq (a head is always a row that exists, and rows never change), else the
        head read now. The primary key refuses the row if any writer took the seq.
        """
        saga_id = append.saga_id
        prev_hash = None
        checked = True
        with self._guard:  # seq and hash read together: another thread may move the head
            head = self._heads.get(saga_id)
            if head is not None:
                self._heads.move_to_end(saga_id)
                if head.seq == expected:
                    prev_hash, checked = head.hash, not _unchecked(append, head)
        if prev_hash is None:
            found, prev_hash = yield from self._read_head(saga_id)
            if found != expected:
                raise AppendConflictError(saga_id, expected, found)
        append.sent = append.seal_after(expected, prev_hash)
        if (yield from self._insert(append, checked=checked)):
            return self._done(append.sent[0], fast=True, append=append, checked=checked)
        append.sent = None
        raise (yield from self._refused(saga_id, expected))

    def _refused(self, saga_id: str, expected: int) -> Steps[AppendConflictError]:
        """The error for a conditional append whose seq another writer took."""
        found, _ = yield from self._read_head(saga_id)
        return AppendConflictError(saga_id, expected, found)

    def _read_head(self, saga_id: str) -> Steps[tuple[int, str]]:
        """Read the saga's last seq and hash ((0, genesis) when it has none) and cache it."""
        _, row = yield Statement(self._sql_head, (saga_id,), ONE)
        seq, hash = (0, GENESIS_HASH) if row is None else (int(row[0]), str(row[1]))
        with self._guard:
            self._move_head(saga_id, seq, hash)
        return seq, hash

    def _append_locked(
        self, append: _Append, known: tuple[_Head, tuple[int, str]] | None
    ) -> Steps[JournalEntry]:
        """Append through `sagacity_append_locked`: lock, read the head, hash, insert.

        One statement and one round trip; the saga's advisory lock is held only while
        the server works, from the head read to the commit.
        """
        find_own, append.locked_sent = append.locked_sent, True
        _, row = yield Statement(
            self._sql_append_locked,
            append.locked_args(self._lock_key(append.saga_id), find_own, append.token()),
            ONE,
        )
        append.locked_sent = False
        entry, _, lost = append.seal_locked(row, self._db.settings.where)
        seq, prev_hash = entry.seq, entry.prev_hash
        with self._guard:
            self._conflicts += lost
            if known is not None:
                # Quiet when the entry follows the head this append started from: no
                # other writer, in this process or another, appended in between.
                head, seen = known
                if seen != (seq - 1, prev_hash) or lost:
                    head.quiet_needed = _CONTENDED_STREAK
                elif head.quiet_needed > 0:
                    head.quiet_needed -= 1
        return self._done(entry, fast=False, append=append)

    def _conflict(self, append: _Append) -> None:
        """Another writer took the seq: count it, and queue on the saga's lock a while."""
        with self._guard:
            self._conflicts += 1
            head = self._heads.get(append.saga_id)
            if head is not None:
                head.quiet_needed = _CONTENDED_STREAK

    def _lock_key(self, saga_id: str) -> int:
        return advisory_key(self._lock_prefix + saga_id)

    def advisory_lock_key(self, saga_id: str) -> tuple[int, int]:
        """The keys of the advisory lock that appends to `saga_id` on the locked path take.

        An operator holding `pg_advisory_xact_lock(k1, k2)` pauses those appends; the
        fast path does not take it (docs/postgres.md).
        """
        return LOCK_CLASS, self._lock_key(saga_id)

    def _insert(
        self, append: _Append, *, checked: bool, refused_if_gone: bool = True
    ) -> Steps[bool | None]:
        """Insert the entry last sealed, committing it; False when its seq was taken.

        A plain INSERT, not `ON CONFLICT DO NOTHING`: speculative insertion costs the
        server an extra index probe and WAL record on every append, to spare an error
        only in the rare case of a conflict. A fenced append `checked` is written only
        while its lease holds: else nothing is, and `LeaseLostError` is raised (None is
        returned when `refused_if_gone` is false).
        """
        assert append.sent is not None
        row = row_of(*append.sent)
        fence = append.fence
        try:
            if fence is None or not checked:
                yield Statement(self._sql_insert, row, NOTHING, self._prepared_insert)
                return True
            count, _ = yield Statement(
                self._sql_insert_fenced,
                (*row, append.saga_id, fence.token),
                NOTHING,
                self._prepared_insert_fenced,
            )
        except psycopg.errors.UniqueViolation:
            return False
        if count == 1:
            return True
        if refused_if_gone:
            raise lost(fence)
        return None

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
        return self._took(
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
        return self._took(await writer.take_lease(take))

    def _take(
        self, saga_id: str, owner: str, now: datetime.datetime, expires_at: datetime.datetime
    ) -> LeaseTake:
        marker = _Append(saga_id, Phase.TAKEN_OVER, None, None, None, {"owner": owner}, None, None)
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

    def _took(self, taken: Taken) -> SagaLease:
        """Cache the head a lease was taken at: the lease's token held the saga there.

        Not for a saga with no entries: a takeover of it journals nothing (there is no
        seq a former holder could be about to reuse), so its first append is checked.
        """
        lease, seq, hash = taken
        with self._guard:
            head = self._heads.get(lease.saga_id)
            if (
                seq > 0
                and self._arms(lease.saga_id, lease.token)
                and (head is None or head.seq < seq or (head.seq, head.hash) == (seq, hash))
            ):
                self._move_head(lease.saga_id, seq, hash).fenced_by = lease.token
            elif head is not None:
                head.fenced_by = None  # a saga with no entries, or a head past the one read
        return lease

    def renew_lease(self, lease: SagaLease, *, expires_at: datetime.datetime) -> SagaLease:
        """Move the lease's expiry; `LeaseLostError` if it was taken over."""
        if not self._set_expiry(lease, expires_at):
            self._let_go(lease)
            raise lost(lease)
        return dataclasses.replace(lease, expires_at=expires_at)

    def release_lease(self, lease: SagaLease) -> None:
        """Free the saga, unless the lease was taken over.

        A worker that takes a released lease journals no TAKEN_OVER (see `_unchecked`), so
        the lease is released only once none of its appends through this journal is under
        way, or ended with its fate unknown. Else it is left to expire: the next worker
        then takes it over, and its TAKEN_OVER fences them.
        """
        if self._let_go(lease):
            self._set_expiry(lease, RELEASED)

    def _let_go(self, lease: SagaLease) -> bool:
        """Appends under `lease` no longer go unchecked; whether none is under way."""
        saga_id = lease.saga_id
        with self._guard:
            head = self._heads.get(saga_id)
            if head is not None and head.fenced_by == lease.token:
                head.fenced_by = None
            self._retire(saga_id, lease.token)
            return (saga_id, lease.token) not in self._under_way

    def _retire(self, saga_id: str, token: int | None) -> None:
        """Under the guard: `token` was let go here (released, or its saga ended)."""
        if token is None:
            return
        if self._retired.get(saga_id, 0) < token:
            self._retired[saga_id] = token
        self._retired.move_to_end(saga_id)
        if len(self._retired) > _HEAD_CACHE_SIZE:
            self._retired.popitem(last=False)

    def _begun(self, lease: SagaLease) -> tuple[str, int]:
        """Count an append under `lease` as under way, until its fate is known (`_ended`).

        Known: written, or refused; one that raises anything else stays counted.
        """
        key = (lease.saga_id, lease.token)
        with self._guard:
            self._under_way[key] = self._under_way.get(key, 0) + 1
        return key

    def _ended(self, key: tuple[str, int]) -> None:
        with self._guard:
            left = self._under_way[key] - 1
            if left:
                self._under_way[key] = left
            else:
                del self._under_way[key]

    def _set_expiry(self, lease: SagaLease, expires_at: datetime.datetime) -> bool:
        leases = self._leases
        return self._db.run(
            lambda: leases.updating(lease),
            lambda conn: run_steps(conn.cursor(), leases.set_expiry(lease, expires_at)),
        )

    def _hash_at(self, entry: JournalEntry) -> Steps[str | None]:
        """The hash of the row at `entry`'s seq, if there is one."""
        _, row = yield Statement(self._sql_hash_at, (entry.saga_id, entry.seq), ONE)
        return None if row is None else str(row[0])

    def _done(
        self, entry: JournalEntry, *, fast: bool, append: _Append, checked: bool = False
    ) -> JournalEntry:
        """Count the append and move the saga's head to it.

        A fast append follows the head it was sealed on, so the head keeps its token;
        one whose `INSERT` `checked` the token leaves the head fenced by it, unless this
        journal let the token go. A locked append leaves no token: the next one is
        checked. ENDED frees the lease: its token is let go.
        """
        token = append.token()
        with self._guard:
            if fast:
                self._fast += 1
            else:
                self._locked += 1
            head = self._move_head(entry.saga_id, entry.seq, entry.hash, keep_fence=fast)
            if entry.phase is Phase.ENDED:
                self._retire(entry.saga_id, token)
                if head.seq == entry.seq:
                    head.fenced_by = None
            elif checked and head.seq == entry.seq:
                armed = token is not None and self._arms(entry.saga_id, token)
                head.fenced_by = token if armed else None
        return entry

    def _arms(self, saga_id: str, token: int) -> bool:
        """Under the guard: whether `token` may fence a head (it was not let go here)."""
        return token > self._retired.get(saga_id, 0)

    def _move_head(self, saga_id: str, seq: int, hash: str, *, keep_fence: bool = False) -> _Head:
        """Record a head read or written (under the guard); a head only moves forward.

        A head moved past without `keep_fence` forgets its token: the entries in between
        may hold a TAKEN_OVER this journal has not checked.
        """
        head = self._heads.get(saga_id)
        if head is None:
            head = self._heads[saga_id] = _Head(seq, hash)
            if len(self._heads) > _HEAD_CACHE_SIZE:
                self._heads.popitem(last=False)
        elif seq > head.seq:
            head.seq, head.hash = seq, hash
            if not keep_fence:
                head.fenced_by = None
        return head

    def _failure(self, append: _Append, error: BaseException) -> str:
        what = append.phase.value
        if append.tool_name is not None:
            what += f" of tool {append.tool_name!r}"
        if append.call_id is not None:
            what += f" (call {append.call_id!r})"
        if append.sent is not None and append.in_doubt:
            entry = append.sent[0]
            fate = (
                f"the entry may or may not have been committed at seq {entry.seq} "
                f"(hash {entry.hash[:12]}…); read the saga's journal once the server is back"
            )
        elif append.locked_sent:
            fate = (
                f"the entry may or may not have been committed (recorded_at "
                f"{append.recorded_at}); read the saga's journal once the server is back"
            )
        else:
            fate = "the entry was not written"
        return (
            f"saga {append.saga_id!r}: cannot append {what} to {self._db.settings.where}: "
            f"{self._db.describe_error(error)}; {fate}"
        )

    # -- reading -------------------------------------------------------------------------------

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order."""
        require_lookup(saga_id, "saga id")
        rows = self._db.run(
            lambda: f"saga {saga_id!r}: cannot read the journal in {self._db.settings.where}",
            lambda conn: conn.execute(self._sql_entries, (saga_id,)).fetchall(),
        )
        return self._read(saga_id, rows)

    async def aentries(self, saga_id: str) -> list[JournalEntry]:
        """`entries` for async code, on the loop's async connections."""
        require_lookup(saga_id, "saga id")

        def steps() -> Steps[list[tuple[Any, ...]]]:
            _, rows = yield Statement(self._sql_entries, (saga_id,), ALL)
            return rows  # type: ignore[no-any-return]

        def what() -> str:
            return f"saga {saga_id!r}: cannot read the journal in {self._db.settings.where}"

        return self._read(saga_id, await self._loop_writer(what).run(what, steps))

    def _read(self, saga_id: str, rows: list[tuple[Any, ...]]) -> list[JournalEntry]:
        """A saga's entries from its rows, its head cached."""
        entries = entries_from_rows(rows)
        with self._guard:
            if entries:
                self._move_head(saga_id, entries[-1].seq, entries[-1].hash)
            else:
                self._move_head(saga_id, 0, GENESIS_HASH)
        return entries

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
        if not self._closed:
            self._group.close()  # what is queued is committed first
            with self._guard:
                self._closed = True
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
