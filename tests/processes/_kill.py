"""Running a child process until it prints a line, then killing it with SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running_until(
    command: Sequence[str], when: str, cwd: Path = ROOT
) -> Iterator[subprocess.Popen[str]]:
    """Run `command` until it printed the line `when`; yield it, and end it at the end."""
    child = subprocess.Popen(
        list(command), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == f"{when}\n", child.stderr.read() if child.stderr else line
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL `child` and see it die of it."""
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL


def run_until_killed(module: str, *args: str, when: str) -> None:
    """Run `python -m module args…` and SIGKILL it once it printed the line `when`."""
    with running_until([sys.executable, "-m", module, *args], when) as child:
        kill(child)
