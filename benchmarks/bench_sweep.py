"""The reminder sweep with many requests pending: time and SQL statements per pass.

2,000 sagas wait for approval (one request each, made a second apart, each reminded
10 minutes before its expiry an hour later). The clock is then put just before the
first warning time and moved on 10 seconds per pass, so that about 10 requests are due
a reminder at each pass and the other ~1,990 are not. Reported for SQLite and PostgreSQL:
the first pass of a process (it has read nothing yet), then the mean and the largest
time and statement count of the next passes, and how many reminders they journaled;
last, a pass with nothing due (the clock not moved, after a pass that read again the
journals of the requests acted on).

Statements are counted on every connection sagacity opens (SQLite's trace callback,
psycopg's `Cursor.execute`); each pass uses a new `Escalator`, as the worker does.
PostgreSQL is `SAGACITY_TEST_DATABASE_URL` (default
postgresql://postgres@127.0.0.1:5432/test), in a schema of its own dropped afterwards.
`SAGACITY_BENCH_PENDING` and `SAGACITY_BENCH_PASSES` change the counts.

    .venv/bin/python -m benchmarks bench_sweep
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.bench_resume import drop_schema, postgres_schema
from sagacity import Escalator, Reversibility, Sagacity, compensable
from sagacity.testing import FakeClock

PENDING = int(os.environ.get("SAGACITY_BENCH_PENDING", "2000"))
PASSES = int(os.environ.get("SAGACITY_BENCH_PASSES", "10"))
START = datetime.datetime(2026, 3, 6, 17, 0, tzinfo=datetime.UTC)


class _Wires:
    @compensable(reversibility=Reversibility.IRREVERSIBLE, remind_before=600)
    def wire(self, amount: str) -> str:
        """Wire money, reminded 10 minutes before expiry."""
        return f"wire-{amount}"


class _Statements:
    """Counts SQL statements sent by every connection opened while `counting`."""

    def __init__(self) -> None:
        self.count = 0

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        real_connect = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = real_connect(*args, **kwargs)
            conn.set_trace_callback(self._sqlite)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        undo: list[Any] = []
        try:
            import psycopg

            real_execute = psycopg.Cursor.execute

            def execute(cursor: Any, *args: Any, **kwargs: Any) -> Any:
                self.count += 1
                return real_execute(cursor, *args, **kwargs)

            psycopg.Cursor.execute = execute  # type: ignore[method-assign]
            undo.append(lambda: setattr(psycopg.Cursor, "execute", real_execute))
        except ImportError:
            pass
        try:
            yield
        finally:
            sqlite3.connect = real_connect
            for each in undo:
                each()

    def _sqlite(self, statement: str) -> None:
        self.count += 1


def measure(url: str, label: str) -> None:
    """Fill `url` with `PENDING` waiting requests, then sweep it `PASSES` + 1 times."""
    statements = _Statements()
    with statements.counting():
        clock = FakeClock(START)
        sagacity = Sagacity.from_url(
            url, approval_ttl=datetime.timedelta(hours=1), clock=clock, lease_wait=0
        )
        try:
            (wire,) = sagacity.wrap(_Wires())
            for n in range(PENDING):
                sagacity.saga(f"wire-{n}", lambda n=n: wire(amount=str(n)))
                clock.advance(seconds=1)
            first_warning = START + datetime.timedelta(minutes=50)
            clock.advance((first_warning - clock()).total_seconds() - 5)
            rows = []
            for _ in range(PASSES + 1):
                before = statements.count
                began = time.perf_counter()
                acted = Escalator(sagacity).sweep()
                rows.append((time.perf_counter() - began, statements.count - before, len(acted)))
                clock.advance(seconds=10)
            # The pass after one that acted reads those journals again, once.
            Escalator(sagacity).sweep()
            Escalator(sagacity).sweep()
            before = statements.count
            began = time.perf_counter()
            Escalator(sagacity).sweep()
            idle = (time.perf_counter() - began, statements.count - before)
        finally:
            sagacity.close()
    first, rest = rows[0], rows[1:]
    print(
        f"{label:<11} first pass {first[0] * 1000:8.1f} ms {first[1]:6d} statements "
        f"{first[2]:3d} reminded"
    )
    print(
        f"{'':<11} next {len(rest)} passes: mean {statistics.fmean(r[0] for r in rest) * 1000:8.1f}"
        f" ms (max {max(r[0] for r in rest) * 1000:.1f}), "
        f"mean {statistics.fmean(r[1] for r in rest):7.1f} statements "
        f"(max {max(r[1] for r in rest)}), {sum(r[2] for r in rest)} reminded"
    )
    print(f"{'':<11} a pass with nothing due: {idle[0] * 1000:8.1f} ms {idle[1]:6.0f} statements")


def main() -> None:
    print(f"\n== sweep: {PENDING} pending requests, ~10 due a reminder per pass")
    with tempfile.TemporaryDirectory() as folder:
        measure(f"sqlite:///{Path(folder) / 'sweep.db'}", "SQLite")
    found = postgres_schema("sweep")
    if found is not None:
        base, url = found
        try:
            measure(url, "PostgreSQL")
        finally:
            drop_schema(base, url)


if __name__ == "__main__":
    main()
