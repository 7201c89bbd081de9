"""One saga's journaled calls on SQLite against two raw commits, sync and async, side by side.

Run: `.venv/bin/python -m benchmarks bench_sqlite` (`make bench` runs it too); run it
several times and report the range of each ratio.

- **sync**: a wrapped tool called in one saga (INTENT and EXECUTED, two durable commits)
  against two raw `INSERT` + `COMMIT` of journal-shaped rows in the same file, by turns
  one by one (`bench_core`'s measurement, `SQLITE_ROUNDS` sagas of 100 calls).
- **async**: one `Sagacity.asaga` of 40 calls of an async tool against one task inserting
  the same rows through a worker thread, by turns (`bench_async`'s N=1 measurement).
- **CPU**: the same sync call and floor pair on a file whose commits cost no disk
  (`/dev/shm`, or the temporary directory where there is none), timed in the thread's
  CPU time: what sagacity adds to a commit in Python and SQLite's own work, apart from
  the disk and from other processes taking the CPU.

The ratio a call reaches depends on the disk: it is (floor + what the call adds) /
floor, so a slower commit makes the same work a smaller ratio. The CPU line gives what
the call adds in microseconds, which is what a change to sagacity moves.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_async import SINGLE_ROUNDS, compare, sqlite_floor
from benchmarks.bench_core import floor_pair, measure_sqlite, quantile, wrapped_tool
from sagacity import Sagacity
from sagacity._sqlite import connect

CPU_ROUNDS = 15
CPU_CALLS = 300
GOAL = 1.10


def measure_cpu(folder: Path) -> tuple[list[float], list[float], list[float]]:
    """Thread CPU seconds per call, journaled (SQLite and memory) and per floor pair."""
    path = folder / "cpu.db"
    sqlite, memory = Sagacity.from_url(f"sqlite:///{path}"), Sagacity.from_url("memory://")
    on_disk, in_memory = wrapped_tool(sqlite), wrapped_tool(memory)
    floor = connect(path)
    floor.execute(
        "CREATE TABLE bench_floor (saga_id TEXT NOT NULL, seq INTEGER NOT NULL, phase TEXT, "
        "tool_name TEXT, call_id TEXT, ref_seq INTEGER, payload TEXT NOT NULL, "
        "recorded_at TEXT, prev_hash TEXT, hash TEXT, PRIMARY KEY (saga_id, seq)) WITHOUT ROWID"
    )
    clock = time.thread_time
    calls: list[float] = []
    memory_calls: list[float] = []
    floors: list[float] = []

    def timed(tool: object) -> float:
        start = clock()
        for _ in range(CPU_CALLS):
            tool("SKU-42", 2)  # type: ignore[operator]
        return (clock() - start) / CPU_CALLS

    for round_number in range(CPU_ROUNDS):
        gc.collect()
        calls.append(sqlite.saga(f"cpu-{round_number}", lambda: timed(on_disk)).value)
        memory_calls.append(memory.saga(f"cpu-{round_number}", lambda: timed(in_memory)).value)
        start = clock()
        for n in range(CPU_CALLS):
            floor_pair(floor, f"cpu-{round_number}", 2 * n)
        floors.append((clock() - start) / CPU_CALLS)
    floor.close()
    sqlite.close()
    memory.close()
    return calls, memory_calls, floors


def main() -> None:
    load = os.getloadavg()[0]
    print(
        f"## bench_sqlite: nproc {os.cpu_count()}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, load average before the run {load:.2f}"
    )
    us = 1e6
    with tempfile.TemporaryDirectory(dir=os.environ.get("SAGACITY_BENCH_DIR")) as name:
        folder = Path(name)
        calls, floors = measure_sqlite(folder)
        ratio = statistics.median(calls) / statistics.median(floors)
        print(
            f"SQLite sync, one saga: journaled call {statistics.median(calls) * us:.1f} µs "
            f"(p10 {quantile(calls, 0.1) * us:.1f}, p90 {quantile(calls, 0.9) * us:.1f}), "
            f"floor 2 commits {statistics.median(floors) * us:.1f} µs "
            f"(p10 {quantile(floors, 0.1) * us:.1f}, p90 {quantile(floors, 0.9) * us:.1f}): "
            f"{ratio:.3f}x by medians (goal <= {GOAL}x: {'met' if ratio <= GOAL else 'MISSED'}), "
            f"{len(calls)} calls"
        )
        compare(
            f"SQLite async, one saga ({SINGLE_ROUNDS} rounds)",
            1,
            lambda: asyncio.run(sqlite_floor(folder, 1)),
            lambda round_: Sagacity.from_url(f"sqlite:///{folder / f'async-{round_}.db'}"),
        )
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as name:
        calls, memory_calls, floors = measure_cpu(Path(name))
    call, memory_call, floor = (statistics.median(v) * us for v in (calls, memory_calls, floors))
    print(
        f"CPU per call (thread time, commits without a disk, medians of {CPU_ROUNDS} rounds of "
        f"{CPU_CALLS}): SQLite journaled {call:.1f} µs, floor pair {floor:.1f} µs, "
        f"memory journaled {memory_call:.1f} µs; the SQLite call adds {call - floor:.1f} µs "
        f"to its two commits, {call - floor - memory_call:.1f} µs of it beyond the memory call"
    )


if __name__ == "__main__":
    main()
