"""Decision to resume: from an APPROVED commit to the approved tool running in a worker.

The latency to a waiting worker process, and many workers resuming a batch decided at
once.

- Latency: 200 sagas wait for approval; one `sagacity worker` process waits; each saga is
  approved in turn from this process, and the time from `approve` returning (the APPROVED
  committed) to the tool starting in the worker is taken (p50, p99, max). On PostgreSQL
  the worker LISTENs (a NOTIFY from the journal's trigger wakes it); on SQLite it polls
  at its default interval (0.2 s).
- Throughput: 500 sagas approved at once, then 1 and 8 worker processes resume them;
  each wire must run exactly once. Reported: resumes per second, and 8 against 1.

PostgreSQL is `SAGACITY_TEST_DATABASE_URL` (default postgresql://postgres@127.0.0.1:5432/test),
each run in a schema of its own, dropped afterwards. `SAGACITY_BENCH_DECISIONS` and
`SAGACITY_BENCH_BATCH` change the counts.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sagacity import Sagacity

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DECISIONS = int(os.environ.get("SAGACITY_BENCH_DECISIONS", "200"))
BATCH = int(os.environ.get("SAGACITY_BENCH_BATCH", "500"))


def _env(url: str, starts: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SAGACITY_BENCH_URL": url,
        "SAGACITY_BENCH_STARTS": str(starts),
    }


def _worker(url: str, starts: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "sagacity.cli", "worker", "--app", "benchmarks._resume_app:worker"],
        cwd=ROOT,
        env=_env(url, starts),
        stdout=subprocess.PIPE,
        stderr=None if os.environ.get("SAGACITY_BENCH_VERBOSE") else subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert "watching" in line, line
    return child


def _stop(children: list[subprocess.Popen[str]]) -> None:
    for child in children:
        child.terminate()
    for child in children:
        child.wait(60)
        if child.stdout is not None:
            child.stdout.close()


def _pause(url: str, starts: Path, count: int, prefix: str) -> list[str]:
    """Make `count` sagas wait for approval of their wire (in a process of its own)."""
    code = (
        "from benchmarks._resume_app import sagacity\n"
        f"wire = sagacity.tool('wire')\n"
        f"for n in range({count}):\n"
        f"    saga = '{prefix}-' + str(n)\n"
        "    sagacity.saga(saga, lambda: wire(saga=saga, amount=n))\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(url, starts), check=True)
    return [f"{prefix}-{n}" for n in range(count)]


def _started(starts: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    if starts.exists():
        for line in starts.read_text(encoding="utf-8").splitlines():
            saga, _, at = line.rpartition(" ")
            if saga and at:
                found.setdefault(saga, float(at))
    return found


def _lines(starts: Path) -> int:
    return len(starts.read_text(encoding="utf-8").splitlines()) if starts.exists() else 0


def latency(url: str, folder: Path, label: str) -> None:
    starts = folder / f"starts-{label.split()[0]}.txt"
    sagas = _pause(url, starts, DECISIONS, "lat")
    worker = _worker(url, starts)
    waits: list[float] = []
    try:
        with Sagacity.from_url(url) as decider:
            time.sleep(1.0)  # let the worker settle into waiting
            for saga in sagas:
                decider.approve(saga, approver="bench")
                committed = time.time()
                deadline = time.monotonic() + 30
                while saga not in (seen := _started(starts)):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{label}: saga {saga} not resumed in 30 s")
                    time.sleep(0.0005)
                waits.append((seen[saga] - committed) * 1000)
    finally:
        _stop([worker])
    waits.sort()
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))]
    print(
        f"{label:<28} {len(waits):>4} decisions  p50 {statistics.median(waits):7.1f} ms  "
        f"p99 {p99:7.1f} ms  max {waits[-1]:7.1f} ms"
    )


def throughput(url: str, folder: Path, label: str, workers: int) -> float:
    starts = folder / f"batch-{label.split()[0]}-{workers}.txt"
    prefix = f"batch{workers}"
    sagas = _pause(url, starts, BATCH, prefix)
    with Sagacity.from_url(url) as decider:
        for saga in sagas:
            decider.approve(saga, approver="bench")
    began = time.monotonic()
    children = [_worker(url, starts) for _ in range(workers)]
    try:
        deadline = time.monotonic() + 600
        while _lines(starts) < BATCH:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: {BATCH} resumes not done in 600 s")
            time.sleep(0.01)
        elapsed = time.monotonic() - began
        with Sagacity.from_url(url) as reader:
            for saga in sagas:  # each resumed to its end, and its wire run once
                while reader.history(saga)[-1].phase.value != "ENDED":
                    time.sleep(0.01)
    finally:
        _stop(children)
    runs = starts.read_text(encoding="utf-8").splitlines()
    assert len(runs) == BATCH, "a wire ran twice"
    assert len({line.partition(" ")[0] for line in runs}) == BATCH, "a wire ran twice"
    rate = BATCH / elapsed
    print(
        f"{label:<28} {BATCH} sagas  {workers} worker(s)  {elapsed:6.2f} s  "
        f"{rate:7.1f} resumes/s  (each wire once)"
    )
    return rate


def _postgres_schema() -> tuple[str, str] | None:
    base = os.environ.get("SAGACITY_TEST_DATABASE_URL") or DEFAULT_URL
    try:
        import psycopg

        with psycopg.connect(base, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as error:
        print(f"PostgreSQL: not measured ({type(error).__name__}: {error})")
        return None
    schema = f"sagacity_bench_resume_{uuid.uuid4().hex[:8]}"
    joiner = "&" if "?" in base else "?"
    return base, f"{base}{joiner}schema={schema}"


def _drop(base: str, url: str) -> None:
    import psycopg

    schema = url.rpartition("schema=")[2]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    print("\n== resume: APPROVED commit -> the approved tool starting in a waiting worker")
    with tempfile.TemporaryDirectory() as folder:
        place = Path(folder)
        latency(f"sqlite:///{place / 'latency.db'}", place, "SQLite (poll 0.2 s)")
        found = _postgres_schema()
        if found is not None:
            base, url = found
            try:
                latency(url, place, "PostgreSQL (LISTEN/NOTIFY)")
                one = throughput(url, place, "PostgreSQL", 1)
                eight = throughput(url, place, "PostgreSQL", 8)
                print(f"{'PostgreSQL':<28} 8 workers against 1: {eight / one:.2f}x")
            finally:
                _drop(base, url)
        one = throughput(f"sqlite:///{place / 'batch1.db'}", place, "SQLite", 1)
        eight = throughput(f"sqlite:///{place / 'batch8.db'}", place, "SQLite", 8)
        print(f"{'SQLite':<28} 8 workers against 1: {eight / one:.2f}x")


if __name__ == "__main__":
    main()
