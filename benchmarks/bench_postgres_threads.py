"""Many sync workers on one PostgreSQL: threads of sync sagas against the same threads' floor.

Run with `.venv/bin/python -m benchmarks bench_postgres_threads` (`make bench` runs it
too). The server is `SAGACITY_TEST_DATABASE_URL` (default
`postgresql://postgres@127.0.0.1:5432/test`); every table is made in schemas of its own,
dropped at the end. `SAGACITY_BENCH_THREADS=1,4,16,64` (the default) chooses the numbers
of threads, `SAGACITY_BENCH_ROUNDS` (5) the rounds, `SAGACITY_BENCH_QUICK=1` runs small
sizes that only prove it works.

Side by side in one run, on the same server, by turns (floor, journaled, journaled, floor,
…: which goes first alternates by round), the ratio of each row being the median of the
per-round ratios:

1. **T threads of sync sagas** (T = 1, 4, 16, 64): each thread runs `SAGAS` sagas of
   `CALLS` calls of a wrapped sync tool through one `Sagacity` opened on the URL with its
   default pool settings (INTENT and EXECUTED committed per call, plus each saga's lease,
   its ENDED and its release); against **the floor**: T threads, each on a connection of
   its own, doing two prepared autocommit `INSERT`s of the same journal rows per call.
   Throughput is calls per second, both ways.
2. **8 writers on one saga against 1 writer**: threads appending to one saga through one
   `PostgresJournal`, every append fenced by the saga's lease (`fence=`), in windows of
   `WINDOW` seconds; appends per second.
3. **One saga, one thread**: a wrapped tool's call in a saga, and two fenced
   `journal.append`s, against the floor's two commits, by turns in short batches: the
   hot path of a single saga (median of the per-batch ratios).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from sagacity import CompensationContext, Phase, Sagacity, compensable
from sagacity.journal import GENESIS_HASH
from sagacity.journal._entry import seal
from sagacity.journal.postgres import PostgresJournal

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
QUICK = os.environ.get("SAGACITY_BENCH_QUICK", "") not in ("", "0")
THREADS = tuple(
    int(n)
    for n in os.environ.get("SAGACITY_BENCH_THREADS", "1,4" if QUICK else "1,4,16,64").split(",")
)
ROUNDS = int(os.environ.get("SAGACITY_BENCH_ROUNDS", "1" if QUICK else "5"))
SAGAS = 2 if QUICK else 3
CALLS = 8 if QUICK else 40
WINDOW = 0.2 if QUICK else 1.0
HOT_BATCHES = 4 if QUICK else 40
HOT_CALLS = 10 if QUICK else 25
COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"


@compensable(by="release_inventory")
def reserve_inventory(sku: str, qty: int) -> str:
    """Reserve stock (a tool that does nothing but return its handle)."""
    return f"res-{sku}-{qty}"


def release_inventory(ctx: CompensationContext) -> None:
    """Release stock."""


def journal_rows(saga_id: str, calls: int) -> list[tuple[Any, ...]]:
    """The rows `calls` journaled calls of a saga write: what the floor inserts."""
    rows: list[tuple[Any, ...]] = []
    prev = GENESIS_HASH
    for seq in range(1, 2 * calls + 1):
        intent = seq % 2 == 1
        payload: Any = (
            {"input": {"sku": "SKU-1", "qty": 2}, "reversibility": "COMPENSATABLE"}
            if intent
            else {"result": "res-SKU-1-2"}
        )
        entry, payload_bytes = seal(
            saga_id,
            seq,
            Phase.INTENT if intent else Phase.EXECUTED,
            tool_name="reserve_inventory",
            call_id=f"reserve_inventory#{(seq + 1) // 2}",
            ref_seq=None if intent else seq - 1,
            payload=payload,
            prev_hash=prev,
        )
        prev = entry.hash
        rows.append(
            (
                entry.saga_id,
                entry.seq,
                entry.phase.value,
                entry.tool_name,
                entry.call_id,
                entry.ref_seq,
                payload_bytes.decode(),
                entry.recorded_at,
                entry.prev_hash,
                entry.hash,
            )
        )
    return rows


@contextlib.contextmanager
def schemas(url: str) -> Iterator[Callable[[str], str]]:
    """URLs naming a fresh schema each (no pool options: the defaults); all dropped at the end."""
    made: list[str] = []

    def schema_url(prefix: str) -> str:
        name = f"bench_{prefix}_{uuid.uuid4().hex[:8]}"
        made.append(name)
        return f"{url}{'&' if '?' in url else '?'}schema={name}"

    try:
        yield schema_url
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for name in made:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def run_threads(threads: int, body: Callable[[int], None]) -> float:
    """Run `body(i)` on `threads` threads started together; return the seconds it took."""
    ready = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        ready.wait()
        try:
            body(index)
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    ready.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    took = time.perf_counter() - started
    if errors:
        raise errors[0]
    return took


# -- 1. threads of sync sagas -----------------------------------------------------------------


def threads_of_sagas(url: str, schema_url: Callable[[str], str]) -> None:
    floor_url = schema_url("tfloor")
    probe = PostgresJournal(floor_url)  # the journal's own table, keys and triggers
    table = probe.database.tables.journal
    probe.close()
    sql = f"INSERT INTO {table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    sagacity = Sagacity.from_url(schema_url("threads"))
    (tool,) = sagacity.wrap(reserve_inventory)
    print(
        f"### {SAGAS} sync sagas of {CALLS} calls per thread, {ROUNDS} rounds by turns; "
        f"pool_max_size {sagacity.journal.database.settings.pool_max_size} (default)"  # type: ignore[attr-defined]
    )
    try:
        for threads in THREADS:
            rows = {
                (i, n): journal_rows(f"floor-{threads}-{i}-{n}-{{}}", CALLS)
                for i in range(threads)
                for n in range(SAGAS)
            }
            conns = [
                psycopg.connect(url, autocommit=True, prepare_threshold=0) for _ in range(threads)
            ]
            ratios, floors, rates = [], [], []
            try:
                for round_ in range(ROUNDS):

                    def floor(
                        index: int, round_: int = round_, conns: Any = conns, rows: Any = rows
                    ) -> None:
                        cursor = conns[index].cursor()
                        for n in range(SAGAS):
                            for row in rows[index, n]:
                                cursor.execute(sql, (row[0].format(round_), *row[1:]))

                    def journaled(index: int, round_: int = round_, threads: int = threads) -> None:
                        for n in range(SAGAS):
                            sagacity.saga(
                                f"t{threads}-{round_}-{index}-{n}",
                                lambda: [tool("SKU-1", 2) for _ in range(CALLS)],
                            )

                    calls = threads * SAGAS * CALLS
                    # Which goes first alternates: the second of a pair ran measurably
                    # faster here, whichever it was.
                    if round_ % 2:
                        rate = calls / run_threads(threads, journaled)
                        floor_rate = calls / run_threads(threads, floor)
                    else:
                        floor_rate = calls / run_threads(threads, floor)
                        rate = calls / run_threads(threads, journaled)
                    floors.append(floor_rate)
                    rates.append(rate)
                    ratios.append(rate / floor_rate)
            finally:
                for conn in conns:
                    conn.close()
            print(
                f"{threads:>2} threads of sync sagas: journaled {statistics.median(rates):,.0f} "
                f"calls/s, floor {statistics.median(floors):,.0f} calls/s, throughput "
                f"{statistics.median(ratios):.2f} x the floor's "
                f"(rounds {min(ratios):.2f}-{max(ratios):.2f})"
            )
        stats = sagacity.journal.group_stats  # type: ignore[attr-defined]
        print(
            f"   group commit: {stats.commits:,} commits, {stats.batched:,} appends in batches, "
            f"largest {stats.largest}"
        )
    finally:
        sagacity.close()


# -- 2. 8 writers on one saga -------------------------------------------------------------------


def writers_on_one_saga(schema_url: Callable[[str], str]) -> None:
    journal = PostgresJournal(schema_url("writers"))
    now = datetime.datetime.now(datetime.UTC)
    rates: dict[int, list[float]] = {1: [], 8: []}
    try:
        for window in range(ROUNDS):
            for writers in (1, 8):
                saga = f"w{writers}-{window}"
                lease = journal.acquire_lease(
                    saga, "bench", now=now, expires_at=now + datetime.timedelta(hours=1)
                )
                journal.append(saga, Phase.INTENT, payload={"n": -1}, fence=lease)
                stop = threading.Event()
                counts = [0] * writers

                def write(
                    index: int,
                    saga: str = saga,
                    lease: Any = lease,
                    stop: threading.Event = stop,
                    counts: list[int] = counts,
                ) -> None:
                    n = 0
                    while not stop.is_set():
                        journal.append(saga, Phase.INTENT, payload={"n": n}, fence=lease)
                        n += 1
                    counts[index] = n

                timer = threading.Timer(WINDOW, stop.set)
                timer.start()
                took = run_threads(writers, write)
                rates[writers].append(sum(counts) / took)
                journal.release_lease(lease)
        ratios = [eight / one for one, eight in zip(rates[1], rates[8], strict=True)]
        stats = journal.stats
        print(
            f"### One saga, every append fenced by its lease, {ROUNDS} windows of {WINDOW} s by "
            f"turns: 1 writer {statistics.median(rates[1]):,.0f} appends/s, 8 writers "
            f"{statistics.median(rates[8]):,.0f} appends/s: {statistics.median(ratios):.2f} x "
            f"(windows {min(ratios):.2f}-{max(ratios):.2f}); {stats.retries} retries, "
            f"{stats.locked} locked appends of {stats.appends}"
        )
    finally:
        journal.close()


# -- 3. one saga, one thread ------------------------------------------------------------------


def hot_path(url: str, schema_url: Callable[[str], str]) -> None:
    sagacity = Sagacity.from_url(schema_url("hot"))
    journal: PostgresJournal = sagacity.journal  # type: ignore[assignment]
    (tool,) = sagacity.wrap(reserve_inventory)
    table = journal.database.tables.journal
    sql = f"INSERT INTO {table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    conn = psycopg.connect(url, autocommit=True, prepare_threshold=0)
    cursor = conn.cursor()
    now = datetime.datetime.now(datetime.UTC)
    lease = journal.acquire_lease(
        "hot-appends", "bench", now=now, expires_at=now + datetime.timedelta(hours=1)
    )
    times: dict[str, list[float]] = {"floor": [], "tool": [], "appends": []}
    ratios: dict[str, list[float]] = {"tool": [], "appends": []}
    counter = iter(range(10**9))

    def floor() -> float:
        rows = journal_rows(f"floor-{next(counter)}", HOT_CALLS)
        started = time.perf_counter()
        for row in rows:
            cursor.execute(sql, row)
        return (time.perf_counter() - started) / HOT_CALLS

    def tool_calls() -> float:
        started = time.perf_counter()
        sagacity.saga(f"hot-{next(counter)}", lambda: [tool("SKU-1", 2) for _ in range(HOT_CALLS)])
        return (time.perf_counter() - started) / HOT_CALLS

    def appends() -> float:
        started = time.perf_counter()
        for n in range(HOT_CALLS):
            journal.append(
                "hot-appends",
                Phase.INTENT,
                tool_name="reserve_inventory",
                payload={"n": n},
                fence=lease,
            )
            journal.append(
                "hot-appends",
                Phase.EXECUTED,
                tool_name="reserve_inventory",
                payload={"n": n},
                fence=lease,
            )
        return (time.perf_counter() - started) / HOT_CALLS

    try:
        for _ in range(3):  # warm up: connections, prepared statements
            floor(), tool_calls(), appends()
        for batch in range(HOT_BATCHES):
            order = [("tool", tool_calls), ("appends", appends)]
            if batch % 2:
                order.reverse()
            before = floor()
            measured = {name: run() for name, run in order}
            after = floor()
            base = (before + after) / 2
            times["floor"].append(base)
            for name, value in measured.items():
                times[name].append(value)
                ratios[name].append(value / base)
        print(
            f"### One saga, one thread: {HOT_BATCHES} batches of {HOT_CALLS} calls by turns; "
            f"floor (2 x INSERT + COMMIT) {statistics.median(times['floor']) * 1e6:,.0f} us a call"
        )
        for name, what in (
            ("tool", "wrapped tool in a saga (saga's lease and ENDED spread over its calls)"),
            ("appends", "journal.append x 2, fenced by a lease"),
        ):
            values = sorted(ratios[name])
            quartiles = statistics.quantiles(values, n=4)
            print(
                f"{what}: {statistics.median(times[name]) * 1e6:,.0f} us a call, "
                f"{statistics.median(values):.2f} x the floor (quartiles "
                f"{quartiles[0]:.2f}-{quartiles[2]:.2f})"
            )
    finally:
        conn.close()
        sagacity.close()


def main() -> None:
    url = os.environ.get("SAGACITY_TEST_DATABASE_URL") or DEFAULT_URL
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            version = conn.execute("SHOW server_version").fetchone()
    except psycopg.Error as error:
        print(f"bench_postgres_threads: SKIPPED, no PostgreSQL at {url}: {error}")
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"## bench_postgres_threads: PostgreSQL {version[0] if version else '?'}, "
        f"load average {load:.2f}{', QUICK sizes' if QUICK else ''}"
    )
    with schemas(url) as schema_url:
        threads_of_sagas(url, schema_url)
        writers_on_one_saga(schema_url)
        hot_path(url, schema_url)


if __name__ == "__main__":
    main()
