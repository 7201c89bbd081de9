"""Running the `sagacity` command on a pseudo-terminal, as a person at a terminal does."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

_WAIT = 60.0
"""Seconds to wait for the command's output before the test fails."""


@dataclasses.dataclass
class Terminal:
    """A command running on a pseudo-terminal of `columns` columns."""

    process: subprocess.Popen[bytes]
    master: int
    output: bytes = b""

    def read_until(self, text: str) -> str:
        """What the command printed up to and including `text` (all of it, if it ended)."""
        wanted = text.encode()
        deadline = time.monotonic() + _WAIT
        while wanted not in self.output:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                break
        return self.text()

    def answer(self, line: str) -> None:
        """Type `line` and Enter."""
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> tuple[int, str]:
        """Wait for the command to end: its exit status and everything it printed.

        A command still running (waiting for an answer) when the wait is over is killed:
        its status is then negative, and the test fails on what it printed.
        """
        deadline = time.monotonic() + _WAIT
        while self._read(max(0.0, deadline - time.monotonic())):
            pass
        if self.process.poll() is None and time.monotonic() >= deadline:
            self.process.kill()
        code = self.process.wait(timeout=_WAIT)
        os.close(self.master)
        return code, self.text()

    def text(self) -> str:
        """The output so far, with the terminal's CR LF line ends read as LF."""
        return self.output.decode("utf-8", "replace").replace("\r\n", "\n")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the command closed the terminal
            return False
        self.output += chunk
        return bool(chunk)


def run_on_terminal(*args: str, columns: int = 80) -> Terminal:
    """Start `python -m sagacity.cli ARGS` with a terminal `columns` wide as stdin and out."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    environment = dict(os.environ)
    environment.pop("SAGACITY_DATABASE_URL", None)
    environment.update({"COLUMNS": str(columns), "LINES": "24", "TERM": "xterm"})
    process = subprocess.Popen(
        [sys.executable, "-m", "sagacity.cli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=environment,
        close_fds=True,
    )
    os.close(slave)
    return Terminal(process=process, master=master)
