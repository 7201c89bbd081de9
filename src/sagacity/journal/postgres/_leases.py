"""PostgreSQL saga leases: taken, renewed and released, by a sync or an async driver.

Each operation is written once as steps (`_steps`); the journal runs them on a pooled
connection (`PostgresDatabase.run`) or on the loop's async connections
(`LoopWriter.run`). Both retry a lost connection: every statement here is safe to run
twice (a lease row that is this acquisition's own is granted, see `LeaseStatements.acquire`).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg

from sagacity.errors import JournalError, SagaBusyError
from sagacity.journal._lease import SagaLease, busy
from sagacity.journal.postgres._steps import ALL, NOTHING, ONE, Statement, Steps

if TYPE_CHECKING:
    from sagacity.journal.postgres._database import PostgresDatabase

__all__ = ["LeaseStatements", "LeaseTake", "Taken"]


class LeaseTake(NamedTuple):
    """One try to take a saga's lease: `sagacity_take_lease`'s arguments, in its order."""

    lock_key: int
    saga_id: str
    owner: str
    expires_at: datetime.datetime
    now: datetime.datetime
    payload: str
    """The TAKEN_OVER entry's payload text, written only when the lease is taken over."""
    recorded_at: str
    before_prev: bytes
    """The TAKEN_OVER entry's hashed pieces around its prev hash and seq (`_Append.pieces`)."""
    before_seq: bytes
    after_seq: bytes


Taken = tuple[SagaLease, int, str]
"""A lease taken, and the saga's head (seq, hash) once it was."""


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
        # The same for many sagas: one call per row, in the order of the rows.
        self._sql_acquire_many = (
            "SELECT t.owner, t.token, t.expires_at, t.head_seq, t.head_hash FROM unnest("
            "%s::integer[], %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[], "
            "%s::text[], %s::text[], %s::bytea[], %s::bytea[], %s::bytea[]) WITH ORDINALITY "
            "AS a(k, s, o, e, n, p, r, bp, bs, af, i) CROSS JOIN LATERAL "
            f"{db.tables.prefix}sagacity_take_lease(a.k, a.s, a.o, a.e, a.n, a.p, a.r, a.bp, "
            "a.bs, a.af) t ORDER BY a.i"
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

    def acquire(self, take: LeaseTake) -> Steps[Taken]:
        """Take the lease if it is free at `take.now`; `SagaBusyError` names its holder if not.

        A row that is this acquisition's own (owner and expiry) is granted, even when a
        try that took it lost its reply and this one found it held.
        """
        try:
            _, row = yield Statement(self._sql_acquire, take, ONE)
        except psycopg.errors.UndefinedFunction:
            raise JournalError(
                f"{self.acquiring(take.saga_id)}: its sagacity schema predates this sagacity "
                "(no sagacity_take_lease); open it once from a worker, which upgrades it in "
                "place (opening it read-only, as the CLI does, changes nothing)"
            ) from None
        taken = self._granted(row, take)
        if isinstance(taken, SagaBusyError):
            raise taken
        return taken

    def acquire_many(self, takes: Sequence[LeaseTake]) -> Steps[list[Taken | SagaBusyError]]:
        """`acquire` for several sagas in one statement; each one's lease or refusal, in order.

        Sorted by lock key, then saga: each take holds its saga's advisory lock to the
        end of the statement, and two batches whose sagas share keys (the keys are 32-bit
        hashes: ids can be chosen to collide) then take them in one order, never each
        waiting for the other's. Any error fails the whole statement, which then wrote
        nothing.
        """
        order = sorted(range(len(takes)), key=lambda i: (takes[i].lock_key, takes[i].saga_id))
        columns = [list(column) for column in zip(*(takes[index] for index in order), strict=True)]
        _, rows = yield Statement(self._sql_acquire_many, columns, ALL)
        if len(rows) != len(takes):
            raise JournalError(
                f"sagas {', '.join(repr(take.saga_id) for take in takes)}: cannot take their "
                f"leases in {self._where}: sagacity_take_lease answered {len(rows)} rows for "
                f"{len(takes)}; the function was changed outside sagacity"
            )
        granted = dict(zip(order, rows, strict=True))
        return [self._granted(granted[index], take) for index, take in enumerate(takes)]

    def set_expiry(self, lease: SagaLease, expires_at: datetime.datetime) -> Steps[bool]:
        """Move the lease's expiry; False if another worker took the saga over."""
        count, _ = yield Statement(
            self._sql_set_expiry, (expires_at, lease.saga_id, lease.token), NOTHING
        )
        return bool(count == 1)

    def _granted(self, row: tuple[Any, ...] | None, take: LeaseTake) -> Taken | SagaBusyError:
        """The lease `row` grants `take`, or the refusal naming its holder."""
        if row is None or row[0] is None:  # the function answers one row: schema altered
            raise JournalError(
                f"{self.acquiring(take.saga_id)}: sagacity_take_lease found no lease row; "
                "sagacity_lease was changed outside sagacity"
            )
        seq = int(row[3])
        held = SagaLease(
            saga_id=take.saga_id,
            owner=str(row[0]),
            token=int(str(row[1])),
            expires_at=row[2] if isinstance(row[2], datetime.datetime) else take.expires_at,
            head_seq=seq,
        )
        if held.owner != take.owner or held.expires_at != take.expires_at:
            return busy(held)
        return held, seq, str(row[4])
