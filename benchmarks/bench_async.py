"""Async agents at full speed: concurrent async sagas against the concurrent floor.

Run with `.venv/bin/python -m benchmarks bench_async` (`make bench` runs it too). Set
`SAGACITY_BENCH_QUICK=1` for a run of small sizes that only proves the benchmark works,
and `SAGACITY_BENCH_SIZES=1,64` to choose the numbers of concurrent sagas.

For N = 1, 16 and 64, side by side in one run, on the same database:

- **journaled**: N async sagas on one event loop (`Sagacity.asaga`), each making 40
  calls of an async tool (INTENT and EXECUTED committed per call, plus the saga's lease
  and ENDED), timed after N sagas of one call have opened the loop's connections, as
  the floor's are open before its clock starts;
- **floor**: N concurrent tasks doing what a call costs at the least: two autocommit
  `INSERT`s of journal-sized rows per call, PostgreSQL on N async psycopg connections,
  SQLite on N connections each awaited through a worker thread;
- **loop lag**: the p99 of how late a 1 ms ticker on the same loop wakes, during the
  journaled run (and, for comparison, during the floor's): how long every other request
  in that process would stall. The p99 is of all the rounds' ticks together; the worst
  round's own p99 is shown beside it, with the longest pause of Python's cyclic garbage
  collector (a full collection stalls the loop for tens of milliseconds whatever runs on
  it), and the p99 again with the collector's pauses taken out of each tick: what the
  code on the loop did apart from them.

And 16 threads of sync sagas against 16 threads doing the floor's two commits per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from sagacity import CompensationContext, Sagacity, compensable
from sagacity.journal import GENESIS_HASH
from sagacity.journal._entry import seal

QUICK = os.environ.get("SAGACITY_BENCH_QUICK", "") not in ("", "0")
CALLS = 8 if QUICK else 40
SIZES = tuple(
    int(n) for n in os.environ.get("SAGACITY_BENCH_SIZES", "1,4" if QUICK else "1,16,64").split(",")
)
"""Numbers of concurrent sagas; `SAGACITY_BENCH_SIZES=16,64` runs only those."""
THREADS = 4 if QUICK else 16
ROUNDS = 1 if QUICK else 3
SINGLE_ROUNDS = 1 if QUICK else 25
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"


@compensable(by="release_inventory")
async def reserve_inventory(sku: str, qty: int) -> str:
    """Reserve stock (a tool that does nothing but return its handle)."""
    return f"res-{sku}-{qty}"


def release_inventory(ctx: CompensationContext) -> None:
    """Release stock."""


@compensable(by="release_inventory")
def reserve_inventory_sync(sku: str, qty: int) -> str:
    """Reserve stock, from sync code."""
    return f"res-{sku}-{qty}"


def journal_rows(saga_id: str, calls: int) -> list[tuple[Any, ...]]:
    """The rows a saga of `calls` journaled calls writes: what the floor inserts."""
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
            _phase(intent),
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


def _phase(intent: bool) -> Any:
    from sagacity import Phase

    return Phase.INTENT if intent else Phase.EXECUTED


class Lag(NamedTuple):
    """What the rounds of a run did to their loop, in milliseconds."""

    p99: float
    """How late a 1 ms ticker woke, 99th percentile of all the rounds' ticks."""
    worst_round: float
    """The p99 of the worst round alone. A round at N = 64 lasts a few hundred ticks,
    so its p99 is its third or fourth latest tick: one full collection of the heap
    landing in that round sets it."""
    gc: float
    """The longest pause of the cyclic garbage collector meanwhile."""
    p99_without_gc: float
    """`p99` with the collector's pauses taken out of each tick's lateness: what the
    code on the loop did, apart from the interpreter's collector."""

    @classmethod
    def of(cls, rounds: list[LoopLag]) -> Lag:
        return cls(
            _p99([lag for r in rounds for lag in r.lags]),
            max(_p99(r.lags) for r in rounds),
            max(r.longest_collection for r in rounds),
            _p99([lag for r in rounds for lag in r.lags_without_gc]),
        )


class LoopLag:
    """A 1 ms ticker on the running loop, and the garbage collector's pauses meanwhile."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.lags_without_gc: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._collecting = 0.0
        self._collected = 0.0
        """Milliseconds of collection so far."""
        self.longest_collection = 0.0

    def _collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._collecting = time.perf_counter()
        else:
            took = (time.perf_counter() - self._collecting) * 1000
            self._collected += took
            self.longest_collection = max(self.longest_collection, took)

    async def _tick(self) -> None:
        while True:
            start, collected = time.perf_counter(), self._collected
            await asyncio.sleep(0.001)
            lag = (time.perf_counter() - start - 0.001) * 1000
            self.lags.append(lag)
            self.lags_without_gc.append(max(lag - (self._collected - collected), 0.0))

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        gc.callbacks.append(self._collection)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        gc.callbacks.remove(self._collection)


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else float("nan")


async def journaled(sagacity: Sagacity, sagas: int, tag: str) -> tuple[float, LoopLag]:
    """Calls per second of `sagas` concurrent async sagas, and their loop lag."""
    (tool,) = sagacity.wrap(reserve_inventory)

    async def one(index: int, calls: int, name: str) -> None:
        async def work() -> None:
            for _ in range(calls):
                await tool("SKU-1", 2)

        await sagacity.asaga(f"{name}-{index}", work)

    # As the floor's connections are open before its clock starts, so are the journal's:
    # a saga of one call each opens this loop's connections (a service's loop lives long).
    await asyncio.gather(*(one(i, 1, f"{tag}-warm") for i in range(sagas)))
    with LoopLag() as lag:
        start = time.perf_counter()
        await asyncio.gather(*(one(i, CALLS, tag) for i in range(sagas)))
        elapsed = time.perf_counter() - start
    return sagas * CALLS / elapsed, lag


async def floor(
    insert: Callable[[int, tuple[Any, ...]], Awaitable[None]], sagas: int
) -> tuple[float, LoopLag]:
    """Calls per second of `sagas` tasks inserting a saga's rows, and their loop lag.

    One commit per row, as a journaled call makes two.
    """

    async def one(index: int) -> None:
        for row in journal_rows(f"floor-{uuid.uuid4().hex[:8]}-{index}", CALLS):
            await insert(index, row)

    with LoopLag() as lag:
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(sagas)))
        elapsed = time.perf_counter() - start
    return sagas * CALLS / elapsed, lag


# -- PostgreSQL --------------------------------------------------------------------------------


@contextlib.contextmanager
def pg_schemas(url: str) -> Iterator[Callable[[str], str]]:
    """URLs with a fresh schema each; every schema made is dropped at the end."""
    import psycopg

    made: list[str] = []

    def schema_url(prefix: str) -> str:
        name = f"bench_{prefix}_{uuid.uuid4().hex[:8]}"
        made.append(name)
        return f"{url}{'&' if '?' in url else '?'}schema={name}&pool_max_size=16"

    try:
        yield schema_url
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for name in made:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


async def pg_floor(url: str, floor_url: str, sagas: int) -> tuple[float, LoopLag]:
    import psycopg

    probe = Sagacity.from_url(floor_url)  # creates the schema: the same table and index
    table = probe.journal.database.tables.journal  # type: ignore[attr-defined]
    probe.close()
    conns = [
        await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=0)
        for _ in range(sagas)
    ]
    sql = f"INSERT INTO {table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    cursors = [conn.cursor() for conn in conns]

    async def insert(index: int, row: tuple[Any, ...]) -> None:
        await cursors[index].execute(sql, row)

    try:
        return await floor(insert, sagas)
    finally:
        for conn in conns:
            await conn.close()


def pg_main(url: str) -> None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as error:
        print(f"bench_async: PostgreSQL SKIPPED, no server at {url}: {error}")
        return
    print(f"### PostgreSQL at {url}: {CALLS} calls per saga, {rounds_text()}")
    with pg_schemas(url) as schema_url:
        for sagas in SIZES:
            compare(
                f"PostgreSQL async N={sagas}",
                sagas,
                lambda n=sagas: asyncio.run(pg_floor(url, schema_url("floor"), n)),
                lambda _: Sagacity.from_url(schema_url("saga")),
            )
        threads_report(
            "PostgreSQL",
            lambda: Sagacity.from_url(schema_url("threads")),
            pg_sync_floor(url, schema_url),
        )


def pg_sync_floor(url: str, schema_url: Callable[[str], str]) -> Callable[[], float]:
    def run() -> float:
        import psycopg

        floor_url = schema_url("tfloor")
        probe = Sagacity.from_url(floor_url)
        table = probe.journal.database.tables.journal  # type: ignore[attr-defined]
        probe.close()
        sql = f"INSERT INTO {table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"

        def thread_floor(index: int) -> None:
            with psycopg.connect(url, autocommit=True, prepare_threshold=0) as conn:
                cursor = conn.cursor()
                for n in range(3):
                    for row in journal_rows(f"tfloor-{index}-{n}", CALLS):
                        cursor.execute(sql, row)

        return threaded(thread_floor) * 3 * CALLS

    return run


# -- SQLite ------------------------------------------------------------------------------------


def sqlite_connection(path: Path) -> sqlite3.Connection:
    """A connection as sagacity opens one: WAL, synchronous=FULL, autocommit."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


async def sqlite_floor(folder: Path, sagas: int) -> tuple[float, LoopLag]:
    path = folder / f"floor-{uuid.uuid4().hex[:8]}.db"
    Sagacity.from_url(f"sqlite:///{path}").close()  # the same table and index
    conns = [sqlite_connection(path) for _ in range(sagas)]
    sql = f"INSERT INTO sagacity_journal ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

    async def insert(index: int, row: tuple[Any, ...]) -> None:
        await asyncio.to_thread(conns[index].execute, sql, row)

    try:
        return await floor(insert, sagas)
    finally:
        for conn in conns:
            conn.close()


def sqlite_main() -> None:
    print(f"### SQLite {sqlite3.sqlite_version}: {CALLS} calls per saga, {rounds_text()}")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for sagas in SIZES:
            compare(
                f"SQLite async N={sagas}",
                sagas,
                lambda n=sagas: asyncio.run(sqlite_floor(folder, n)),
                lambda round_, n=sagas: Sagacity.from_url(
                    f"sqlite:///{folder / f'saga-{n}-{round_}.db'}"
                ),
            )

        def sync_floor() -> float:
            path = folder / f"tfloor-{uuid.uuid4().hex[:8]}.db"
            Sagacity.from_url(f"sqlite:///{path}").close()
            sql = f"INSERT INTO sagacity_journal ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

            def thread_floor(index: int) -> None:
                conn = sqlite_connection(path)
                for n in range(3):
                    for row in journal_rows(f"tfloor-{index}-{n}", CALLS):
                        conn.execute(sql, row)
                conn.close()

            return threaded(thread_floor) * 3 * CALLS

        threads_report(
            "SQLite",
            lambda: Sagacity.from_url(f"sqlite:///{folder / f'threads-{uuid.uuid4().hex[:8]}.db'}"),
            sync_floor,
        )


def rounds_text() -> str:
    return (
        f"medians of {SINGLE_ROUNDS} rounds for one saga and {ROUNDS} for more, floor and "
        "journaled by turns; loop lag p99 of all rounds' ticks"
    )


def compare(
    what: str,
    sagas: int,
    run_floor: Callable[[], tuple[float, LoopLag]],
    open_sagacity: Callable[[int], Sagacity],
) -> None:
    """Floor and journaled runs by turns; report the medians and the loop lag of all rounds.

    One saga's run lasts tens of milliseconds, at the mercy of the machine's noise: it
    takes more rounds than many sagas' to give a stable median.
    """
    floors, runs, ratios, lags, floor_lags = [], [], [], [], []
    for round_ in range(SINGLE_ROUNDS if sagas == 1 else ROUNDS):
        floor_rate, floor_lag = run_floor()
        sagacity = open_sagacity(round_)
        try:
            rate, lag = asyncio.run(journaled(sagacity, sagas, f"r{round_}"))
        finally:
            sagacity.close()
        floors.append(floor_rate)
        floor_lags.append(floor_lag)
        runs.append(rate)
        lags.append(lag)
        ratios.append(floor_rate / rate)
    report(
        what,
        statistics.median(runs),
        statistics.median(floors),
        (Lag.of(lags), Lag.of(floor_lags)),
        cost=statistics.median(ratios),
    )


# -- sync threads ------------------------------------------------------------------------------


def threaded(body: Callable[[int], None]) -> float:
    """Run `body(i)` on THREADS threads at once; return THREADS / seconds (sagas of 1/s)."""
    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return THREADS / (time.perf_counter() - start)


def threads_report(
    name: str, open_sagacity: Callable[[], Sagacity], sync_floor: Callable[[], float]
) -> None:
    floors, runs = [], []
    for _ in range(ROUNDS):
        floors.append(sync_floor())
        sagacity = open_sagacity()
        (tool,) = sagacity.wrap(reserve_inventory_sync)

        def thread_sagas(index: int, sagacity: Sagacity = sagacity, tool: Any = tool) -> None:
            for n in range(3):
                sagacity.saga(f"t{index}-{n}", lambda: [tool("SKU-1", 2) for _ in range(CALLS)])

        try:
            runs.append(threaded(thread_sagas) * 3 * CALLS)
        finally:
            sagacity.close()
    report(
        f"{name} {THREADS} threads of sync sagas",
        statistics.median(runs),
        statistics.median(floors),
        None,
        cost=statistics.median(f / r for f, r in zip(floors, runs, strict=True)),
    )


def report(
    what: str,
    rate: float,
    floor_rate: float,
    lags: tuple[Lag, Lag] | None,
    *,
    cost: float | None = None,
) -> None:
    """Print a line; `lags` is the loop lag of the rounds, journaled and floor.

    `cost` is the cost per call against the floor's, when the median of per-round ratios
    was taken; else the ratio of the rates.
    """
    lag_text = (
        ""
        if lags is None
        else f", loop lag p99 {lags[0].p99:.2f} ms (floor's {lags[1].p99:.2f} ms), "
        f"worst round's p99 {lags[0].worst_round:.2f} ms (floor's {lags[1].worst_round:.2f} ms), "
        f"longest GC pause {lags[0].gc:.1f} ms (floor's {lags[1].gc:.1f} ms), "
        f"p99 without GC pauses {lags[0].p99_without_gc:.2f} ms "
        f"(floor's {lags[1].p99_without_gc:.2f} ms)"
    )
    cost = floor_rate / rate if cost is None else cost
    print(
        f"{what}: journaled {rate:,.0f} calls/s, floor {floor_rate:,.0f} calls/s "
        f"(throughput {1 / cost:.2f} x the floor's, cost per call {cost:.2f} x){lag_text}"
    )


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"## bench_async (load average {load:.2f}{', QUICK sizes' if QUICK else ''})")
    sqlite_main()
    pg_main(os.environ.get("SAGACITY_TEST_DATABASE_URL") or DEFAULT_URL)


if __name__ == "__main__":
    main()
