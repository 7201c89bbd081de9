"""The application the resume benchmark's worker processes run (`sagacity worker --app`).

The approved tool appends `<saga id> <time.time()>` to a file as it starts: the end of
the latency measured (the APPROVED commit is its start, taken in the deciding process),
and the record that each wire ran once.

With `SAGACITY_BENCH_SIGNAL` naming the benchmark's datagram socket, the worker also
tells it when the tool starts and when the worker waits again, so that the benchmark
waits on that instead of reading the file over and over. With `SAGACITY_BENCH_STAGES`
naming a file, each stage between the decision and the tool is noted there
(`<stage> <saga id or -> <time.time()>`): the watch waking, the saga handed to the
worker, each journal and approval-store call starting (`>`) and returning (`<`), the
tool starting. Notes are kept in memory and written once the tool has started.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from typing import Any

from sagacity import Reversibility, Sagacity, Worker, compensable

_STARTS = os.environ["SAGACITY_BENCH_STARTS"]
_SIGNAL = os.environ.get("SAGACITY_BENCH_SIGNAL")
_STAGES = os.environ.get("SAGACITY_BENCH_STAGES")


class _Teller:
    """Sends one-line datagrams to the benchmark's socket; nothing if there is none."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.sock = None if path is None else socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def tell(self, message: str) -> None:
        if self.sock is not None and self.path is not None:
            self.sock.sendto(message.encode(), self.path)


class _Stages:
    """Notes when each traced call starts and returns, written out when the tool starts."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def note(self, stage: str, saga: str = "-", at: float | None = None) -> None:
        stamp = time.time() if at is None else at
        with self.lock:
            self.lines.append(f"{stage} {saga} {stamp!r}")

    def flush(self) -> None:
        with self.lock:
            lines, self.lines = self.lines, []
        with open(self.path, "a", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def traced(*args: Any, **kwargs: Any) -> Any:
            saga = next((a for a in args if isinstance(a, str)), kwargs.get("saga_id", "-"))
            self.note(f"{label}>", str(saga))
            try:
                return original(*args, **kwargs)
            finally:
                self.note(f"{label}<", str(saga))

        setattr(owner, name, traced)


teller = _Teller(_SIGNAL)
stages = None if _STAGES is None else _Stages(_STAGES)


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire(saga: str, amount: int) -> str:
    """Wire money: note when it started, and which saga it belongs to."""
    started = time.time()
    with open(_STARTS, "a", encoding="utf-8") as out:
        out.write(f"{saga} {started!r}\n")
    teller.tell(f"start {saga} {started!r}")
    if stages is not None:
        stages.note("tool.start", saga, started)
        stages.flush()
    return f"tx-{saga}"


sagacity = Sagacity.from_url(os.environ["SAGACITY_BENCH_URL"])
sagacity.wrap(wire)
worker = Worker(
    sagacity,
    poll_interval=float(os.environ["SAGACITY_BENCH_POLL"])
    if os.environ.get("SAGACITY_BENCH_POLL")
    else None,
)


def _traced() -> None:
    """Trace the worker's calls (`SAGACITY_BENCH_STAGES`), and tell when it waits again."""
    if stages is not None:
        for name in ("entries", "acquire_lease", "append", "release_lease", "renew_lease"):
            stages.wrap(sagacity.journal, name, f"journal.{name}")
        for name in ("get", "pending", "save", "delete"):
            stages.wrap(sagacity.approvals, name, f"approvals.{name}")
        stages.wrap(worker, "resume", "worker.resume")
    opened = worker._open

    def open_traced() -> None:
        opened()
        watch = worker._watch
        if watch is None or getattr(watch, "_bench_traced", False):
            return
        watch._bench_traced = True  # type: ignore[attr-defined]
        if stages is not None:
            stages.wrap(watch, "wait", "watch.wait")
            stages.wrap(watch, "changed", "watch.changed")
        waits = watch.wait

        def wait(timeout: float) -> bool:
            teller.tell("waiting")
            return waits(timeout)

        watch.wait = wait  # type: ignore[method-assign]

    worker._open = open_traced  # type: ignore[method-assign]


_traced()
