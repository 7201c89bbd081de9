"""The SQLite journal: the embedded default, for one machine and many processes."""

from __future__ import annotations

import datetime
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from sagacity._ids import require_id
from sagacity._sqlite import connect
from sagacity.errors import AppendConflictError, JournalError, LeaseLostError, SerializationError
from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import GENESIS_HASH, JournalEntry, Phase, seal
from sagacity.journal._group import AppendRequest, GroupCommit, GroupStats
from sagacity.journal._lease import SagaLease, lost
from sagacity.journal._rows import row_of
from sagacity.journal._sqlite_heads import Heads
from sagacity.journal._sqlite_leases import SqliteLeaseTable
from sagacity.journal._sqlite_reads import SqliteReader
from sagacity.journal._sqlite_sql import HEAD, INSERT, INSERT_FENCED, TOKEN

__all__ = ["SqliteJournal"]


class SqliteJournal:
    """A journal in a SQLite file, shared safely by threads and processes.

    An append must place its entry right after the saga's head, whichever process
    wrote that head. The journal remembers the head it wrote last for each saga and
    appends after it with one `INSERT`, committed on its own: if another writer has
    appended since, the next seq is taken and the primary key refuses the row. The
    append then runs as a `BEGIN IMMEDIATE` transaction, as it does for a saga new to
    this journal: it takes the write lock before reading the head, so the seq and
    `prev_hash` it computes cannot be stale.

    A conditional append (`expected_seq=n`) takes the one-`INSERT` path only when the
    head it remembers is seq n, the one its entry must be chained to; the primary key
    then refuses the row if any writer took seq n + 1. Otherwise, or once refused, it
    reads the head under the write lock and writes nothing unless that head is n.

    A journal goes on from the head it knows: if rows it wrote were deleted behind its
    back, its next entry leaves the gap that shows it, rather than closing it.

    Appends that overlap (threads, or async sagas through `aappend`) are group
    committed: those that arrive while a commit is in flight are written together in
    one `BEGIN IMMEDIATE` transaction, one fsync for all (see `GroupCommit`). Async
    callers are served by a writer thread the event loop awaits.
    """

    def __init__(
        self, path: str | Path, *, busy_timeout_ms: int = 30_000, create: bool = True
    ) -> None:
        self.path = str(path)
        # create=False: open an existing sagacity file only, creating and changing nothing.
        self._conn = connect(path, busy_timeout_ms=busy_timeout_ms, create=create)
        self._cursor = self._conn.cursor()
        self._lock = threading.Lock()
        self._heads = Heads()
        """The head this journal last appended or read, per saga; the primary key checks it."""
        self._group = GroupCommit(
            self._append_one, self._append_many, name=f"sagacity-sqlite {self.path}"
        )
        self._reader = SqliteReader(self._conn, self._lock, self.path)
        self._leases = SqliteLeaseTable(self._conn, self._lock, self.path, self._heads)

    @property
    def group_stats(self) -> GroupStats:
        """How appends were committed: alone or in batches (see `GroupCommit`)."""
        return self._group.stats

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
            JournalError: The database refused the write.
        """
        if saga_id not in self._heads:  # a head it remembers is of an id it checked
            require_id(saga_id, "saga id")
        return self._group.append(
            AppendRequest(saga_id, phase, tool_name, call_id, ref_seq, payload, expected_seq, fence)
        )

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
        """`append` for async code: the loop awaits the journal's writer thread.

        Same guarantees and errors as `append`; see `GroupCommit.aappend` for cancellation.
        """
        if saga_id not in self._heads:  # a head it remembers is of an id it checked
            require_id(saga_id, "saga id")
        return await self._group.aappend(
            AppendRequest(saga_id, phase, tool_name, call_id, ref_seq, payload, expected_seq, fence)
        )

    def _append_one(self, request: AppendRequest) -> JournalEntry:
        """Append one entry in its own commit: the path of an append that comes alone."""
        saga_id, phase, tool_name, call_id, ref_seq, payload, expected_seq, fence = request
        with self._lock:
            try:
                head = self._heads.get(saga_id)
                # After the head this journal wrote last, with one statement; a conditional
                # append only when that head is the one it requires, since the entry is
                # chained to the hash of seq `expected_seq`.
                if head is not None and expected_seq in (None, head[0]):
                    cursor = self._cursor
                    entry, payload_bytes = seal(
                        saga_id,
                        head[0] + 1,
                        phase,
                        tool_name=tool_name,
                        call_id=call_id,
                        ref_seq=ref_seq,
                        payload=payload,
                        prev_hash=head[1],
                    )
                    row = row_of(entry, payload_bytes)
                    try:
                        # Under a head its token fences, the lease is not looked at: a
                        # takeover since journaled TAKEN_OVER at this seq (see `Heads`).
                        if fence is None or head[2] == fence.token:
                            cursor.execute(INSERT, row)
                        else:
                            cursor.execute(INSERT_FENCED, (*row, saga_id, fence.token))
                            if cursor.rowcount == 0:
                                raise lost(fence)
                    except sqlite3.IntegrityError:
                        pass  # another writer took the next seq
                    else:
                        self._heads.wrote(saga_id, entry.seq, entry.hash, phase, fence)
                        return entry
                # The head is unknown, or not the one the journal remembers: rows it did
                # not write may follow it, so its lease's appends are checked from now on.
                self._heads.moved(saga_id)
                entry = self._append_locked(
                    saga_id, phase, tool_name, call_id, ref_seq, payload, expected_seq, fence
                )
            except sqlite3.Error as error:
                self._heads.moved(saga_id)
                raise JournalError(
                    f"saga {saga_id!r}: cannot append {phase.value} to {self.path!r}: {error}"
                ) from error
            self._heads.wrote(saga_id, entry.seq, entry.hash, phase, fence)
            return entry

    def _append_locked(
        self,
        saga_id: str,
        phase: Phase,
        tool_name: str | None,
        call_id: str | None,
        ref_seq: int | None,
        payload: JsonValue,
        expected_seq: int | None,
        fence: SagaLease | None,
    ) -> JournalEntry:
        """Read the head and append after it in one `BEGIN IMMEDIATE` transaction.

        Raises:
            AppendConflictError: The head is not `expected_seq`; nothing was written.
            LeaseLostError: `fence` no longer holds the saga; nothing was written.
        """
        cursor = self._cursor
        cursor.execute("BEGIN IMMEDIATE")
        try:
            if fence is not None:
                self._check_fence(saga_id, fence)  # refused: rolled back below
            found = cursor.execute(HEAD, (saga_id,)).fetchone()
            last, prev_hash = (found[0], found[1]) if found else (0, GENESIS_HASH)
            if expected_seq is not None and last != expected_seq:
                cursor.execute("ROLLBACK")
                # The head read under the write lock is real: later appends go on from it.
                self._heads.read(saga_id, last, prev_hash)
                raise AppendConflictError(saga_id, expected_seq, last)
            entry, payload_bytes = seal(
                saga_id,
                last + 1,
                phase,
                tool_name=tool_name,
                call_id=call_id,
                ref_seq=ref_seq,
                payload=payload,
                prev_hash=prev_hash,
            )
            cursor.execute(INSERT, row_of(entry, payload_bytes))
            cursor.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        return entry

    def _check_fence(self, saga_id: str, fence: SagaLease) -> None:
        """Under the write lock: `LeaseLostError` unless `fence` still holds the saga."""
        held = self._cursor.execute(TOKEN, (saga_id,)).fetchone()
        if held is None or held[0] != fence.token:
            raise lost(fence)

    def _append_many(self, requests: Sequence[AppendRequest]) -> list[JournalEntry | BaseException]:
        """Append several entries in one `BEGIN IMMEDIATE` transaction: one commit for all.

        The write lock is held from the first head read to the commit, so each head read
        is the saga's real one. A conditional append that does not match, a fenced one
        whose lease is gone, or a payload that cannot be hashed is refused alone; the
        others are written.

        Raises:
            JournalError: The transaction failed: none of the entries was written.
        """
        results: list[JournalEntry | BaseException] = []
        heads: dict[str, tuple[int, str]] = {}
        cursor = self._cursor
        with self._lock:
            try:
                cursor.execute("BEGIN IMMEDIATE")
                for request in requests:
                    try:
                        results.append(self._append_in_batch(request, heads))
                    except (AppendConflictError, LeaseLostError, SerializationError) as refusal:
                        results.append(refusal)
                cursor.execute("COMMIT")
            except BaseException as error:
                if self._conn.in_transaction:
                    cursor.execute("ROLLBACK")
                for request in requests:
                    self._heads.moved(request.saga_id)
                if not isinstance(error, sqlite3.Error):
                    raise
                sagas = sorted({r.saga_id for r in requests})
                raise JournalError(
                    f"sagas {', '.join(map(repr, sagas))}: cannot append {len(requests)} "
                    f"entries committed together to {self.path!r}: {error}; none was written"
                ) from error
            for saga_id, (seq, hash) in heads.items():
                # Each head was read under the write lock: it fences nothing, and rows other
                # writers appended may precede it, so the saga's appends stay checked.
                self._heads.moved(saga_id)
                self._heads.read(saga_id, seq, hash)
        return results

    def _append_in_batch(
        self, request: AppendRequest, heads: dict[str, tuple[int, str]]
    ) -> JournalEntry:
        """One append of a batch, under the write lock; `heads` holds the batch's own."""
        cursor = self._cursor
        saga_id, fence = request.saga_id, request.fence
        if fence is not None:
            self._check_fence(saga_id, fence)
        head = heads.get(saga_id)
        if head is None:
            found = cursor.execute(HEAD, (saga_id,)).fetchone()
            head = heads[saga_id] = (found[0], found[1]) if found else (0, GENESIS_HASH)
        if request.expected_seq is not None and head[0] != request.expected_seq:
            raise AppendConflictError(saga_id, request.expected_seq, head[0])
        entry, payload_bytes = seal(
            saga_id,
            head[0] + 1,
            request.phase,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.ref_seq,
            payload=request.payload,
            prev_hash=head[1],
        )
        cursor.execute(INSERT, row_of(entry, payload_bytes))
        heads[saga_id] = (entry.seq, entry.hash)
        return entry

    def acquire_lease(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """Take the saga's lease if it is free at `now` (see `SideEffectJournal`).

        A lease taken over is journaled as TAKEN_OVER in the same transaction.
        """
        require_id(saga_id, "saga id")
        return self._leases.acquire(saga_id, owner, now=now, expires_at=expires_at)

    def renew_lease(self, lease: SagaLease, *, expires_at: datetime.datetime) -> SagaLease:
        """Move the lease's expiry; `LeaseLostError` if it was taken over."""
        return self._leases.renew(lease, expires_at=expires_at)

    def release_lease(self, lease: SagaLease) -> None:
        """Free the saga, unless the lease was taken over.

        Its appends on their way after this are checked: the next worker takes the lease
        with no TAKEN_OVER to refuse them.
        """
        with self._lock:
            self._heads.let_go(lease)
        self._leases.release(lease)

    def read_leases(self, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
        """The lease rows of `saga_ids` (those that have one), read without taking anything.

        For the operators' views of who works on a saga: taking a lease to look at it
        would take over a dead holder's saga. A database made before leases has none.
        """
        return self._reader.leases(saga_ids)

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order."""
        return self._reader.entries(saga_id)

    def list_sagas(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Return saga ids in ascending order, after `after`."""
        return self._reader.list_sagas(after=after, limit=limit)

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return entries ordered by (saga_id, seq), after `after`."""
        return self._reader.list_entries(after=after, limit=limit)

    def missing_triggers(self) -> list[str]:
        """The append-only triggers the journal table lacks: someone made it writable.

        Read only: they are never re-created here, which would erase the evidence.
        """
        return self._reader.missing_triggers()

    def close(self) -> None:
        """Commit the appends queued, then close the connection (even if that commit fails)."""
        try:
            self._group.close()
        finally:
            with self._lock:
                self._conn.close()
