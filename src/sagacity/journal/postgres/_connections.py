"""A PostgreSQL journal's async connections, kept between the event loops that use them.

An idle connection, reused LIFO and checked before use like the sync pool's, serves
whichever loop asks next (see `_async.py`); closed from any thread.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from sagacity.journal.postgres._database import server_spoke

__all__ = ["AsyncLease", "IdleConnections"]

_OK = psycopg.pq.ConnStatus.OK
_IDLE = psycopg.pq.TransactionStatus.IDLE


class AsyncLease:
    """One async connection out of `IdleConnections`, and what is prepared on it."""

    __slots__ = ("conn", "cursor", "prepared")

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.cursor = conn.cursor()
        self.prepared: set[bytes] = set()
        """The statements prepared on the connection (see `arun_steps`)."""


class IdleConnections:
    """A journal's idle async connections, shared by its loops; closed from any thread."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._idle: list[AsyncLease] = []
        self._closed = False

    def take(self) -> AsyncLease | None:
        """An idle connection the server has not ended, or None."""
        while True:
            with self._guard:
                if not self._idle:
                    return None
                lease = self._idle.pop()
            if not server_spoke(lease.conn):
                return lease
            lease.conn.pgconn.finish()

    def give(self, lease: AsyncLease) -> None:
        """Keep a connection for the next taker, if it is healthy and idle; else end it."""
        pgconn = lease.conn.pgconn
        if pgconn.status == _OK and pgconn.transaction_status == _IDLE:
            with self._guard:
                if not self._closed:
                    self._idle.append(lease)
                    return
        pgconn.finish()  # what `AsyncConnection.close` does, without a loop

    def close(self) -> None:
        """End the idle connections; those in use end when they are given back."""
        with self._guard:
            self._closed = True
            idle, self._idle = self._idle, []
        for lease in idle:
            lease.conn.pgconn.finish()
