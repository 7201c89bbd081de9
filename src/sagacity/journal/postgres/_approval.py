"""The PostgreSQL approval store, in the same database (and pool) as the journal."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from sagacity._ids import require_id
from sagacity.approval import ApprovalRequest
from sagacity.errors import JournalError
from sagacity.journal._canonical import canonical_bytes, decode_canonical
from sagacity.journal.postgres._database import PostgresDatabase

__all__ = ["PostgresApprovalStore"]

T = TypeVar("T")

_COLUMNS = (
    "request_id, saga_id, seq, call_id, tool_name, input, input_sha256, reason, "
    "requested_at, expires_at"
)


class PostgresApprovalStore:
    """Pending approval requests in PostgreSQL: any worker may approve or resume them.

    Args:
        database: A `postgresql://` URL, or the `PostgresDatabase` of a journal.
    """

    def __init__(self, database: str | PostgresDatabase) -> None:
        if isinstance(database, str):
            self._db = PostgresDatabase(database)
        else:
            database.acquire()
            self._db = database
        self._closed = False
        table = self._db.tables.approval
        self._sql_insert = (
            f"INSERT INTO {table} ({_COLUMNS}) VALUES "
            "(%s, %s, %s::bigint, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (request_id) DO NOTHING"
        )
        self._sql_get = f"SELECT {_COLUMNS} FROM {table} WHERE request_id = %s"
        self._sql_all = f"SELECT {_COLUMNS} FROM {table} ORDER BY requested_at, saga_id, seq"
        self._sql_saga = (
            f"SELECT {_COLUMNS} FROM {table} WHERE saga_id = %s ORDER BY requested_at, seq"
        )
        self._sql_delete = f"DELETE FROM {table} WHERE request_id = %s"

    @property
    def database(self) -> PostgresDatabase:
        """The database and pool this store uses."""
        return self._db

    def save(self, request: ApprovalRequest) -> None:
        """Store a new request.

        Raises:
            JournalError: It could not be stored, or another request has its id.
        """
        row = (
            request.request_id,
            request.saga_id,
            request.seq,
            request.call_id,
            request.tool_name,
            canonical_bytes(request.input).decode(),
            request.input_sha256,
            request.reason,
            _aware(request.requested_at),
            None if request.expires_at is None else _aware(request.expires_at),
        )

        def insert(conn: psycopg.Connection[Any]) -> ApprovalRequest | None:
            if conn.execute(self._sql_insert, row).rowcount == 1:
                return None
            return self._get(conn, request.request_id)

        where = f"saga {request.saga_id!r}: cannot store approval request {request.request_id}"
        existing = self._run(lambda: where, insert)
        # After a lost connection the first attempt may have stored it: that is no clash.
        if existing is not None and _stored_form(existing) != _stored_form(request):
            raise JournalError(
                f"{where}: another request with that id is stored (saga "
                f"{existing.saga_id!r}, tool {existing.tool_name!r}); request ids must be unique"
            )

    def get(self, request_id: str) -> ApprovalRequest | None:
        """Return the request, or None; `InvalidIdError` for an id no request can have."""
        require_id(request_id, "request id")
        return self._run(
            lambda: f"cannot read approval request {request_id}",
            lambda conn: self._get(conn, request_id),
        )

    def pending(self, saga_id: str | None = None) -> list[ApprovalRequest]:
        """Return stored requests, oldest first; `InvalidIdError` for a saga id no saga has."""
        if saga_id is None:
            rows = self._run(
                lambda: "cannot list pending approval requests",
                lambda conn: conn.execute(self._sql_all).fetchall(),
            )
        else:
            require_id(saga_id, "saga id")
            rows = self._run(
                lambda: f"saga {saga_id!r}: cannot list its pending approval requests",
                lambda conn: conn.execute(self._sql_saga, (saga_id,)).fetchall(),
            )
        return [_request_from_row(row) for row in rows]

    def delete(self, request_id: str) -> None:
        """Consume a request; deleting one that is gone is not an error."""
        require_id(request_id, "request id")
        self._run(
            lambda: f"cannot delete approval request {request_id}",
            lambda conn: conn.execute(self._sql_delete, (request_id,)).rowcount,
        )

    def close(self) -> None:
        """Release this store's hold on the connection pool; closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._db.release()

    def _get(self, conn: psycopg.Connection[Any], request_id: str) -> ApprovalRequest | None:
        row = conn.execute(self._sql_get, (request_id,)).fetchone()
        return None if row is None else _request_from_row(row)

    def _run(
        self, describe: Callable[[], str], operation: Callable[[psycopg.Connection[Any]], T]
    ) -> T:
        if self._closed:
            raise JournalError(f"{describe()}: the approval store is closed")
        return self._db.run(lambda: f"{describe()} in {self._db.settings.where}", operation)


def _aware(moment: datetime.datetime) -> datetime.datetime:
    """Naive times are taken as UTC, as the rest of sagacity writes them."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def _stored_form(request: ApprovalRequest) -> tuple[Any, ...]:
    return (
        request.saga_id,
        request.seq,
        request.call_id,
        request.tool_name,
        request.input_sha256,
    )


def _utc(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(datetime.UTC)


def _request_from_row(row: tuple[Any, ...]) -> ApprovalRequest:
    return ApprovalRequest(
        request_id=row[0],
        saga_id=row[1],
        seq=row[2],
        call_id=row[3],
        tool_name=row[4],
        input=decode_canonical(row[5]),  # type: ignore[arg-type]  # an object was stored
        input_sha256=row[6],
        reason=row[7],
        requested_at=_utc(row[8]),
        expires_at=None if row[9] is None else _utc(row[9]),
    )
