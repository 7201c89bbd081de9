"""The SQLite approval store, in the same file as the SQLite journal."""

from __future__ import annotations

import datetime
import sqlite3
import threading
from pathlib import Path
from typing import Any

from sagacity._ids import require_id
from sagacity._sqlite import connect
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import JournalError
from sagacity.journal import canonical_bytes
from sagacity.journal._canonical import decode_canonical

__all__ = ["SqliteApprovalStore"]

_COLUMNS = (
    "request_id, saga_id, seq, call_id, tool_name, input, input_sha256, reason, "
    "requested_at, expires_at"
)


class SqliteApprovalStore:
    """Pending approval requests in a SQLite file; survives restarts of every process."""

    def __init__(
        self, path: str | Path, *, busy_timeout_ms: int = 30_000, create: bool = True
    ) -> None:
        self.path = str(path)
        # create=False: open an existing sagacity file only, creating and changing nothing.
        self._conn = connect(path, busy_timeout_ms=busy_timeout_ms, create=create)
        self._lock = threading.Lock()

    def save(self, request: ApprovalRequest) -> None:
        """Store a new request."""
        self._write(
            f"INSERT INTO sagacity_approval_request ({_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                request.request_id,
                request.saga_id,
                request.seq,
                request.call_id,
                request.tool_name,
                canonical_bytes(request.input).decode(),
                request.input_sha256,
                request.reason,
                request.requested_at.isoformat(),
                None if request.expires_at is None else request.expires_at.isoformat(),
            ),
        )

    def get(self, request_id: str) -> ApprovalRequest | None:
        """Return the request, or None; `InvalidIdError` for an id no request can have."""
        require_id(request_id, "request id")
        rows = self._select(
            f"SELECT {_COLUMNS} FROM sagacity_approval_request WHERE request_id = ?",
            (request_id,),
        )
        return rows[0] if rows else None

    def pending(self, saga_id: str | None = None) -> list[ApprovalRequest]:
        """Return stored requests, oldest first."""
        if saga_id is None:
            return self._select(
                f"SELECT {_COLUMNS} FROM sagacity_approval_request "
                "ORDER BY requested_at, saga_id, seq",
                (),
            )
        require_id(saga_id, "saga id")
        return self._select(
            f"SELECT {_COLUMNS} FROM sagacity_approval_request WHERE saga_id = ? "
            "ORDER BY requested_at, seq",
            (saga_id,),
        )

    def delete(self, request_id: str) -> None:
        """Consume a request."""
        require_id(request_id, "request id")
        self._write("DELETE FROM sagacity_approval_request WHERE request_id = ?", (request_id,))

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.execute(sql, params)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise JournalError(
                    f"cannot write approval requests in {self.path!r}: {error}"
                ) from error

    def _select(self, sql: str, params: tuple[Any, ...]) -> list[ApprovalRequest]:
        with self._lock:
            try:
                rows = self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as error:
                raise JournalError(
                    f"cannot read approval requests in {self.path!r}: {error}"
                ) from error
        return [_request_from_row(row) for row in rows]


def _request_from_row(row: tuple[Any, ...]) -> ApprovalRequest:
    return ApprovalRequest(
        request_id=row[0],
        saga_id=row[1],
        seq=row[2],
        call_id=row[3],
        tool_name=row[4],
        input=decode_canonical(row[5]),  # type: ignore[arg-type]  # stored from a dict
        input_sha256=row[6],
        reason=row[7],
        requested_at=datetime.datetime.fromisoformat(row[8]),
        expires_at=None if row[9] is None else datetime.datetime.fromisoformat(row[9]),
    )
