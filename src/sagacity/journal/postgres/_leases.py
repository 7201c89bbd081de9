"""PostgreSQL saga leases: taken, renewed and released, by a sync or an async driver.

Each operation is written once as steps (`_steps`); the journal runs them on a pooled
connection (`PostgresDatabase.run`) or on the loop's async connections
(`LoopWriter.run`). Both retry a lost connection: every statement here is safe to run
twice (a lease row that is this acquisition's own is granted, see `LeaseStatements.acquire`).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import psycopg

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
        leases = db.tables.lease
        # One call, one round trip: the lease if it is free (journaling TAKEN_OVER when it
        # was taken over), else its holder; and the saga's head after it.
        self._sql_acquire = (
            f"SELECT owner, token, expires_at, head_seq, head_hash FROM "
            f"{db.tables.prefix}sagacity_take_lease(%s::integer, %s, %s, %s, %s, %s, %s, "
            "%s, %s, %s)"
        ).encode()
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
        self,
        saga_id: str,
        owner: str,
        *,
        now: datetime.datetime,
        expires_at: datetime.datetime,
        lock_key: int,
        marker: tuple[str, str, bytes, bytes, bytes],
    ) -> Steps[tuple[SagaLease, int, str]]:
        """Take the lease if it is free at `now`; `SagaBusyError` names its holder if not.

        Returns the lease and the saga's head (seq, hash) once it is taken. `marker` is
        the TAKEN_OVER entry's payload text, time and hashed pieces (see
        `_Append.pieces`), written only when the lease is taken over. A row that is this
        acquisition's own (owner and expiry) is granted, even when a try that took it
        lost its reply and this one found it held.
        """
        payload, recorded_at, before_prev, before_seq, after_seq = marker
        args = (lock_key, saga_id, owner, expires_at, now, payload, recorded_at)
        try:
            _, row = yield Statement(
                self._sql_acquire, (*args, before_prev, before_seq, after_seq), ONE
            )
        except psycopg.errors.UndefinedFunction:
            raise JournalError(
                f"{self.acquiring(saga_id)}: its sagacity schema predates this sagacity "
                f"(no sagacity_take_lease); open it once from a worker, which upgrades it in "
                "place (opening it read-only, as the CLI does, changes nothing)"
            ) from None
        if row is None or row[0] is None:  # the function answers one row: schema altered
            raise JournalError(
                f"{self.acquiring(saga_id)}: sagacity_take_lease found no lease row; "
                "sagacity_lease was changed outside sagacity"
            )
        return self._granted(row, saga_id, owner, expires_at), int(row[3]), str(row[4])

    def set_expiry(self, lease: SagaLease, expires_at: datetime.datetime) -> Steps[bool]:
        """Move the lease's expiry; False if another worker took the saga over."""
        count, _ = yield Statement(
            self._sql_set_expiry, (expires_at, lease.saga_id, lease.token), NOTHING
        )
        return bool(count == 1)

    def _granted(
        self, row: tuple[Any, ...], saga_id: str, owner: str, expires_at: datetime.datetime
    ) -> SagaLease:
        held = SagaLease(
            saga_id=saga_id,
            owner=str(row[0]),
            token=int(str(row[1])),
            expires_at=row[2] if isinstance(row[2], datetime.datetime) else expires_at,
        )
        if held.owner != owner or held.expires_at != expires_at:
            raise busy(held)
        return held
