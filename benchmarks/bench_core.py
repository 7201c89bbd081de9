"""The cost of one journaled tool call: on SQLite against the disk's floor, and in memory.

Run: `.venv/bin/python -m benchmarks bench_core`.

SQLite: a wrapped tool called inside a saga journals INTENT and EXECUTED, two durable
commits. The floor is what the disk costs for that with nothing of sagacity: two raw
`INSERT` + `COMMIT` of a row of the same shape, in the same database file, through a
connection with the same settings (WAL, `synchronous=FULL`). Calls and floor pairs
alternate one by one, the first of each pair swapping every time, so that drift in
the disk's speed falls on both alike.

Memory: the same call on `memory://`, timed over many calls per saga.

A whole saga of one call: the saga's lease, INTENT, EXECUTED and ENDED, against the
floor of the three commits the journal alone needs (INTENT, EXECUTED, ENDED) and of
four (the same and one more for the lease): the lease should cost one commit a saga.
"""

from __future__ import annotations

import gc
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sagacity import CompensationContext, Sagacity, SagaTool, compensable, compensation
from sagacity._sqlite import connect

SQLITE_ROUNDS = 20
SQLITE_SAGAS = 400
SQLITE_CALLS_PER_ROUND = 100
MEMORY_ROUNDS = 30
MEMORY_CALLS_PER_ROUND = 500

SQLITE_GOAL = 1.25
MEMORY_GOAL_US = 20.0


class Inventory:
    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        pass


def wrapped_tool(sagacity: Sagacity) -> SagaTool:
    return next(t for t in sagacity.wrap(Inventory()) if t.name == "reserve_inventory")


_INTENT_ROW = '{"input":{"qty":2,"sku":"SKU-42"},"reversibility":"COMPENSATABLE"}'
_EXECUTED_ROW = '{"result":"res-SKU-42-2"}'
_ENDED_ROW = '{"outcome":"COMPLETED"}'


def floor_pair(conn: sqlite3.Connection, saga_id: str, seq: int) -> None:
    """Two raw durable inserts of journal-shaped rows: the physical floor of one call."""
    floor_rows(conn, saga_id, seq, (_INTENT_ROW, _EXECUTED_ROW))


def floor_rows(conn: sqlite3.Connection, saga_id: str, seq: int, payloads: tuple[str, ...]) -> None:
    """Raw durable inserts of journal-shaped rows, one commit each."""
    for offset, payload in enumerate(payloads):
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO bench_floor VALUES (?, ?, 'INTENT', 'reserve_inventory', "
            "'reserve_inventory#1', NULL, ?, '2026-01-01T00:00:00.000000Z', ?, ?)",
            (saga_id, seq + offset, payload, "0" * 64, "f" * 64),
        )
        conn.execute("COMMIT")


def measure_sqlite(folder: Path) -> tuple[list[float], list[float]]:
    """Per-call seconds of journaled calls and of floor pairs, interleaved."""
    path = folder / "bench.db"
    sagacity = Sagacity.from_url(f"sqlite:///{path}")
    tool = wrapped_tool(sagacity)
    floor = connect(path)  # the journal's own connection settings
    floor.execute(
        "CREATE TABLE bench_floor (saga_id TEXT NOT NULL, seq INTEGER NOT NULL, phase TEXT, "
        "tool_name TEXT, call_id TEXT, ref_seq INTEGER, payload TEXT NOT NULL, "
        "recorded_at TEXT, prev_hash TEXT, hash TEXT, PRIMARY KEY (saga_id, seq)) WITHOUT ROWID"
    )
    calls: list[float] = []
    floors: list[float] = []
    clock = time.perf_counter
    for round_number in range(SQLITE_ROUNDS):
        saga_id = f"bench-{round_number}"

        def work(saga_id: str = saga_id) -> None:
            for n in range(SQLITE_CALLS_PER_ROUND):
                if n % 2:
                    start = clock()
                    tool("SKU-42", 2)
                    middle = clock()
                    floor_pair(floor, saga_id, 2 * n)
                    end = clock()
                    calls.append(middle - start)
                    floors.append(end - middle)
                else:
                    start = clock()
                    floor_pair(floor, saga_id, 2 * n)
                    middle = clock()
                    tool("SKU-42", 2)
                    end = clock()
                    floors.append(middle - start)
                    calls.append(end - middle)

        gc.collect()
        sagacity.saga(saga_id, work)
    floor.close()
    sagacity.close()
    return calls, floors


def measure_sqlite_sagas(folder: Path) -> tuple[list[float], list[float], list[float]]:
    """Seconds per one-call saga, per three-commit and per four-commit floor, interleaved."""
    path = folder / "sagas.db"
    sagacity = Sagacity.from_url(f"sqlite:///{path}")
    tool = wrapped_tool(sagacity)
    floor = connect(path)
    floor.execute(
        "CREATE TABLE bench_floor (saga_id TEXT NOT NULL, seq INTEGER NOT NULL, phase TEXT, "
        "tool_name TEXT, call_id TEXT, ref_seq INTEGER, payload TEXT NOT NULL, "
        "recorded_at TEXT, prev_hash TEXT, hash TEXT, PRIMARY KEY (saga_id, seq)) WITHOUT ROWID"
    )
    timings: dict[str, list[float]] = {"saga": [], "3": [], "4": []}
    three = (_INTENT_ROW, _EXECUTED_ROW, _ENDED_ROW)
    runs: dict[str, Callable[[int], object]] = {
        "saga": lambda n: sagacity.saga(f"one-{n}", lambda: tool("SKU-42", 2)),
        "3": lambda n: floor_rows(floor, f"three-{n}", 1, three),
        "4": lambda n: floor_rows(floor, f"four-{n}", 1, (*three, _ENDED_ROW)),
    }
    order = list(runs)
    gc.collect()
    for n in range(SQLITE_SAGAS):
        order = order[1:] + order[:1]  # each kind takes each place in turn
        for kind in order:
            start = time.perf_counter()
            runs[kind](n)
            timings[kind].append(time.perf_counter() - start)
    floor.close()
    sagacity.close()
    return timings["saga"], timings["3"], timings["4"]


def measure_memory() -> list[float]:
    """Mean seconds per journaled call, one value per saga of many calls."""
    per_call: list[float] = []
    for round_number in range(MEMORY_ROUNDS):
        sagacity = Sagacity.from_url("memory://")
        tool = wrapped_tool(sagacity)

        def work(tool: Callable[..., Any] = tool) -> float:
            start = time.perf_counter()
            for _ in range(MEMORY_CALLS_PER_ROUND):
                tool("SKU-42", 2)
            return (time.perf_counter() - start) / MEMORY_CALLS_PER_ROUND

        gc.collect()
        per_call.append(sagacity.saga(f"bench-{round_number}", work).value)
    return per_call


def measure_bare_call() -> float:
    """Seconds per call of the undecorated tool, for scale."""
    tool = Inventory().reserve_inventory
    count = 100_000
    start = time.perf_counter()
    for _ in range(count):
        tool("SKU-42", 2)
    return (time.perf_counter() - start) / count


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    load = os.getloadavg()[0]  # other work on the machine skews every figure: say how much
    with tempfile.TemporaryDirectory(dir=os.environ.get("SAGACITY_BENCH_DIR")) as folder:
        calls, floors = measure_sqlite(Path(folder))
        sagas, three_floors, four_floors = measure_sqlite_sagas(Path(folder))
    memory = measure_memory()
    bare = measure_bare_call()
    ratio = statistics.median(calls) / statistics.median(floors)
    ratio_of_means = statistics.fmean(calls) / statistics.fmean(floors)
    memory_us = statistics.median(memory) * 1e6

    us = 1e6
    print(
        f"bench_core: nproc {os.cpu_count()}, {cpu_model()}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, load average before the run {load:.2f}"
    )
    print(
        f"SQLite: {len(calls)} calls and as many floor pairs, interleaved; "
        f"memory: {MEMORY_ROUNDS} sagas of {MEMORY_CALLS_PER_ROUND} calls"
    )
    print()
    print(f"| {'measurement':<45} | {'median':>9} | {'p10':>9} | {'p90':>9} |")
    print(f"|{'-' * 47}|{'-' * 10}:|{'-' * 10}:|{'-' * 10}:|")
    for label, values in (
        ("SQLite: journaled call (INTENT + EXECUTED)", calls),
        ("SQLite: floor, 2 x (INSERT + COMMIT)", floors),
        ("memory: journaled call (INTENT + EXECUTED)", memory),
        ("SQLite: a one-call saga (lease + 3 appends)", sagas),
        ("SQLite: floor, 3 x (INSERT + COMMIT)", three_floors),
        ("SQLite: floor, 4 x (INSERT + COMMIT)", four_floors),
    ):
        print(
            f"| {label:<45} | {statistics.median(values) * us:6.1f} µs "
            f"| {quantile(values, 0.1) * us:6.1f} µs | {quantile(values, 0.9) * us:6.1f} µs |"
        )
    print(f"| {'undecorated call of the same tool':<45} | {bare * us:6.2f} µs | {'':9} | {'':9} |")
    print()
    verdict = "met" if ratio <= SQLITE_GOAL else "MISSED"
    print(
        f"SQLite call / floor: {ratio:.3f}x by medians, {ratio_of_means:.3f}x by means "
        f"(goal <= {SQLITE_GOAL}x: {verdict})"
    )
    saga = statistics.median(sagas)
    print(
        f"SQLite one-call saga / 3-commit floor: {saga / statistics.median(three_floors):.3f}x, "
        f"/ 4-commit floor: {saga / statistics.median(four_floors):.3f}x by medians "
        "(the lease is the fourth commit)"
    )
    verdict = "met" if memory_us <= MEMORY_GOAL_US else "MISSED"
    print(f"memory: {memory_us:.1f} µs per call (goal <= {MEMORY_GOAL_US:.0f} µs: {verdict})")


if __name__ == "__main__":
    main()
