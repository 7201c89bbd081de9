"""PostgreSQL saga leases: taken, renewed and released, by a sync or an async driver.

Each operation is written once as steps (`_steps`); the journal runs them on a pooled
connection (`PostgresDatabase.run`) or on the loop's async connections
(`LoopWriter.run`). Both retry a lost connection: every statement here is safe to run
twice (a lease row that is this acquisition's own is granted, see `LeaseStatements.acquire`).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from sagacity.errors import JournalError
from sagacity.journal._lease import SagaLease, busy
from sagacity.journal.postgres._steps import NOTHING, ONE, Statement, Steps

if TYPE_CHECKING:
    from sagacity.journal.postgres._database import PostgresDatabase

__all__ = ["LeaseStatements"]


class LeaseStatements:
    """The lease statements of one journal's tables."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._where = db.settings.where
        table, leases = db.tables.journal, db.tables.lease
        # One statement, one round trip: the lease if it is free, else its holder (as the
        # statement's snapshot has it: a holder the statement locked, unchanged).
        self._sql_acquire = (
            "WITH granted AS ("
            f"INSERT INTO {leases} AS l (saga_id, owner, token, expires_at, since_seq) "
            "VALUES (%(saga)s, %(owner)s, 1, %(expires)s, "
            f"(SELECT coalesce(max(seq), 0) FROM {table} WHERE saga_id = %(saga)s)) "
            "ON CONFLICT (saga_id) DO UPDATE SET owner = excluded.owner, "
            "token = l.token + 1, expires_at = excluded.expires_at, "
            "since_seq = excluded.since_seq WHERE l.expires_at <= %(now)s "
            # A saga ended since the lease was taken is free: its holder has nothing left.
            f"OR EXISTS (SELECT 1 FROM {table} j WHERE j.saga_id = l.saga_id "
            "AND j.phase = 'ENDED' AND j.seq > l.since_seq) "
            "RETURNING owner, token, expires_at) "
            "SELECT owner, token, expires_at FROM granted UNION ALL "
            f"SELECT owner, token, expires_at FROM {leases} "
            "WHERE saga_id = %(saga)s AND NOT EXISTS (SELECT 1 FROM granted)"
        )
        self._sql_holder = f"SELECT owner, token, expires_at FROM {leases} WHERE saga_id = %s"
        self._sql_set_expiry = (
            f"UPDATE {leases} SET expires_at = %s WHERE saga_id = %s AND token = %s::bigint"
        )

    def acquiring(self, saga_id: str) -> str:
        """What failed, for the error when taking the lease does."""
        return f"saga {saga_id!r}: cannot take its lease in {self._where}"

    def updating(self, lease: SagaLease) -> str:
        """What failed, for the error when renewing or releasing the lease does."""
        return f"saga {lease.saga_id!r}: cannot update its lease in {self._where}"

    def acquire(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> Steps[SagaLease]:
        """Take the lease if it is free at `now`; `SagaBusyError` names its holder if not.

        A row that is this acquisition's own (owner and expiry) is granted, even when a
        try that took it lost its reply and this one found it held.
        """
        args = {"saga": saga_id, "owner": owner, "expires": expires_at, "now": now}
        _, row = yield Statement(self._sql_acquire, args, ONE)
        if row is None:
            # Two first acquisitions raced: this one waited for the other's row, which its
            # statement's snapshot predates; a statement of its own sees it.
            _, row = yield Statement(self._sql_holder, (saga_id,), ONE)
        return self._granted(row, saga_id, owner, expires_at)

    def set_expiry(self, lease: SagaLease, expires_at: datetime.datetime) -> Steps[bool]:
        """Move the lease's expiry; False if another worker took the saga over."""
        count, _ = yield Statement(
            self._sql_set_expiry, (expires_at, lease.saga_id, lease.token), NOTHING
        )
        return bool(count == 1)

    def _granted(
        self, row: tuple[Any, ...] | None, saga_id: str, owner: str, expires_at: datetime.datetime
    ) -> SagaLease:
        if row is None:  # a lease row is never deleted, unless outside sagacity
            raise JournalError(
                f"{self.acquiring(saga_id)}: its lease row vanished while it was taken; "
                "sagacity_lease was changed outside sagacity"
            )
        held = SagaLease(
            saga_id=saga_id,
            owner=str(row[0]),
            token=int(str(row[1])),
            expires_at=row[2] if isinstance(row[2], datetime.datetime) else expires_at,
        )
        if held.owner != owner or held.expires_at != expires_at:
            raise busy(held)
        return held
