"""A bank whose effects are lines in a ledger file: a process that runs a tool leaves proof.

The resume tests run an approved call in another process (`sagacity resume SAGA --tools
tests.integrations._bank:Bank`), then the framework's own resume here; the ledger shows
how often each effect happened, whichever process ran it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import sagacity
from sagacity import CompensationContext, Reversibility, compensable, compensation

LEDGER = "SAGACITY_TEST_LEDGER"
"""The environment variable naming the ledger file."""
STATES = "SAGACITY_TEST_STATES"
"""The environment variable naming the folder where paused runs' states are kept."""
BANK_DOWN = "SAGACITY_TEST_BANK_DOWN"
"""Set (to anything), the wire transfer fails: the bank refuses it."""
ROOT = Path(__file__).resolve().parents[2]


def _write(line: str) -> None:
    with open(os.environ[LEDGER], "a", encoding="utf-8") as ledger:
        ledger.write(line + "\n")


def ledger_lines(path: Path) -> list[str]:
    """What the bank did, in order."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


class Bank:
    """A hold on an account (undone by releasing it), and a wire transfer that cannot be."""

    @compensable(by="release_hold")
    def place_hold(self, account: str, amount: str) -> str:
        """Hold an amount on an account until the transfer is sent."""
        _write(f"hold {account} {amount}")
        return f"hold-{account}"

    @compensation
    def release_hold(self, ctx: CompensationContext) -> None:
        _write(f"release {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire transfer; it cannot be recalled."""
        if os.environ.get(BANK_DOWN):
            _write(f"refused {amount} {to}")
            raise RuntimeError(f"the bank refused the transfer to {to}")
        _write(f"wire {amount} {to}")
        return f"wt-{amount}-{to}"


def _child_env(ledger: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SAGACITY_DATABASE_URL", BANK_DOWN)}
    env[LEDGER] = str(ledger)
    # The child imports the sagacity this process imported, and this test tree.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(sagacity.__file__).parents[1]), str(ROOT)])
    return env


def cli(*args: str, ledger: Path, bank_down: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `python -m sagacity.cli ARGS` in another process, with the bank's ledger."""
    env = _child_env(ledger)
    if bank_down:
        env[BANK_DOWN] = "1"
    return subprocess.run(
        [sys.executable, "-m", "sagacity.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=env,
    )


def approve_elsewhere(saga_id: str, database_url: str, ledger: Path) -> None:
    """Approve the saga's one pending request with the CLI, in another process."""
    from sagacity import Sagacity

    with Sagacity.from_url(database_url) as reader:
        (request,) = reader.pending(saga_id)
    approved = cli(
        "approve", saga_id, "--approver", "alice", "--sha256", request.input_sha256,
        "--database", database_url, ledger=ledger,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stderr


def approve_and_run_elsewhere(
    saga_id: str, database_url: str, ledger: Path, *, bank_down: bool = False
) -> subprocess.CompletedProcess[str]:
    """Approve the saga's request, then run the approved call: the CLI, in other processes."""
    approve_elsewhere(saga_id, database_url, ledger)
    return cli(
        "resume", saga_id, "--tools", "tests.integrations._bank:Bank", "--database", database_url,
        ledger=ledger, bank_down=bank_down,
    )  # fmt: skip


def reject_elsewhere(
    saga_id: str, database_url: str, ledger: Path
) -> subprocess.CompletedProcess[str]:
    """Reject the saga's request with the CLI in another process, its undo run there."""
    return cli(
        "reject", saga_id, "--approver", "bob", "--reason", "not this week",
        "--tools", "tests.integrations._bank:Bank", "--database", database_url, ledger=ledger,
    )  # fmt: skip


class WorkerProcess:
    """`sagacity worker --app APP` in a process of its own, with the bank's ledger.

    Its log (stderr) is read on a thread, so that a test waits for the line that says a
    saga was resumed, with a deadline, instead of sleeping.
    """

    def __init__(self, app: str, database_url: str, ledger: Path, **env: str) -> None:
        environment = _child_env(ledger)
        environment["SAGACITY_DATABASE_URL"] = database_url
        environment.update(env)
        self.child = subprocess.Popen(
            [sys.executable, "-m", "sagacity.cli", "worker", "--app", app],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read_log, daemon=True).start()
        assert self.child.stdout is not None
        started = self.child.stdout.readline()
        assert "watching for decisions" in started, (started, self._rest())

    def _read_log(self) -> None:
        assert self.child.stderr is not None
        for line in self.child.stderr:
            self.log.put(line)
        self.log.put(None)

    def _rest(self) -> str:
        self.child.kill()
        self.child.wait()
        return "".join(self.seen) + (self.child.stderr.read() if self.child.stderr else "")

    def wait_for(self, text: str, timeout: float = 120.0) -> str:
        """Wait for a log line holding `text`; fail with the log if the worker ends first."""
        while True:
            try:
                line = self.log.get(timeout=timeout)
            except queue.Empty:
                log = "".join(self.seen)
                raise AssertionError(f"no {text!r} in the worker's log: {log}") from None
            if line is None:
                raise AssertionError(f"the worker ended before {text!r}: {''.join(self.seen)}")
            self.seen.append(line)
            if text in line:
                return line

    def stop(self) -> int:
        """SIGTERM the worker and return its exit code (0: it stopped cleanly)."""
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
        code = self.child.wait(timeout=60)
        for stream in (self.child.stdout, self.child.stderr):
            if stream is not None:
                stream.close()
        return code


@contextlib.contextmanager
def worker_process(
    app: str, database_url: str, ledger: Path, **env: str
) -> Iterator[WorkerProcess]:
    """A worker process for the body; SIGTERMed at the end, and seen to stop cleanly."""
    running = WorkerProcess(app, database_url, ledger, **env)
    try:
        yield running
    finally:
        code = running.stop()
    assert code == 0, "".join(running.seen)
