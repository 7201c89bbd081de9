"""One PostgreSQL append at a time: a total order per saga, under any number of workers.

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

import collections
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import psycopg_pool

from sagacity.errors import AppendConflictError, JournalError
from sagacity.journal._entry import GENESIS_HASH, JournalEntry, Phase
from sagacity.journal._group import AppendRequest
from sagacity.journal._lease import SagaLease, lost
from sagacity.journal._rows import entries_from_rows, row_of
from sagacity.journal.postgres._append import Append, AppendStats, Head, unchecked
from sagacity.journal.postgres._database import PostgresDatabase, is_transient
from sagacity.journal.postgres._leases import Taken
from sagacity.journal.postgres._schema import LEASE_LOST, advisory_key
from sagacity.journal.postgres._steps import NOTHING, ONE, PreparedSql, Statement, Steps, run_steps

__all__ = ["COLUMNS", "Appender", "bulk_insert_sql"]

COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"

_CONTENDED_STREAK = 16
"""After a conflict, how many locked appends in a row must find no other writer's entry
since the head they started from before the saga goes back to the fast path."""

_HEAD_CACHE_SIZE = 10_000
"""Sagas whose head a journal remembers; the least recently used is forgotten first."""


def bulk_insert_sql(table: str, columns: str) -> bytes:
    """The statement that writes a batch (`_batch.Batch.insert`): one array per column."""
    types = ["text", "bigint", "text", "text", "text", "bigint", "text", "text", "text", "text"]
    arrays = ", ".join(f"%b::{kind}[]" for kind in types)
    return f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays})".encode()


class Appender:
    """A journal's appends one at a time, and what it knows of each saga's head and lease.

    The journal's sync path, its batches (`_batch`) and its loops' writers (`_async`) all
    commit through it. One guard covers its small shared state; never held across a
    statement.
    """

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self.closed = False
        """Set by the journal's `close`, under the guard: no append is begun after it."""
        table = self.db.tables.journal
        self._lock_prefix = f"{self.db.tables.qualifier}\x00"
        self._sql_insert = (
            f"INSERT INTO {table} ({COLUMNS}) VALUES "
            "(%s, %s::bigint, %s, %s, %s, %s::bigint, %s, %s, %s, %s)"
        ).encode()
        leases = self.db.tables.lease
        # Written only while the token is the saga's; FOR SHARE keeps a takeover waiting
        # until the entry commits, so that the new holder reads it.
        self._sql_insert_fenced = (
            f"INSERT INTO {table} ({COLUMNS}) SELECT "
            "%s, %s::bigint, %s, %s, %s, %s::bigint, %s, %s, %s, %s "
            f"WHERE EXISTS (SELECT 1 FROM {leases} WHERE saga_id = %s AND token = %s::bigint "
            "FOR SHARE)"
        ).encode()
        self._prepared_insert = PreparedSql.of(self._sql_insert)
        self._prepared_insert_fenced = PreparedSql.of(self._sql_insert_fenced)
        self.sql_insert_bulk = bulk_insert_sql(table, COLUMNS)  # see _batch.py
        self.sql_insert_bulk_text = self.sql_insert_bulk.replace(b"%b", b"%s")
        """The same, its arrays sent as text literals by a prepared statement."""
        self.prepared_insert_bulk = PreparedSql.of(self.sql_insert_bulk_text)
        function = self.db.tables.prefix + "sagacity_append_locked"
        self._sql_append_locked = (
            f"SELECT seq, prev_hash, hash, lost FROM {function}"
            "(%s::integer, %s, %s, %s, %s, %s::bigint, %s, %s, %s, %s, %s, %s, %s::bigint)"
        ).encode()
        self._sql_hash_at = f"SELECT hash FROM {table} WHERE saga_id = %s AND seq = %s::bigint"
        self._sql_head = (
            f"SELECT seq, hash FROM {table} WHERE saga_id = %s ORDER BY seq DESC LIMIT 1"
        ).encode()
        # One guard for the small shared state below; never held across a statement.
        self.guard = threading.Lock()
        self.heads: collections.OrderedDict[str, Head] = collections.OrderedDict()
        self._under_way: dict[tuple[str, int], int] = {}
        """Per saga and token, fenced appends under way, or ended with their fate unknown:
        while any is, that lease is not released (see `let_go`)."""
        self._retired: collections.OrderedDict[str, int] = collections.OrderedDict()
        """Per saga, the newest token this journal let go: no head is fenced by it again."""
        self._fast = self._locked = self.conflicts = self.reconnects = 0

    def stats(self) -> AppendStats:
        """How appends went so far: the fast path, the locked path, conflicts, reconnects."""
        with self.guard:
            return AppendStats(
                appends=self._fast + self._locked,
                fast=self._fast,
                locked=self._locked,
                conflicts=self.conflicts,
                reconnects=self.reconnects,
            )

    def append_request(self, request: AppendRequest) -> JournalEntry:
        """Append one entry on its own: the fast path, else the locked path."""
        return self.append(self.new_append(request))

    def new_append(self, request: AppendRequest) -> Append:
        """The append in progress for `request`; `JournalError` once the journal is closed."""
        if self.closed:
            raise JournalError(
                f"saga {request.saga_id!r}: cannot append {request.phase.value}: the journal "
                "is closed; open a new one"
            )
        return Append(*request)  # the fields in the same order

    def append(self, append: Append) -> JournalEntry:
        """Commit an append on a pooled connection, redoing it after a lost connection."""
        db = self.db
        deadline = time.monotonic() + db.settings.timeout
        attempts = 0
        while True:
            attempts += 1
            try:
                lease = db.checkout(deadline)
                try:
                    return run_steps(lease.cursor, self.attempt(append), lease.prepared)
                finally:
                    db.checkin(lease)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
                pause = self.failed_try(append, error, deadline, attempts)
            time.sleep(pause)

    def failed_try(
        self,
        append: Append,
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
        pause = self.db.retry_pause(error, deadline, attempts)
        if pause is None:
            raise JournalError(self._failure(append, error)) from error
        with self.guard:
            self.reconnects += 1
            self.heads.pop(append.saga_id, None)
        return pause

    def attempt(self, append: Append) -> Steps[JournalEntry]:
        """One try on one connection: the in-doubt entry, the fast path, the locked path."""
        saga_id = append.saga_id
        if append.sent is not None and append.in_doubt:
            entry = append.sent[0]
            written = yield from self._insert(append, checked=True, refused_if_gone=False)
            if written or (yield from self._hash_at(entry)) == entry.hash:
                return self.done(entry, fast=True, append=append)
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
        with self.guard:  # seq and hash read together: another thread may move the head
            head = self.heads.get(saga_id)
            if head is not None:
                self.heads.move_to_end(saga_id)
                seen = (head.seq, head.hash)
                # After a locked try whose reply was lost, only the locked path may tell
                # whether that try wrote the entry.
                fast = head.quiet_needed == 0 and not append.locked_sent
                checked = fast and not unchecked(append, head)
        if fast:
            append.sent = append.seal_after(*seen)
            if (yield from self._insert(append, checked=checked)):
                return self.done(append.sent[0], fast=True, append=append, checked=checked)
            append.sent = None
            self._conflict(append)
        return (yield from self._append_locked(append, None if head is None else (head, seen)))

    def _append_expected(self, append: Append, expected: int) -> Steps[JournalEntry]:
        """Append at seq `expected` + 1 with one `INSERT`, or raise `AppendConflictError`.

        The entry is chained to the hash of seq `expected`: the cached head's if it is
        that seq (a head is always a row that exists, and rows never change), else the
        head read now. The primary key refuses the row if any writer took the seq.
        """
        saga_id = append.saga_id
        prev_hash = None
        checked = True
        with self.guard:  # seq and hash read together: another thread may move the head
            head = self.heads.get(saga_id)
            if head is not None:
                self.heads.move_to_end(saga_id)
                if head.seq == expected:
                    prev_hash, checked = head.hash, not unchecked(append, head)
        if prev_hash is None:
            found, prev_hash = yield from self._read_head(saga_id)
            if found != expected:
                raise AppendConflictError(saga_id, expected, found)
        append.sent = append.seal_after(expected, prev_hash)
        if (yield from self._insert(append, checked=checked)):
            return self.done(append.sent[0], fast=True, append=append, checked=checked)
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
        with self.guard:
            self._move_head(saga_id, seq, hash)
        return seq, hash

    def _append_locked(
        self, append: Append, known: tuple[Head, tuple[int, str]] | None
    ) -> Steps[JournalEntry]:
        """Append through `sagacity_append_locked`: lock, read the head, hash, insert.

        One statement and one round trip; the saga's advisory lock is held only while
        the server works, from the head read to the commit.
        """
        find_own, append.locked_sent = append.locked_sent, True
        _, row = yield Statement(
            self._sql_append_locked,
            append.locked_args(self.lock_key(append.saga_id), find_own, append.token()),
            ONE,
        )
        append.locked_sent = False
        entry, _, lost = append.seal_locked(row, self.db.settings.where)
        seq, prev_hash = entry.seq, entry.prev_hash
        with self.guard:
            self.conflicts += lost
            if known is not None:
                # Quiet when the entry follows the head this append started from: no
                # other writer, in this process or another, appended in between.
                head, seen = known
                if seen != (seq - 1, prev_hash) or lost:
                    head.quiet_needed = _CONTENDED_STREAK
                elif head.quiet_needed > 0:
                    head.quiet_needed -= 1
        # The function checked the token under the saga's lock: a takeover since would
        # journal TAKEN_OVER after this entry, so the head is fenced by it, as after a
        # checked INSERT (an entry of a saga with no entries included: once it has one,
        # a takeover journals the marker).
        return self.done(entry, fast=False, append=append, checked=append.fence is not None)

    def _conflict(self, append: Append) -> None:
        """Another writer took the seq: count it, and queue on the saga's lock a while."""
        with self.guard:
            self.conflicts += 1
            head = self.heads.get(append.saga_id)
            if head is not None:
                head.quiet_needed = _CONTENDED_STREAK

    def lock_key(self, saga_id: str) -> int:
        """The second key of the advisory lock the locked path takes on `saga_id`."""
        return advisory_key(self._lock_prefix + saga_id)

    def _insert(
        self, append: Append, *, checked: bool, refused_if_gone: bool = True
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

    def took(self, taken: Taken) -> SagaLease:
        """Cache the head a lease was taken at: the lease's token held the saga there.

        Not for a saga with no entries: a takeover of it journals nothing (there is no
        seq a former holder could be about to reuse), so its first append is checked.
        """
        lease, seq, hash = taken
        with self.guard:
            head = self.heads.get(lease.saga_id)
            if (
                seq > 0
                and self._arms(lease.saga_id, lease.token)
                and (head is None or head.seq < seq or (head.seq, head.hash) == (seq, hash))
            ):
                self._move_head(lease.saga_id, seq, hash).fenced_by = lease.token
            elif head is not None:
                head.fenced_by = None  # a saga with no entries, or a head past the one read
        return lease

    def let_go(self, lease: SagaLease) -> bool:
        """Appends under `lease` no longer go unchecked; whether none is under way."""
        saga_id = lease.saga_id
        with self.guard:
            head = self.heads.get(saga_id)
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

    def begun(self, lease: SagaLease) -> tuple[str, int]:
        """Count an append under `lease` as under way, until its fate is known (`ended`).

        Known: written, or refused; one that raises anything else stays counted.
        """
        key = (lease.saga_id, lease.token)
        with self.guard:
            self._under_way[key] = self._under_way.get(key, 0) + 1
        return key

    def ended(self, key: tuple[str, int]) -> None:
        """An append counted by `begun` has its fate known."""
        with self.guard:
            left = self._under_way[key] - 1
            if left:
                self._under_way[key] = left
            else:
                del self._under_way[key]

    def _hash_at(self, entry: JournalEntry) -> Steps[str | None]:
        """The hash of the row at `entry`'s seq, if there is one."""
        _, row = yield Statement(self._sql_hash_at, (entry.saga_id, entry.seq), ONE)
        return None if row is None else str(row[0])

    def done(
        self, entry: JournalEntry, *, fast: bool, append: Append, checked: bool = False
    ) -> JournalEntry:
        """Count the append and move the saga's head to it.

        A fast append follows the head it was sealed on, so the head keeps its token;
        one whose token was `checked` (by its `INSERT`, or by the locked path's function)
        leaves the head fenced by it, unless this journal let the token go. An unfenced
        locked append leaves no token: the next fenced one is checked. ENDED frees the
        lease: its token is let go.
        """
        with self.guard:
            self._done(entry, fast, append, checked)
        return entry

    def done_all(self, written: Sequence[tuple[JournalEntry, Append]]) -> None:
        """`done` for the appends of a batch, written by the fast path, unchecked."""
        with self.guard:
            for entry, append in written:
                self._done(entry, True, append, False)

    def _done(self, entry: JournalEntry, fast: bool, append: Append, checked: bool) -> None:
        """Under the guard: `done`."""
        token = None if append.fence is None else append.fence.token
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

    def _arms(self, saga_id: str, token: int) -> bool:
        """Under the guard: whether `token` may fence a head (it was not let go here)."""
        return token > self._retired.get(saga_id, 0)

    def _move_head(self, saga_id: str, seq: int, hash: str, *, keep_fence: bool = False) -> Head:
        """Record a head read or written (under the guard); a head only moves forward.

        A head moved past without `keep_fence` forgets its token: the entries in between
        may hold a TAKEN_OVER this journal has not checked.
        """
        head = self.heads.get(saga_id)
        if head is None:
            head = self.heads[saga_id] = Head(seq, hash)
            if len(self.heads) > _HEAD_CACHE_SIZE:
                self.heads.popitem(last=False)
        elif seq > head.seq:
            head.seq, head.hash = seq, hash
            if not keep_fence:
                head.fenced_by = None
        return head

    def _failure(self, append: Append, error: BaseException) -> str:
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
            f"saga {append.saga_id!r}: cannot append {what} to {self.db.settings.where}: "
            f"{self.db.describe_error(error)}; {fate}"
        )

    def read(self, saga_id: str, rows: list[tuple[Any, ...]]) -> list[JournalEntry]:
        """A saga's entries from its rows, its head cached."""
        entries = entries_from_rows(rows)
        with self.guard:
            if entries:
                self._move_head(saga_id, entries[-1].seq, entries[-1].hash)
            else:
                self._move_head(saga_id, 0, GENESIS_HASH)
        return entries
