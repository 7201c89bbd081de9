"""The SQLite journal: the embedded default, for one machine and many processes."""

from __future__ import annotations

import datetime
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sagacity._ids import require_id, require_lookup
from sagacity._sqlite import TRIGGERS, connect
from sagacity.errors import AppendConflictError, JournalError, LeaseLostError, SerializationError
from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import GENESIS_HASH, JournalEntry, Phase, seal
from sagacity.journal._group import AppendRequest, GroupCommit, GroupStats
from sagacity.journal._lease import RELEASED, SagaLease, busy, lease_time, lost
from sagacity.journal._rows import entries_from_rows, row_of

__all__ = ["SqliteJournal"]

_COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"
_INSERT = f"INSERT INTO sagacity_journal ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# Written only while the lease still holds, in the same statement: a holder taken over
# cannot slip an entry in behind the new holder.
_INSERT_FENCED = (
    f"INSERT INTO sagacity_journal ({_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE EXISTS (SELECT 1 FROM sagacity_lease WHERE saga_id = ? AND token = ?)"
)
_HEAD = "SELECT seq, hash FROM sagacity_journal WHERE saga_id = ? ORDER BY seq DESC LIMIT 1"
_TOKEN = "SELECT token FROM sagacity_lease WHERE saga_id = ?"
_ACQUIRE = (
    "INSERT INTO sagacity_lease (saga_id, owner, token, expires_at, since_seq) "
    "VALUES (:saga, :owner, 1, :expires, (SELECT coalesce(max(seq), 0) FROM sagacity_journal "
    "WHERE saga_id = :saga)) "
    "ON CONFLICT (saga_id) DO UPDATE SET owner = excluded.owner, token = token + 1, "
    "expires_at = excluded.expires_at, since_seq = excluded.since_seq "
    "WHERE sagacity_lease.expires_at <= :now "
    # A saga ended since the lease was taken is free: its holder has nothing left to do.
    "OR EXISTS (SELECT 1 FROM sagacity_journal j WHERE j.saga_id = :saga AND j.phase = 'ENDED' "
    "AND j.seq > sagacity_lease.since_seq) RETURNING token"
)
_HOLDER = "SELECT owner, token, expires_at FROM sagacity_lease WHERE saga_id = ?"
# A lease that expired unreleased, its saga not ended since it was taken: its holder may
# still be running, so taking it over is journaled (TAKEN_OVER).
_LIVE = (
    "SELECT 1 FROM sagacity_lease l WHERE l.saga_id = :saga AND l.expires_at > :released "
    "AND NOT EXISTS (SELECT 1 FROM sagacity_journal j WHERE j.saga_id = :saga "
    "AND j.phase = 'ENDED' AND j.seq > l.since_seq)"
)
_SET_EXPIRY = "UPDATE sagacity_lease SET expires_at = ? WHERE saga_id = ? AND token = ?"
_MAX_REMEMBERED_HEADS = 10_000


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
        self._heads: dict[str, tuple[int, str]] = {}
        """The (seq, hash) this journal last appended, per saga; the primary key checks it."""
        self._group = GroupCommit(
            self._append_one, self._append_many, name=f"sagacity-sqlite {self.path}"
        )

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
                        if fence is None:
                            self._cursor.execute(_INSERT, row)
                        else:
                            self._cursor.execute(_INSERT_FENCED, (*row, saga_id, fence.token))
                            if self._cursor.rowcount == 0:
                                raise lost(fence)
                    except sqlite3.IntegrityError:
                        pass  # another writer took the next seq
                    else:
                        # The saga is remembered already: no need for _remember's size check.
                        self._heads[saga_id] = (entry.seq, entry.hash)
                        return entry
                entry = self._append_locked(
                    saga_id, phase, tool_name, call_id, ref_seq, payload, expected_seq, fence
                )
            except sqlite3.Error as error:
                self._heads.pop(saga_id, None)
                raise JournalError(
                    f"saga {saga_id!r}: cannot append {phase.value} to {self.path!r}: {error}"
                ) from error
            self._remember(saga_id, entry.seq, entry.hash)
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
            found = cursor.execute(_HEAD, (saga_id,)).fetchone()
            last, prev_hash = (found[0], found[1]) if found else (0, GENESIS_HASH)
            if expected_seq is not None and last != expected_seq:
                cursor.execute("ROLLBACK")
                # The head read under the write lock is real: later appends go on from it.
                self._remember(saga_id, last, prev_hash)
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
            cursor.execute(_INSERT, row_of(entry, payload_bytes))
            cursor.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        return entry

    def _check_fence(self, saga_id: str, fence: SagaLease) -> None:
        """Under the write lock: `LeaseLostError` unless `fence` still holds the saga."""
        held = self._cursor.execute(_TOKEN, (saga_id,)).fetchone()
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
                    self._heads.pop(request.saga_id, None)
                if not isinstance(error, sqlite3.Error):
                    raise
                sagas = sorted({r.saga_id for r in requests})
                raise JournalError(
                    f"sagas {', '.join(map(repr, sagas))}: cannot append {len(requests)} "
                    f"entries committed together to {self.path!r}: {error}; none was written"
                ) from error
            for saga_id, (seq, hash) in heads.items():
                self._remember(saga_id, seq, hash)
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
            found = cursor.execute(_HEAD, (saga_id,)).fetchone()
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
        cursor.execute(_INSERT, row_of(entry, payload_bytes))
        heads[saga_id] = (entry.seq, entry.hash)
        return entry

    def acquire_lease(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """Take the saga's lease if it is free at `now` (see `SideEffectJournal`).

        A lease taken over is journaled as TAKEN_OVER in the same transaction.
        """
        require_id(saga_id, "saga id")
        cursor = self._cursor
        with self._lock:
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    live = cursor.execute(
                        _LIVE, {"saga": saga_id, "released": lease_time(RELEASED)}
                    ).fetchone()
                    times = {"expires": lease_time(expires_at), "now": lease_time(now)}
                    granted = cursor.execute(
                        _ACQUIRE, {"saga": saga_id, "owner": owner, **times}
                    ).fetchall()
                    held = None if granted else cursor.execute(_HOLDER, (saga_id,)).fetchone()
                    head = cursor.execute(_HEAD, (saga_id,)).fetchone()
                    head_seq = 0 if head is None else head[0]
                    if granted and live and head:
                        self._taken_over(saga_id, owner, head)
                        head_seq += 1
                    cursor.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        cursor.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise JournalError(
                    f"saga {saga_id!r}: cannot take its lease in {self.path!r}: {error}"
                ) from error
        if held is not None:
            raise busy(
                SagaLease(
                    saga_id=saga_id,
                    owner=held[0],
                    token=held[1],
                    expires_at=datetime.datetime.fromisoformat(held[2]),
                )
            )
        return SagaLease(
            saga_id=saga_id,
            owner=owner,
            token=granted[0][0],
            expires_at=expires_at,
            head_seq=head_seq,
        )

    def _taken_over(self, saga_id: str, owner: str, head: tuple[int, str]) -> None:
        """Journal TAKEN_OVER after `head`, in the transaction that takes the lease."""
        entry, payload_bytes = seal(
            saga_id,
            head[0] + 1,
            Phase.TAKEN_OVER,
            tool_name=None,
            call_id=None,
            ref_seq=None,
            payload={"owner": owner},
            prev_hash=head[1],
        )
        self._cursor.execute(_INSERT, row_of(entry, payload_bytes))
        self._heads.pop(saga_id, None)

    def renew_lease(self, lease: SagaLease, *, expires_at: datetime.datetime) -> SagaLease:
        """Move the lease's expiry; `LeaseLostError` if it was taken over."""
        if not self._set_expiry(lease, expires_at):
            raise lost(lease)
        return SagaLease(
            saga_id=lease.saga_id, owner=lease.owner, token=lease.token, expires_at=expires_at
        )

    def release_lease(self, lease: SagaLease) -> None:
        """Free the saga, unless the lease was taken over."""
        self._set_expiry(lease, RELEASED)

    def _set_expiry(self, lease: SagaLease, expires_at: datetime.datetime) -> bool:
        with self._lock:
            try:
                self._cursor.execute(
                    _SET_EXPIRY, (lease_time(expires_at), lease.saga_id, lease.token)
                )
            except sqlite3.Error as error:
                raise JournalError(
                    f"saga {lease.saga_id!r}: cannot update its lease in {self.path!r}: {error}"
                ) from error
            return self._cursor.rowcount == 1

    def _remember(self, saga_id: str, seq: int, hash: str) -> None:
        """Record a saga's head (under the lock), forgetting them all when there are many."""
        heads = self._heads
        if len(heads) >= _MAX_REMEMBERED_HEADS and saga_id not in heads:
            heads.clear()
        heads[saga_id] = (seq, hash)

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order."""
        require_lookup(saga_id, "saga id")
        return self._select(
            f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = ? ORDER BY seq", (saga_id,)
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
                raise JournalError(f"cannot list the sagas in {self.path!r}: {error}") from error
        return [row[0] for row in rows]

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return entries ordered by (saga_id, seq), after `after`."""
        saga_id, seq = after if after is not None else ("", 0)
        require_lookup(saga_id, "listing position (after)")
        return self._select(
            f"SELECT {_COLUMNS} FROM sagacity_journal "
            "WHERE (saga_id, seq) > (?, ?) ORDER BY saga_id, seq LIMIT ?",
            (saga_id, seq, limit),
        )

    def missing_triggers(self) -> list[str]:
        """The append-only triggers the journal table lacks: someone made it writable.

        Read only: they are never re-created here, which would erase the evidence.
        """
        with self._lock:
            try:
                rows = self._conn.execute(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                    "AND tbl_name = 'sagacity_journal'"
                ).fetchall()
            except sqlite3.Error as error:
                raise JournalError(f"cannot read the triggers in {self.path!r}: {error}") from error
        # A trigger of the right name whose body no longer refuses counts as missing.
        present = {row[0] for row in rows if "RAISE(ABORT" in str(row[1]).upper()}
        return [name for name in TRIGGERS if name not in present]

    def close(self) -> None:
        """Commit the appends queued, then close the connection."""
        self._group.close()
        with self._lock:
            self._conn.close()

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
                raise JournalError(f"cannot read the journal in {self.path!r}: {error}") from error
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
