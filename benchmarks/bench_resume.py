"""Decision to resume: from an APPROVED commit to the approved tool running in a worker.

The latency to a waiting worker process, and many workers resuming a batch decided at
once.

- Latency: 200 sagas wait for approval; one `sagacity worker` process waits; each saga is
  approved in turn from this process, and the time from `approve` returning (the APPROVED
  committed) to the tool starting in the worker is taken (p50, p99, max). The worker
  tells this process, by a datagram, when the tool starts and when it waits again; the
  next saga is approved only once it waits (no decision lands on a worker still
  finishing the one before), after a pause of up to 0.2 s (decisions come at any moment
  of a poll, not just as one begins). On PostgreSQL the worker LISTENs (a NOTIFY from the
  journal's trigger wakes it); on SQLite it polls at its default interval (0.2 s). The
  way is also shown in stages (p50 and p99 of each, and of its call alone): the watch
  woken, the saga handed to the worker loop, each journal and approval-store call, the
  tool starting (see `_resume_app`).
- Throughput: 500 sagas approved at once, then 1 and 8 worker processes resume them;
  each wire must run exactly once. Reported: resumes per second, and 8 against 1.

PostgreSQL is `SAGACITY_TEST_DATABASE_URL` (default postgresql://postgres@127.0.0.1:5432/test),
each run in a schema of its own, dropped afterwards. `SAGACITY_BENCH_DECISIONS` and
`SAGACITY_BENCH_BATCH` change the counts.
"""

from __future__ import annotations

import os
import random
import socket
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
_PHASE = 0.2
"""The most a decision waits after the worker is waiting: its default SQLite poll."""


def _env(url: str, starts: Path, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "SAGACITY_BENCH_URL": url,
        "SAGACITY_BENCH_STARTS": str(starts),
        **more,
    }


def _workers(url: str, starts: Path, count: int, **more: str) -> list[subprocess.Popen[str]]:
    """Start `count` worker processes at once; return when each is watching."""
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sagacity.cli",
                "worker",
                "--app",
                "benchmarks._resume_app:worker",
            ],
            cwd=ROOT,
            env=_env(url, starts, **more),
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("SAGACITY_BENCH_VERBOSE") else subprocess.DEVNULL,
            text=True,
        )
        for _ in range(count)
    ]
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert "watching" in line, line
    return children


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


class _Signals:
    """The datagrams the worker sends (`start <saga> <time>`, `waiting`), waited on."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def next(self, deadline: float, label: str) -> str:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{label}: the worker said nothing in time")
        self.sock.settimeout(left)
        try:
            return self.sock.recv(4096).decode()
        except TimeoutError:
            raise RuntimeError(f"{label}: the worker said nothing in time") from None

    def started(self, saga: str, deadline: float, label: str) -> float:
        while True:
            kind, _, rest = self.next(deadline, label).partition(" ")
            if kind == "start":
                name, _, at = rest.rpartition(" ")
                if name == saga:
                    return float(at)

    def waiting(self, deadline: float, label: str) -> None:
        while self.next(deadline, label) != "waiting":
            pass

    def close(self) -> None:
        self.sock.close()
        os.unlink(self.path)


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def latency(url: str, folder: Path, label: str) -> None:
    name = label.split()[0]
    starts = folder / f"starts-{name}.txt"
    stages = folder / f"stages-{name}.txt"
    sagas = _pause(url, starts, DECISIONS, "lat")
    signals = _Signals(folder / f"signals-{name}.sock")
    phase = random.Random(DECISIONS)
    worker = _workers(
        url, starts, 1, SAGACITY_BENCH_SIGNAL=signals.path, SAGACITY_BENCH_STAGES=str(stages)
    )[0]
    committed: dict[str, float] = {}
    waits: list[float] = []
    try:
        with Sagacity.from_url(url) as decider:
            signals.waiting(time.monotonic() + 30, label)  # the worker is waiting
            for saga in sagas:
                # Decisions come at any moment, not just as a poll begins.
                time.sleep(phase.uniform(0.0, _PHASE))
                decider.approve(saga, approver="bench")
                committed[saga] = time.time()
                deadline = time.monotonic() + 30
                started = signals.started(saga, deadline, f"{label}: saga {saga}")
                waits.append((started - committed[saga]) * 1000)
                # The next decision lands on a waiting worker, not one finishing this saga.
                signals.waiting(deadline, f"{label}: saga {saga}")
    finally:
        _stop([worker])
        signals.close()
    p50, p99, most = _percentiles(waits)
    print(
        f"{label:<28} {len(waits):>4} decisions  p50 {p50:7.1f} ms  "
        f"p99 {p99:7.1f} ms  max {most:7.1f} ms"
    )
    _print_stages(_stages(stages, committed))


Stage = tuple[list[float], list[float]]
"""A stage's durations, and those of its call alone (empty when it makes none), in ms."""


def _stages(path: Path, committed: dict[str, float]) -> dict[str, Stage]:
    """Each saga's way from the APPROVED commit to the tool, in stages (milliseconds).

    A stage ends where a traced call returns: `watch.wait<` is the watch woken by the
    decision, `worker.resume>` the saga handed to the worker, each `journal.*<` and
    `approvals.*<` a call returning (the work before it, and the call itself), the last
    stage the tool starting. Calls made more than once are numbered.
    """
    notes = [line.split(" ") for line in path.read_text(encoding="utf-8").splitlines()]
    found: dict[str, Stage] = {}
    for saga, at in committed.items():
        begin = next(
            (i for i, note in enumerate(notes) if note[:2] == ["worker.resume>", saga]),
            None,
        )
        if begin is None:
            continue
        woke = max((i for i in range(begin) if notes[i][0] == "watch.wait<"), default=begin)
        end = next(i for i in range(begin, len(notes)) if notes[i][0] == "tool.start")
        last, called = at, at
        seen: dict[str, int] = {}
        for stage, _, stamp in [notes[woke], *notes[begin : end + 1]]:
            when = float(stamp)
            if stage.endswith(">") and stage != "worker.resume>":
                called = when
                continue
            seen[stage] = seen.get(stage, 0) + 1
            key = stage if seen[stage] == 1 else f"{stage} #{seen[stage]}"
            total, call = found.setdefault(key, ([], []))
            total.append((when - last) * 1000)
            if stage.endswith("<") and stage != "watch.wait<":
                call.append((when - called) * 1000)
            last = when
    return found


_NAMES = {
    "watch.wait<": "the watch woken (NOTIFY, or a poll)",
    "worker.resume>": "handed to the worker loop",
    "journal.entries<": "the saga read (the decision)",
    "journal.acquire_lease<": "the saga's lease taken",
    "journal.entries< #2": "the saga read under the lease",
    "journal.entries< #3": "the saga read by the approval check",
    "approvals.get<": "the stored request read",
    "journal.append<": "INTENT journaled",
    "tool.start": "the tool starting",
}


def _print_stages(stages: dict[str, Stage]) -> None:
    print(f"    {'stage (its call alone)':<40} {'p50':>9} {'p99':>9}   {'call p50':>9} {'p99':>9}")
    for key, (total, call) in stages.items():
        p50, p99, _ = _percentiles(total)
        line = f"    {_NAMES.get(key, key):<40} {p50:6.2f} ms {p99:6.2f} ms"
        if call:
            c50, c99, _ = _percentiles(call)
            line += f"   ({c50:6.2f} ms {c99:6.2f} ms)"
        print(line)


def throughput(url: str, folder: Path, label: str, workers: int) -> float:
    starts = folder / f"batch-{label.split()[0]}-{workers}.txt"
    prefix = f"batch{workers}"
    sagas = _pause(url, starts, BATCH, prefix)
    with Sagacity.from_url(url) as decider:
        for saga in sagas:
            decider.approve(saga, approver="bench")
    began = time.monotonic()
    children = _workers(url, starts, workers)
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


def postgres_schema(name: str) -> tuple[str, str] | None:
    """The server URL and a URL naming a fresh schema `sagacity_bench_<name>_…`; None if down."""
    base = os.environ.get("SAGACITY_TEST_DATABASE_URL") or DEFAULT_URL
    try:
        import psycopg

        with psycopg.connect(base, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as error:
        print(f"PostgreSQL: not measured ({type(error).__name__}: {error})")
        return None
    schema = f"sagacity_bench_{name}_{uuid.uuid4().hex[:8]}"
    joiner = "&" if "?" in base else "?"
    return base, f"{base}{joiner}schema={schema}"


def drop_schema(base: str, url: str) -> None:
    """Drop the schema `postgres_schema` named."""
    import psycopg

    schema = url.rpartition("schema=")[2]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    print("\n== resume: APPROVED commit -> the approved tool starting in a waiting worker")
    with tempfile.TemporaryDirectory() as folder:
        place = Path(folder)
        latency(f"sqlite:///{place / 'latency.db'}", place, "SQLite (poll 0.2 s)")
        found = postgres_schema("resume")
        if found is not None:
            base, url = found
            try:
                latency(url, place, "PostgreSQL (LISTEN/NOTIFY)")
                one = throughput(url, place, "PostgreSQL", 1)
                eight = throughput(url, place, "PostgreSQL", 8)
                print(f"{'PostgreSQL':<28} 8 workers against 1: {eight / one:.2f}x")
            finally:
                drop_schema(base, url)
        one = throughput(f"sqlite:///{place / 'batch1.db'}", place, "SQLite", 1)
        eight = throughput(f"sqlite:///{place / 'batch8.db'}", place, "SQLite", 8)
        print(f"{'SQLite':<28} 8 workers against 1: {eight / one:.2f}x")


if __name__ == "__main__":
    main()
