"""Workers as real processes: decisions from other processes, SIGTERM, SIGKILL mid-resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sagacity import Sagacity
from tests.processes._kill import ROOT, kill

APP = "tests.worker._app"


class Workers:
    """Worker processes of the test app, on one database, writing effects to one file."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder
        self.effects = folder / "effects.txt"
        self.effects.touch()
        self.children: list[subprocess.Popen[str]] = []

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SAGACITY_WORKER_TEST_DB": self.url,
            "SAGACITY_WORKER_TEST_EFFECTS": str(self.effects),
            **extra,
        }

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        """Start `sagacity worker --app tests.worker._app:worker` and wait until it watches."""
        child = subprocess.Popen(
            [sys.executable, "-m", "sagacity.cli", "worker", "--app", f"{APP}:worker", *args],
            cwd=ROOT,
            env=self.env(**extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.children.append(child)
        assert child.stdout is not None
        line = child.stdout.readline()
        assert "watching for decisions" in line, line + (
            child.stderr.read() if child.stderr else ""
        )
        return child

    def python(self, code: str) -> str:
        """Run `code` in a process of its own with the app imported (the agent's side)."""
        done = subprocess.run(
            [sys.executable, "-c", f"from {APP} import *\n{code}"],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def cli(self, *args: str, database: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sagacity.cli", *args]
            + (["--database", self.url] if database else []),
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def lines(self) -> list[str]:
        return self.effects.read_text(encoding="utf-8").splitlines()

    def wait_for(self, what: Callable[[], bool], timeout: float = 60) -> None:
        """Wait for `what` to hold, looking every 20 ms; fail with the effects so far."""
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                pytest.fail(f"waited {timeout} s; effects: {self.lines()}")
            time.sleep(0.02)

    def close(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait()
            for stream in (child.stdout, child.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def workers(shared_store_url: str, tmp_path: Path) -> Iterator[Workers]:
    made = Workers(shared_store_url, tmp_path)
    made.python("")  # creates the schema before the workers race to
    yield made
    made.close()


def ended(url: str, saga_id: str) -> str | None:
    """The outcome the saga's journal ended with, read in this process; None while open."""
    with Sagacity.from_url(url) as reader:
        entries = reader.history(saga_id)
    last = entries[-1] if entries else None
    if last is None or last.phase.value != "ENDED":
        return None
    outcome = last.payload["outcome"]  # type: ignore[index,call-overload]
    return str(outcome)


def approve_with_cli(workers: Workers, saga_id: str) -> None:
    """`sagacity approve SAGA --sha256 …` in a process of its own, as an approver would."""
    pending = workers.cli("pending", "--saga", saga_id, "--json")
    request = json.loads(pending.stdout.splitlines()[0])
    done = workers.cli(
        "approve", saga_id, "--approver", "alice", "--sha256", request["input_sha256"]
    )
    assert done.returncode == 0, done.stderr


class TestDecisionsFromOtherProcesses:
    def test_a_cli_approval_is_resumed_by_a_waiting_worker(self, workers: Workers) -> None:
        """Agent process pauses; `sagacity approve` decides; the worker process resumes."""
        worker = workers.start("--health-file", str(workers.folder / "health.json"))
        workers.python("start('cli-1', 250)")
        approve_with_cli(workers, "cli-1")
        workers.wait_for(lambda: ended(workers.url, "cli-1") is not None)
        assert ended(workers.url, "cli-1") == "COMPLETED"
        assert workers.lines() == ["hold 250", "wire 250 acme", "after wire cli-1 tx-250"]
        health = workers.cli(
            "worker", "--check-health", str(workers.folder / "health.json"), database=False
        )
        assert health.returncode == 0, health.stderr
        del worker

    def test_a_cli_rejection_releases_the_hold_and_tells_the_run(self, workers: Workers) -> None:
        """`sagacity reject` without the tools leaves the undo; the worker does it and says no."""
        workers.start()
        workers.python("start('cli-2', 75)")
        done = workers.cli("reject", "cli-2", "--approver", "bob", "--reason", "wrong account")
        assert done.returncode == 6, done.stderr  # the undo is left to a process with the tools
        workers.wait_for(lambda: ended(workers.url, "cli-2") == "COMPENSATED")
        workers.wait_for(lambda: "told no cli-2" in workers.lines())
        assert workers.lines() == ["hold 75", "release hold-75", "told no cli-2"]

    def test_a_rest_api_approval_is_resumed(self, workers: Workers) -> None:
        """POST /sagacity/approvals/{id}/approve in another process; the worker resumes."""
        pytest.importorskip("fastapi")
        from fastapi.testclient import TestClient

        from sagacity.server import create_app
        from tests.server._bank import ALICE, token_auth

        workers.start()
        workers.python("start('api-1', 40)")
        with (
            Sagacity.from_url(workers.url) as server_side,  # a server without the tools
            TestClient(create_app(server_side, token_auth(), ui=False)) as client,
        ):
            (request,) = client.get("/sagacity/approvals", headers=ALICE).json()
            answer = client.post(
                f"/sagacity/approvals/{request['request_id']}/approve",
                json={"sha256": request["input_sha256"]},
                headers=ALICE,
            )
            assert answer.status_code == 200, answer.text
        workers.wait_for(lambda: ended(workers.url, "api-1") is not None)
        assert workers.lines() == ["hold 40", "wire 40 acme", "after wire api-1 tx-40"]


class TestStopping:
    def test_sigterm_stops_the_worker_cleanly(self, workers: Workers) -> None:
        """SIGTERM: the worker exits 0, says it stopped, and its health file says stopped."""
        health = workers.folder / "health.json"
        worker = workers.start("--health-file", str(health))
        workers.wait_for(health.exists)
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        assert worker.stdout is not None
        assert "stopped" in worker.stdout.read()
        assert json.loads(health.read_text())["state"] == "stopped"
        check = workers.cli("worker", "--check-health", str(health), database=False)
        assert check.returncode == 1
        assert "is stopped" in check.stderr


class TestKilledMidResume:
    def test_killed_after_the_call_another_worker_finishes_without_running_it_again(
        self, workers: Workers
    ) -> None:
        """SIGKILL after the wire ran, as the run went on: a second worker replays the wire."""
        first = workers.start(
            SAGACITY_WORKER_TEST_BLOCK="after-wire", SAGACITY_WORKER_TEST_LEASE_TTL="1.5"
        )
        workers.python("start('k-1', 300)")
        approve_with_cli(workers, "k-1")
        workers.wait_for(
            lambda: any(line.startswith("stuck after-wire") for line in workers.lines())
        )
        kill(first)
        workers.start(SAGACITY_WORKER_TEST_LEASE_TTL="1.5")
        workers.wait_for(lambda: ended(workers.url, "k-1") is not None)
        lines = workers.lines()
        assert ended(workers.url, "k-1") == "COMPLETED"
        assert lines.count("wire 300 acme") == 1  # never twice
        assert lines.count("after wire k-1 tx-300") == 2  # the run went on twice; the wire once

    def test_killed_inside_the_call_it_is_in_doubt_and_never_run_again(
        self, workers: Workers
    ) -> None:
        """SIGKILL inside the wire: in doubt; no worker runs it again until a human finds out."""
        first = workers.start(
            SAGACITY_WORKER_TEST_BLOCK="in-wire", SAGACITY_WORKER_TEST_LEASE_TTL="1.5"
        )
        workers.python("start('k-2', 500)")
        approve_with_cli(workers, "k-2")
        workers.wait_for(lambda: any(line.startswith("stuck in-wire") for line in workers.lines()))
        kill(first)
        once = workers.cli("worker", "--app", f"{APP}:worker", "--once", database=False)
        assert "acted on 0 decision(s)" in once.stdout, once.stderr
        assert workers.lines().count("wire 500 acme") == 1
        assert ended(workers.url, "k-2") is None
        assert "k-2" in workers.cli("doubts", "--json").stdout
        # A human finds the wire never left the bank: the approval stands, and it runs.
        resolved = workers.cli("resolve", "k-2", "wire#1", "--not-executed", "--by", "ops")
        assert resolved.returncode == 0, resolved.stderr
        once = workers.cli("worker", "--app", f"{APP}:worker", "--once", database=False)
        assert "acted on 1 decision(s)" in once.stdout, once.stderr
        assert ended(workers.url, "k-2") == "COMPLETED"


class TestEightWorkers:
    def test_eight_workers_on_postgres_resume_each_saga_exactly_once(
        self, tmp_path: Path, request: pytest.FixtureRequest
    ) -> None:
        """80 sagas approved at once, 8 worker processes racing: each wire runs once."""
        from tests._postgres import postgres_url_for

        urls = postgres_url_for(request)
        url = next(urls)
        try:
            workers = Workers(url, tmp_path)
            try:
                workers.python(
                    "for n in range(80):\n    start(f'race-{n}', n)\n"
                    "for n in range(80):\n"
                    "    request = sagacity.pending(f'race-{n}')[0]\n"
                    "    assert request.tool_name == 'wire'\n"
                )
                for _ in range(8):
                    workers.start()
                workers.python(
                    "for n in range(80):\n    sagacity.approve(f'race-{n}', approver='alice')\n"
                )
                workers.wait_for(
                    lambda: sum(line.startswith("after wire") for line in workers.lines()) >= 80,
                    timeout=180,
                )
                wires = sorted(line for line in workers.lines() if line.startswith("wire"))
                assert wires == sorted(f"wire {n} acme" for n in range(80))
                with Sagacity.from_url(url) as reader:
                    for n in range(80):
                        phases = [e.phase.value for e in reader.history(f"race-{n}")]
                        assert phases.count("INTENT") == 2, (n, phases)  # hold, wire: once
            finally:
                workers.close()
        finally:
            next(urls, None)
