"""A batch of PostgreSQL appends in one transaction: group commit (see `journal._group`).

The appends that overlapped a commit in flight are written in one transaction on one
connection, sorted by saga (stably: each saga's appends keep their order) so that two
processes committing batches take the sagas' locks in the same order and cannot
deadlock. Each append keeps its own semantics:

- a fenced append share-locks its lease row once per saga and batch, until the commit,
  so a takeover waits for the batch and then reads its entries; a lease already taken
  over refuses that saga's appends (`LeaseLostError`) and the others are written;
- an `INSERT` whose seq another writer took writes nothing (`ON CONFLICT DO NOTHING`:
  the transaction goes on) and the append takes the locked path, whose advisory lock
  is then held to the commit;
- a conditional append whose seq is taken is refused alone (`AppendConflictError`).

A batch that fails as a whole (a lost connection, a refused commit) is never dropped:
its sagas' cached heads are forgotten and each append is redone on its own, through
the journal's ordinary path with its retries. An append whose batch's `COMMIT` was sent
and not answered is redone as in doubt: a row at its seq with its hash is that entry.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg
import psycopg_pool

from sagacity.errors import AppendConflictError, JournalError, LeaseLostError, SerializationError
from sagacity.journal._entry import JournalEntry
from sagacity.journal._group import AppendRequest
from sagacity.journal._lease import lost
from sagacity.journal._rows import row_of
from sagacity.journal.postgres._database import Lease, is_transient

if TYPE_CHECKING:
    from sagacity.journal.postgres._journal import PostgresJournal, _Append

__all__ = ["append_batch"]

_REFUSALS = (AppendConflictError, LeaseLostError, SerializationError)
"""What refuses one append of a batch alone; the others are written."""


class _Written:
    __slots__ = ("entry", "fast", "index", "payload_bytes")

    def __init__(self, index: int, entry: JournalEntry, payload_bytes: bytes, fast: bool) -> None:
        self.index = index
        self.entry = entry
        self.payload_bytes = payload_bytes
        self.fast = fast


def append_batch(
    journal: PostgresJournal, requests: Sequence[AppendRequest]
) -> list[JournalEntry | BaseException]:
    """Commit `requests` in one transaction; each one's entry or its own refusal, in order."""
    from sagacity.journal.postgres._journal import new_append

    if journal._closed:
        closed = JournalError(
            f"sagas {_names(requests)}: cannot append: the journal is closed; open a new one"
        )
        return [closed] * len(requests)
    appends = [new_append(request) for request in requests]
    results: list[JournalEntry | BaseException | None] = [None] * len(requests)
    written: list[_Written] = []
    db = journal._db
    commit_sent = False
    try:
        lease = db.checkout(time.monotonic() + db.settings.timeout)
        try:
            cursor = lease.cursor
            cursor.execute(b"BEGIN")
            heads: dict[str, tuple[int, str]] = {}
            fenced: set[tuple[str, int]] = set()
            for index in sorted(range(len(appends)), key=lambda i: appends[i].saga_id):
                try:
                    done = _one(journal, lease, appends[index], heads, fenced)
                except _REFUSALS as refusal:
                    results[index] = refusal
                    continue
                written.append(_Written(index, *done))
                results[index] = done[0]
            commit_sent = True
            cursor.execute(b"COMMIT")
        except BaseException:
            if not lease.conn.closed and lease.conn.info.transaction_status != _IDLE:
                try:
                    lease.conn.rollback()
                except psycopg.Error:
                    lease.conn.close()  # the pool discards it
            raise
        finally:
            db.checkin(lease)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
        return _redo_alone(journal, appends, written, error, in_doubt=commit_sent)
    for item in written:
        journal._done(item.entry, fast=item.fast)
    return [r for r in results if r is not None]


def _one(
    journal: PostgresJournal,
    lease: Lease,
    append: _Append,
    heads: dict[str, tuple[int, str]],
    fenced: set[tuple[str, int]],
) -> tuple[JournalEntry, bytes, bool]:
    """Write one append inside the batch's transaction: (entry, payload bytes, fast)."""
    cursor = lease.cursor
    saga_id, fence = append.saga_id, append.fence
    if fence is not None and (saga_id, fence.token) not in fenced:
        # Held until the commit: a takeover waits for the batch, then reads its entries.
        if cursor.execute(journal._sql_fence_share, (saga_id, fence.token)).fetchone() is None:
            raise lost(fence)
        fenced.add((saga_id, fence.token))
    known = heads.get(saga_id)
    if known is None:
        with journal._guard:
            head = journal._heads.get(saga_id)
            if head is not None and head.quiet_needed == 0:
                known = (head.seq, head.hash)
    expected = append.expected_seq
    if expected is not None:
        if known is None or known[0] != expected:
            known = _head(journal, lease, saga_id)
            if known[0] != expected:
                raise AppendConflictError(saga_id, expected, known[0])
        entry, payload_bytes = append.seal_after(*known)
        if not _insert(journal, lease, entry, payload_bytes):
            raise AppendConflictError(saga_id, expected, _head(journal, lease, saga_id)[0])
        heads[saga_id] = (entry.seq, entry.hash)
        return entry, payload_bytes, True
    if known is not None:
        entry, payload_bytes = append.seal_after(*known)
        if _insert(journal, lease, entry, payload_bytes):
            heads[saga_id] = (entry.seq, entry.hash)
            return entry, payload_bytes, True
        journal._conflict(append)
    return _locked(journal, lease, append, heads)


def _locked(
    journal: PostgresJournal, lease: Lease, append: _Append, heads: dict[str, tuple[int, str]]
) -> tuple[JournalEntry, bytes, bool]:
    """The locked path inside the batch; its fence, if any, is share-locked already."""
    row = lease.cursor.execute(
        journal._sql_append_locked,
        append.locked_args(journal._lock_key(append.saga_id), False, None),
    ).fetchone()
    entry, payload_bytes, _ = append.seal_locked(row, journal._db.settings.where)
    heads[append.saga_id] = (entry.seq, entry.hash)
    return entry, payload_bytes, False


def _insert(journal: PostgresJournal, lease: Lease, entry: JournalEntry, payload: bytes) -> bool:
    """Insert the entry; False when its seq is taken (the transaction goes on)."""
    lease.cursor.execute(journal._sql_insert_batch, row_of(entry, payload))
    return lease.cursor.rowcount == 1


def _head(journal: PostgresJournal, lease: Lease, saga_id: str) -> tuple[int, str]:
    """The saga's head as the transaction sees it now (READ COMMITTED: the latest)."""
    return journal._read_head(lease, saga_id)


def _redo_alone(
    journal: PostgresJournal,
    appends: list[_Append],
    written: list[_Written],
    error: BaseException,
    *,
    in_doubt: bool,
) -> list[JournalEntry | BaseException]:
    """The batch failed as a whole: redo each append on its own, with its retries.

    Before its `COMMIT` was sent, or when the server refused it, nothing of the batch
    is committed. When the `COMMIT` was sent and its answer lost, each entry written in
    the batch is in doubt: its retry looks for a row at its seq with its hash first.
    """
    doubt = in_doubt and is_transient(error)
    with journal._guard:
        for append in appends:
            journal._heads.pop(append.saga_id, None)
    if doubt:
        for item in written:
            append = appends[item.index]
            append.sent, append.in_doubt = (item.entry, item.payload_bytes), True
    results: list[JournalEntry | BaseException] = []
    for append in appends:
        if not doubt or append.sent is None:
            append.sent, append.in_doubt, append.locked_sent = None, False, False
        try:
            results.append(journal._append(append))
        except Exception as failure:
            results.append(failure)
    return results


def _names(requests: Sequence[AppendRequest]) -> str:
    return ", ".join(repr(saga) for saga in sorted({r.saga_id for r in requests}))


_IDLE = psycopg.pq.TransactionStatus.IDLE
