"""PostgreSQL: sagacity against the physical floor, its peers, under contention, and audits.

Run with `.venv/bin/python -m benchmarks bench_postgres`. The server is
`SAGACITY_TEST_DATABASE_URL` (default `postgresql://postgres@127.0.0.1:5432/test`); every
table is made in schemas of its own, dropped at the end.

1. One journaled tool call (INTENT + EXECUTED, both committed) against the floor: two
   prepared `INSERT`s of the same rows, each its own commit, on the same server through
   the same driver (one reused cursor: the cheapest way it offers). The floor and
   sagacity take turns in many short batches, so that load coming and going on the
   machine touches them alike; ratios are medians of per-batch ratios. DBOS steps and
   LangGraph Postgres-checkpointed steps (the `bench` extra; skipped with a note when
   not installed) run whole workflows between two floor batches.
2. Appends per second: 1 writer, 8 writers on one saga (threads sharing a journal,
   threads with a journal each, processes), 8 writers on 8 sagas; and two other designs
   on the same server in the same windows (a bare retry on SQLSTATE 23505, a per-saga
   head row locked by `UPDATE … RETURNING`).
3. Verification and JSON Lines export of a 100,000-entry journal read from PostgreSQL,
   with the peak memory Python allocated.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import io
import itertools
import multiprocessing
import os
import statistics
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import psycopg

from sagacity import CompensationContext, Phase, Sagacity, compensable
from sagacity.audit import export_jsonl, verify
from sagacity.journal import GENESIS_HASH, JsonValue
from sagacity.journal._entry import seal
from sagacity.journal.postgres import PostgresJournal

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
BATCHES = 60
CALLS_PER_BATCH = 25
PEER_ROUNDS = 7
PEER_STEPS = 100
WINDOW_SECONDS = 1.0
WINDOWS = 4
AUDIT_SAGAS, AUDIT_ENTRIES_PER_SAGA = 1_000, 100

COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"

Conn = psycopg.Connection[tuple[Any, ...]]


@compensable(by="release_inventory")
def reserve_inventory(sku: str, qty: int) -> str:
    """Reserve stock (a tool that does nothing but return its handle)."""
    return f"res-{sku}-{qty}"


def release_inventory(ctx: CompensationContext) -> None:
    """Release stock."""


def main() -> None:
    url = os.environ.get("SAGACITY_TEST_DATABASE_URL") or DEFAULT_URL
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            version = conn.execute("SHOW server_version").fetchone()
    except psycopg.Error as error:
        print(f"bench_postgres: SKIPPED, no PostgreSQL at {url}: {error}")
        return
    print(f"## PostgreSQL {version[0] if version else '?'} at {url}, psycopg {psycopg.__version__}")
    with Schemas(url) as schemas:
        per_call(schemas)
        throughput(schemas)
        audit(schemas)


class Schemas:
    """Hands out fresh schema URLs and drops every schema it made on exit."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.tag = uuid.uuid4().hex[:8]
        self.made: list[str] = []
        self.opened: list[Conn] = []
        self.admin: Conn = psycopg.connect(url, autocommit=True)

    def __enter__(self) -> Schemas:
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self.opened:
            conn.close()
        for name in self.made:
            self.admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        self.admin.close()

    def new(self, purpose: str) -> tuple[str, str]:
        """Return (schema name, sagacity URL naming it)."""
        name = f"sagacity_bench_{self.tag}_{purpose}"
        self.made.append(name)
        separator = "&" if "?" in self.url else "?"
        return name, f"{self.url}{separator}schema={name}&pool_max_size=16"

    def connect(self) -> Conn:
        conn = psycopg.connect(self.url, autocommit=True, prepare_threshold=0)
        self.opened.append(conn)
        return conn


# -- 1. one journaled tool call ------------------------------------------------------------


def per_call(schemas: Schemas) -> None:
    """Time one journaled tool call against the floor, and the peers' steps likewise.

    sagacity's contenders and the floor take turns in many short batches, so that load
    that comes and goes on the machine touches them alike; each ratio is the median of
    the per-batch ratios. A peer runs whole workflows of `PEER_STEPS` steps, each
    between two floor batches of as many calls, and is divided by their mean.
    """
    floor_schema, floor_url = schemas.new("floor")
    PostgresJournal(floor_url).close()  # the same table, keys and triggers as the journal
    floor_cursor = schemas.connect().cursor()  # one cursor, prepared statement: the cheapest
    insert = (
        f'INSERT INTO "{floor_schema}".sagacity_journal ({COLUMNS}) '
        "VALUES (%s, %s::bigint, %s, %s, %s, %s::bigint, %s, %s, %s, %s)"
    ).encode()
    batches = itertools.count()

    def floor(calls: int) -> float:
        rows = sealed_calls(f"floor-{next(batches)}", calls)
        started = time.perf_counter()
        for row in rows:
            floor_cursor.execute(insert, row)
        return (time.perf_counter() - started) / calls

    journal = PostgresJournal(schemas.new("journal")[1])

    def journal_pair(calls: int, *, leased: bool = False) -> float:
        saga = f"calls-{next(batches)}"
        fence = None
        if leased:  # as a saga does: its lease first, every append fenced by it
            now = datetime.datetime.now(datetime.UTC)
            fence = journal.acquire_lease(
                saga, "bench", now=now, expires_at=now + datetime.timedelta(hours=1)
            )
        journal.entries(saga)  # a saga reads its history when it opens
        started = time.perf_counter()
        for n in range(calls):
            intent = journal.append(
                saga,
                Phase.INTENT,
                tool_name="reserve_inventory",
                call_id=f"reserve_inventory#{n + 1}",
                payload={"input": {"sku": "SKU-1", "qty": n}, "reversibility": "COMPENSATABLE"},
                fence=fence,
            )
            journal.append(
                saga,
                Phase.EXECUTED,
                tool_name="reserve_inventory",
                call_id=intent.call_id,
                ref_seq=intent.seq,
                payload={"result": f"res-SKU-1-{n}"},
                fence=fence,
            )
        return (time.perf_counter() - started) / calls

    sagacity = Sagacity.from_url(schemas.new("tools")[1])
    (tool,) = sagacity.wrap(reserve_inventory)

    def tool_call(calls: int) -> float:
        took: list[float] = []

        def work() -> None:
            started = time.perf_counter()
            for n in range(calls):
                tool(sku="SKU-1", qty=n)
            took.append(time.perf_counter() - started)

        sagacity.saga(f"tools-{next(batches)}", work)
        return took[0] / calls

    ours: dict[str, Callable[[int], float]] = {
        "floor: 2 x (INSERT + COMMIT)": floor,
        "sagacity: journal.append x 2": journal_pair,
        "sagacity: the same, under a lease": functools.partial(journal_pair, leased=True),
        "sagacity: wrapped tool in a saga": tool_call,
    }
    for contender in ours.values():
        contender(CALLS_PER_BATCH)  # warm up: prepared statements, caches, connections
    samples: dict[str, list[float]] = {name: [] for name in ours}
    names = list(ours)
    for batch in range(BATCHES):
        for name in names[batch % len(names) :] + names[: batch % len(names)]:
            samples[name].append(ours[name](CALLS_PER_BATCH))

    print()
    print(
        f"### One journaled tool call (INTENT + EXECUTED): {BATCHES} batches of "
        f"{CALLS_PER_BATCH} calls each, taking turns"
    )
    print(f"{'':36} {'median per call':>16} {'ratio to floor':>15}")
    floors = samples[names[0]]
    for name in names:
        ratios = [value / base for value, base in zip(samples[name], floors, strict=True)]
        print(
            f"{name:36} {statistics.median(samples[name]) * 1e6:>13.0f} us "
            f"{statistics.median(ratios):>14.2f}x"
        )

    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        peers = {
            "DBOS: @DBOS.step in a workflow": stack.enter_context(dbos_contender(schemas, notes)),
            "LangGraph: PostgresSaver step": stack.enter_context(
                langgraph_contender(schemas, notes)
            ),
        }
        for name, peer in peers.items():
            if peer is None:
                continue
            peer(PEER_STEPS)  # warm up
            ratios, per_step = [], []
            for _ in range(PEER_ROUNDS):
                before = floor(PEER_STEPS)
                step = peer(PEER_STEPS)
                after = floor(PEER_STEPS)
                per_step.append(step)
                ratios.append(step / ((before + after) / 2))
            print(
                f"{name:36} {statistics.median(per_step) * 1e6:>13.0f} us "
                f"{statistics.median(ratios):>14.2f}x   ({PEER_ROUNDS} workflows of "
                f"{PEER_STEPS} steps)"
            )
    for note in notes:
        print(note)
    journal.close()
    sagacity.close()


def sealed_calls(saga: str, calls: int) -> list[tuple[Any, ...]]:
    """The rows a saga of `calls` tool calls writes: INTENT and EXECUTED for each."""
    rows: list[tuple[Any, ...]] = []
    prev = GENESIS_HASH
    for n in range(calls):
        pair: list[tuple[Phase, JsonValue]] = [
            (Phase.INTENT, {"input": {"sku": "SKU-1", "qty": n}, "reversibility": "COMPENSATABLE"}),
            (Phase.EXECUTED, {"result": f"res-SKU-1-{n}"}),
        ]
        for phase, payload in pair:
            seq = len(rows) + 1
            entry, payload_bytes = seal(
                saga,
                seq,
                phase,
                tool_name="reserve_inventory",
                call_id=f"reserve_inventory#{n + 1}",
                ref_seq=None if phase is Phase.INTENT else seq - 1,
                payload=payload,
                prev_hash=prev,
            )
            prev = entry.hash
            rows.append(row_of(entry, payload_bytes))
    return rows


def row_of(entry: Any, payload_bytes: bytes) -> tuple[Any, ...]:
    return (
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


@contextlib.contextmanager
def dbos_contender(schemas: Schemas, notes: list[str]) -> Iterator[Callable[[int], float] | None]:
    try:
        from dbos import DBOS
    except ImportError:
        notes.append("DBOS: not installed, skipped (pip install 'sagacity[bench]')")
        yield None
        return
    schema, _ = schemas.new("dbos")
    DBOS(
        config={
            "name": "sagacity-bench",
            "system_database_url": schemas.url,
            "dbos_system_schema": schema,
            "log_level": "WARNING",
            "console_log_level": "WARNING",
        }
    )

    @DBOS.step()
    def reserve(sku: str, qty: int) -> str:
        return f"res-{sku}-{qty}"

    @DBOS.workflow()
    def flow(calls: int) -> None:
        for n in range(calls):
            reserve("SKU-1", n)

    DBOS.launch()

    def step(steps: int) -> float:
        started = time.perf_counter()
        flow(steps)
        return (time.perf_counter() - started) / steps

    try:
        yield step
    finally:
        DBOS.destroy()


class _GraphState(TypedDict):
    n: int
    limit: int


@contextlib.contextmanager
def langgraph_contender(
    schemas: Schemas, notes: list[str]
) -> Iterator[Callable[[int], float] | None]:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph import END, START, StateGraph
        from psycopg.rows import dict_row
    except ImportError:
        notes.append(
            "LangGraph: langgraph-checkpoint-postgres not installed, skipped "
            "(pip install 'sagacity[bench]')"
        )
        yield None
        return
    schema, _ = schemas.new("langgraph")
    schemas.admin.execute(f'CREATE SCHEMA "{schema}"')
    conn = psycopg.connect(
        schemas.url,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={schema}",
    )
    saver = PostgresSaver(conn)
    saver.setup()

    def step_node(state: _GraphState) -> dict[str, int]:
        return {"n": state["n"] + 1}

    graph = StateGraph(_GraphState)
    graph.add_node("step", step_node)
    graph.add_edge(START, "step")
    graph.add_conditional_edges(
        "step", lambda state: "step" if state["n"] < state["limit"] else END
    )
    app = graph.compile(checkpointer=saver)

    threads = itertools.count()

    def step(steps: int) -> float:
        config: Any = {
            "configurable": {"thread_id": f"t{next(threads)}"},
            "recursion_limit": 10_000,
        }
        started = time.perf_counter()
        app.invoke({"n": 0, "limit": steps}, config, durability="sync")
        return (time.perf_counter() - started) / steps

    try:
        yield step
    finally:
        conn.close()


# -- 2. contention ---------------------------------------------------------------------------


class Window(TypedDict):
    appends: int
    seconds: float
    latencies: list[float]
    retries: int


def run_writers(
    writers: int, append: Callable[[int, int], int], seconds: float = WINDOW_SECONDS
) -> Window:
    """Let `writers` threads call `append(writer, n) -> retries` for `seconds`; count."""
    stop = threading.Event()
    barrier = threading.Barrier(writers + 1)
    latencies: list[list[float]] = [[] for _ in range(writers)]
    retries = [0] * writers

    def run(writer: int) -> None:
        barrier.wait()
        n = 0
        while not stop.is_set():
            started = time.perf_counter()
            retries[writer] += append(writer, n)
            latencies[writer].append(time.perf_counter() - started)
            n += 1

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - started
    flat = [x for per in latencies for x in per]
    return {"appends": len(flat), "seconds": took, "latencies": flat, "retries": sum(retries)}


def summary(windows: list[Window]) -> tuple[float, float, float, float]:
    """Median appends/s over the windows, p50 and p99 latency (ms), retries per append."""
    rates = [w["appends"] / w["seconds"] for w in windows]
    latencies = sorted(x for w in windows for x in w["latencies"])
    appends = sum(w["appends"] for w in windows)
    p50 = latencies[len(latencies) // 2] * 1e3
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3
    return statistics.median(rates), p50, p99, sum(w["retries"] for w in windows) / appends


Config = tuple[int, Callable[[int], Callable[[int, int], int]], list[PostgresJournal]]


def sagacity_configs(schemas: Schemas) -> dict[str, Config]:
    """The journal's own configurations: writers are threads; each window uses new sagas."""
    _, url = schemas.new("contention")
    shared = PostgresJournal(url)
    own = [PostgresJournal(url) for _ in range(8)]

    def appender(
        journal_of: Callable[[int], PostgresJournal], saga_of: Callable[[int], str]
    ) -> Callable[[int, int], int]:
        def append(writer: int, n: int) -> int:
            journal_of(writer).append(saga_of(writer), Phase.INTENT, payload={"n": n})
            return 0  # retries are read from the journals' stats

        return append

    return {
        "1 writer, 1 saga": (
            1,
            lambda w: appender(lambda _: shared, lambda _: f"one-{w}"),
            [shared],
        ),
        "8 writers, 1 saga, one journal": (
            8,
            lambda w: appender(lambda _: shared, lambda _: f"shared-{w}"),
            [shared],
        ),
        "8 writers, 1 saga, a journal each": (
            8,
            lambda w: appender(lambda writer: own[writer], lambda _: f"own-{w}"),
            own,
        ),
        "8 writers, 8 sagas, one journal": (
            8,
            lambda w: appender(lambda _: shared, lambda writer: f"many-{w}-{writer}"),
            [shared],
        ),
    }


def throughput(schemas: Schemas) -> None:
    ours = sagacity_configs(schemas)
    others = design_configs(schemas)
    configs = {**ours, **others}
    windows: dict[str, list[Window]] = {name: [] for name in configs}
    with contextlib.redirect_stderr(io.StringIO()):
        for window in range(WINDOWS):
            for name, (writers, make, journals) in configs.items():
                before = sum(journal.stats.retries for journal in journals)
                measured = run_writers(writers, make(window))
                if journals:
                    measured["retries"] = sum(j.stats.retries for j in journals) - before
                windows[name].append(measured)
    print()
    print(f"### Appends per second, {WINDOWS} windows of {WINDOW_SECONDS} s each, interleaved")
    print_rates({name: windows[name] for name in ours}, "1 writer, 1 saga")
    print()
    print("Writers as processes, a journal each (no shared interpreter), in turns:")
    print_rates(process_windows(schemas), "1 process, 1 saga")
    print()
    print("Other designs, on the same server in the same windows (for docs/postgres.md):")
    print_rates({name: windows[name] for name in others}, "bare retry on 23505, 1 writer")
    for journal in {id(j): j for config in ours.values() for j in config[2]}.values():
        journal.close()


def process_windows(schemas: Schemas) -> dict[str, list[Window]]:
    """1 process, then 8 processes, appending to one saga, `WINDOWS` times in turns."""
    _, url = schemas.new("processes")
    PostgresJournal(url).close()  # create the schema before the workers race to
    context = multiprocessing.get_context("spawn")
    groups = {"1 process, 1 saga": 1, "8 processes, 1 saga": 8}
    windows: dict[str, list[Window]] = {name: [] for name in groups}
    started = []
    for name, size in groups.items():
        barrier = context.Barrier(size + 1)
        results: Any = context.Queue()
        workers = [
            context.Process(
                target=process_writer, args=(url, name[0], barrier, results), daemon=True
            )
            for _ in range(size)
        ]
        for worker in workers:
            worker.start()
        started.append((name, size, barrier, results, workers))
    for _ in range(WINDOWS):
        for name, size, barrier, results, _workers in started:
            barrier.wait()  # go
            parts = [results.get(timeout=120) for _ in range(size)]
            windows[name].append(
                {
                    "appends": sum(part[0] for part in parts),
                    "seconds": WINDOW_SECONDS,
                    "latencies": [x for part in parts for x in part[1]],
                    "retries": sum(part[2] for part in parts),
                }
            )
    for _name, _size, _barrier, _results, workers in started:
        for worker in workers:
            worker.join(timeout=60)
    return windows


def process_writer(url: str, prefix: str, barrier: Any, results: Any) -> None:
    """In a process of its own: append to one saga for each window, report how it went."""
    journal = PostgresJournal(url.replace("pool_max_size=16", "pool_max_size=1"))
    for window in range(WINDOWS):
        barrier.wait(timeout=300)  # a parent that died must not leave this waiting
        saga = f"processes-{prefix}-{window}"
        before = journal.stats.retries
        latencies: list[float] = []
        stop = time.perf_counter() + WINDOW_SECONDS
        while (now := time.perf_counter()) < stop:
            journal.append(saga, Phase.INTENT, payload={"n": len(latencies)})
            latencies.append(time.perf_counter() - now)
        results.put((len(latencies), latencies, journal.stats.retries - before))
    journal.close()


def print_rates(windows: dict[str, list[Window]], baseline: str) -> None:
    base = summary(windows[baseline])[0]
    print(
        f"{'':36} {'appends/s':>10} {'vs 1 writer':>12} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'retries/append':>15}"
    )
    for name, measured in windows.items():
        rate, p50, p99, retries = summary(measured)
        print(
            f"{name:36} {rate:>10.0f} {rate / base:>11.2f}x {p50:>7.2f} {p99:>7.2f} "
            f"{retries:>15.3f}"
        )


def design_configs(schemas: Schemas) -> dict[str, Config]:
    """Two other ways to order appends, each writer on a connection of its own."""
    bare_schema, bare_url = schemas.new("bare")
    head_schema, head_url = schemas.new("head")
    PostgresJournal(bare_url).close()
    PostgresJournal(head_url).close()
    schemas.admin.execute(
        f'CREATE TABLE "{head_schema}".saga_head '
        '(saga_id text COLLATE "C" PRIMARY KEY, seq bigint NOT NULL, hash text NOT NULL)'
    )
    conns = [schemas.connect() for _ in range(8)]
    bare_table = f'"{bare_schema}".sagacity_journal'
    head_table = f'"{head_schema}".sagacity_journal'
    heads = f'"{head_schema}".saga_head'

    def bare_retry(saga: str) -> Callable[[int, int], int]:
        """Read the tail, insert; on 23505 read again: correct, and how it fares."""

        def append(writer: int, n: int) -> int:
            conn = conns[writer]
            for attempt in range(1000):
                row = conn.execute(
                    f"SELECT seq, hash FROM {bare_table} WHERE saga_id = %s "
                    "ORDER BY seq DESC LIMIT 1",
                    (saga,),
                ).fetchone()
                seq, prev = (row[0], row[1]) if row else (0, GENESIS_HASH)
                entry, payload = seal(
                    saga,
                    seq + 1,
                    Phase.INTENT,
                    tool_name=None,
                    call_id=None,
                    ref_seq=None,
                    payload={"writer": writer, "n": n},
                    prev_hash=prev,
                )
                try:
                    conn.execute(
                        f"INSERT INTO {bare_table} ({COLUMNS}) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        row_of(entry, payload),
                    )
                    return attempt
                except psycopg.errors.UniqueViolation:
                    continue
            raise RuntimeError("bare retry gave up")

        return append

    def head_row(saga: str) -> Callable[[int, int], int]:
        """Lock the saga's head row with UPDATE ... RETURNING, insert, move the head."""
        schemas.admin.execute(
            f"INSERT INTO {heads} VALUES (%s, 0, %s) ON CONFLICT DO NOTHING", (saga, GENESIS_HASH)
        )

        def append(writer: int, n: int) -> int:
            conn = conns[writer]
            with conn.pipeline():
                conn.execute("BEGIN")
                row = conn.execute(
                    f"UPDATE {heads} SET seq = seq WHERE saga_id = %s RETURNING seq, hash", (saga,)
                ).fetchone()
                assert row is not None
                entry, payload = seal(
                    saga,
                    row[0] + 1,
                    Phase.INTENT,
                    tool_name=None,
                    call_id=None,
                    ref_seq=None,
                    payload={"writer": writer, "n": n},
                    prev_hash=row[1],
                )
                conn.execute(
                    f"INSERT INTO {head_table} ({COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    row_of(entry, payload),
                )
                conn.execute(
                    f"UPDATE {heads} SET seq = %s, hash = %s WHERE saga_id = %s",
                    (entry.seq, entry.hash, saga),
                )
                conn.execute("COMMIT")
            return 0

        return append

    return {
        "bare retry on 23505, 1 writer": (1, lambda w: bare_retry(f"b1-{w}"), []),
        "bare retry on 23505, 8 writers": (8, lambda w: bare_retry(f"b8-{w}"), []),
        "head row UPDATE..RETURNING, 1 writer": (1, lambda w: head_row(f"h1-{w}"), []),
        "head row UPDATE..RETURNING, 8 writers": (8, lambda w: head_row(f"h8-{w}"), []),
    }


# -- 3. verification and export of a large journal ---------------------------------------------


class _Discard(io.StringIO):
    """A text sink that counts what it is given."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, text: str) -> int:
        self.chars += len(text)
        return len(text)


def audit(schemas: Schemas) -> None:
    schema, url = schemas.new("audit")
    journal = PostgresJournal(url)
    started = time.perf_counter()
    copy_sql = f'COPY "{schema}".sagacity_journal ({COLUMNS}) FROM STDIN'
    with schemas.connect() as conn, conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
        for saga in range(AUDIT_SAGAS):
            for row in sealed_calls(f"audit-{saga:05d}", AUDIT_ENTRIES_PER_SAGA // 2):
                copy.write_row(row)
    filled = time.perf_counter() - started
    total = AUDIT_SAGAS * AUDIT_ENTRIES_PER_SAGA

    started = time.perf_counter()
    report = verify(journal)
    verified = time.perf_counter() - started
    assert report.ok, report.problems[:3]
    assert report.entries == total

    sink = _Discard()
    started = time.perf_counter()
    exported = export_jsonl(journal, sink)
    export_took = time.perf_counter() - started
    assert exported == total

    tracemalloc.start()
    verify(journal)
    verify_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    export_jsonl(journal, _Discard())
    export_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    journal.close()

    print()
    print(
        f"### A {total:,}-entry journal ({AUDIT_SAGAS:,} sagas) read from PostgreSQL "
        f"(written by COPY in {filled:.1f} s)"
    )
    print(f"{'':36} {'entries/s':>10} {'seconds':>8} {'peak Python memory':>19}")
    print(
        f"{'verify(journal)':36} {total / verified:>10,.0f} {verified:>8.2f} "
        f"{verify_peak / 2**20:>16.1f} MB"
    )
    print(
        f"{'export_jsonl(journal)':36} {total / export_took:>10,.0f} {export_took:>8.2f} "
        f"{export_peak / 2**20:>16.1f} MB   ({sink.chars / 2**20:.0f} MB written)"
    )


if __name__ == "__main__":
    main()
