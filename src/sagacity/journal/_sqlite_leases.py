"""The SQLite journal's saga leases: taken (journaling TAKEN_OVER), renewed and released.

A lease is a row of `sagacity_lease`; taking one is a `BEGIN IMMEDIATE` transaction that
also journals TAKEN_OVER after the saga's head when the lease it takes over expired
unreleased, so that no append of the old holder can come between.
"""

from __future__ import annotations

import datetime
import sqlite3
import threading

from sagacity.errors import JournalError
from sagacity.journal._entry import Phase, seal
from sagacity.journal._lease import RELEASED, SagaLease, busy, lease_time, lost
from sagacity.journal._rows import row_of
from sagacity.journal._sqlite_heads import Heads
from sagacity.journal._sqlite_sql import ACQUIRE, HEAD, HOLDER, INSERT, LIVE, SET_EXPIRY

__all__ = ["SqliteLeaseTable"]


class SqliteLeaseTable:
    """Takes, renews and releases a SQLite journal's saga leases.

    Args:
        conn: The journal's connection.
        lock: The journal's lock: one statement at a time on the connection.
        path: The database file, for error messages.
        heads: The heads the journal remembers: a lease taken here fences the head it
            was taken at (see `Heads.taken`).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        lock: threading.Lock,
        path: str,
        heads: Heads,
    ) -> None:
        self._conn = conn
        self._cursor = conn.cursor()
        self._lock = lock
        self._path = path
        self._heads = heads

    def acquire(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """Take the saga's lease if it is free at `now`; TAKEN_OVER in the same transaction."""
        cursor = self._cursor
        with self._lock:
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    live = cursor.execute(
                        LIVE, {"saga": saga_id, "released": lease_time(RELEASED)}
                    ).fetchone()
                    times = {"expires": lease_time(expires_at), "now": lease_time(now)}
                    granted = cursor.execute(
                        ACQUIRE, {"saga": saga_id, "owner": owner, **times}
                    ).fetchall()
                    held = None if granted else cursor.execute(HOLDER, (saga_id,)).fetchone()
                    found = cursor.execute(HEAD, (saga_id,)).fetchone()
                    head = None if found is None else (found[0], found[1])
                    if granted and live and head:
                        head = self._taken_over(saga_id, owner, head)
                    cursor.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        cursor.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                self._heads.moved(saga_id)
                raise JournalError(
                    f"saga {saga_id!r}: cannot take its lease in {self._path!r}: {error}"
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
            lease = SagaLease(
                saga_id=saga_id,
                owner=owner,
                token=granted[0][0],
                expires_at=expires_at,
                head_seq=0 if head is None else head[0],
            )
            self._heads.taken(lease, head)
        return lease

    def _taken_over(self, saga_id: str, owner: str, head: tuple[int, str]) -> tuple[int, str]:
        """Journal TAKEN_OVER after `head`, in the transaction that takes the lease.

        Returns the saga's head after it: the TAKEN_OVER entry.
        """
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
        self._cursor.execute(INSERT, row_of(entry, payload_bytes))
        return entry.seq, entry.hash

    def renew(self, lease: SagaLease, *, expires_at: datetime.datetime) -> SagaLease:
        """Move the lease's expiry; `LeaseLostError` if it was taken over."""
        if not self._set_expiry(lease, expires_at):
            raise lost(lease)
        return SagaLease(
            saga_id=lease.saga_id, owner=lease.owner, token=lease.token, expires_at=expires_at
        )

    def release(self, lease: SagaLease) -> None:
        """Free the saga, unless the lease was taken over."""
        self._set_expiry(lease, RELEASED)

    def _set_expiry(self, lease: SagaLease, expires_at: datetime.datetime) -> bool:
        with self._lock:
            try:
                self._cursor.execute(
                    SET_EXPIRY, (lease_time(expires_at), lease.saga_id, lease.token)
                )
            except sqlite3.Error as error:
                raise JournalError(
                    f"saga {lease.saga_id!r}: cannot update its lease in {self._path!r}: {error}"
                ) from error
            return self._cursor.rowcount == 1
