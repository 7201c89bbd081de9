"""A saga whose worker died is shown as such, found by `--status STALLED`, and taken over.

The worker is a real process killed with SIGKILL inside a call, its lease ten minutes
long: the views say its process is gone, and a command on the same host takes the saga
over at once instead of waiting the lease out.
"""

from __future__ import annotations

import datetime
import socket
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest

from sagacity import Phase, Sagacity
from tests.cli._run import run_cli
from tests.processes._kill import kill, running_until


@pytest.fixture
def worker(shared_store_url: str) -> Iterator[subprocess.Popen[str]]:
    """A worker inside the charge of saga `s-1`, holding its lease for ten minutes."""
    command = [sys.executable, "-m", "tests.cli._oncall_child", shared_store_url, "s-1"]
    with running_until(command, "inside charge") as child:
        yield child


def _lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


class TestKilledWorker:
    def test_a_killed_worker_is_stalled_and_its_saga_taken_over_at_once(
        self, shared_store_url: str, worker: subprocess.Popen[str]
    ) -> None:
        """Alive: held until its expiry; killed: STALLED, gone, and taken over at once.

        'process is gone' in sagas, show and doubts; resolve takes the saga over with no
        wait for the lease (TAKEN_OVER journaled before its finding).
        """
        db = ("--database", shared_store_url)
        (alive,) = _lines(run_cli("sagas", "--json", *db))
        holder = f"{socket.gethostname()}:{worker.pid}:"
        live = alive["worker"]
        assert isinstance(live, dict)
        assert (alive["status"], alive["stalled"], live["live"]) == ("OPEN", False, True)
        assert str(live["holder"]).startswith(holder)
        expires = datetime.datetime.fromisoformat(str(live["expires_at"]))
        assert expires > datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=9)
        assert run_cli("sagas", "--status", "STALLED", *db).stdout == "no sagas match\n"

        kill(worker)

        (dead,) = _lines(run_cli("sagas", "--status", "stalled", "--json", *db))
        assert dead["saga_id"] == "s-1"
        assert dead["stalled"] is True
        assert dead["worker"] == {
            "live": False,
            "holder": live["holder"],
            "expires_at": live["expires_at"],
            "since": None,
            "gone": True,
        }
        said = f"no live worker: {live['holder']}'s process is gone (its lease would run to "
        table = run_cli("sagas", *db).stdout
        assert "OPEN (STALLED: no live worker)" in table
        assert said in table
        shown = run_cli("show", "s-1", *db)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[1] == f"worker: {said}{live['expires_at']})"
        (doubt,) = _lines(run_cli("doubts", "--json", *db))
        assert (doubt["call_id"], doubt["worker"]) == ("charge#1", dead["worker"])

        resolved = run_cli("resolve", "s-1", "charge#1", "--not-executed", "--by", "ada", *db)
        assert resolved.returncode == 0, resolved.stderr
        sagacity = Sagacity.from_url(shared_store_url)
        try:
            phases = [(e.phase, e.call_id) for e in sagacity.history("s-1")]
        finally:
            sagacity.close()
        assert phases == [
            (Phase.INTENT, "reserve#1"),
            (Phase.EXECUTED, "reserve#1"),
            (Phase.INTENT, "charge#1"),
            (Phase.TAKEN_OVER, None),
            (Phase.FAILED, "charge#1"),
        ]


class TestLeasesOfOtherHosts:
    def test_an_expired_lease_is_stalled_a_live_one_is_held(self, shared_store_url: str) -> None:
        """Expired elsewhere: 'no live worker since' its expiry; running: 'held by … until'.

        An ended saga shows no worker.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        try:
            journal = sagacity.journal
            now = sagacity.now()
            hour = datetime.timedelta(hours=1)
            for saga_id in ("far-dead", "far-live", "ended"):
                journal.append(saga_id, Phase.INTENT, tool_name="t", call_id="t#1", payload={})
            journal.append("ended", Phase.ENDED, payload={"outcome": "COMPLETED"})
            journal.acquire_lease(
                "far-dead", "far-host:4242:abcd1234:ns1", now=now - hour, expires_at=now - hour
            )
            journal.acquire_lease(
                "far-live", "far-host:4243:abcd1234:ns1", now=now, expires_at=now + hour
            )
            expired = (now - hour).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            until = (now + hour).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        finally:
            sagacity.close()
        db = ("--database", shared_store_url)
        listed = {d["saga_id"]: d for d in _lines(run_cli("sagas", "--json", *db))}
        assert listed["far-dead"]["worker"] == {
            "live": False,
            "holder": "far-host:4242:abcd1234:ns1",
            "expires_at": expired,
            "since": expired,
            "gone": False,
        }
        assert listed["far-live"]["worker"] == {
            "live": True,
            "holder": "far-host:4243:abcd1234:ns1",
            "expires_at": until,
            "since": None,
            "gone": False,
        }
        assert (listed["ended"]["worker"], listed["ended"]["stalled"]) == (None, False)
        stalled = _lines(run_cli("sagas", "--status", "STALLED", "--json", *db))
        assert [d["saga_id"] for d in stalled] == ["far-dead"]
        table = run_cli("sagas", "--status", "STALLED", *db).stdout
        assert (
            f"no live worker since {expired} (far-host:4242:abcd1234:ns1 stopped renewing "
            "its lease)"
        ) in table
        shown = run_cli("show", "far-live", *db).stdout.splitlines()
        assert shown[1] == f"worker: held by far-host:4243:abcd1234:ns1 until {until}"

    def test_what_needs_a_human_includes_stalled_sagas(self, shared_store_url: str) -> None:
        """--status takes several statuses: NEEDS_ATTENTION,COMPENSATION_FAILED,STALLED."""
        sagacity = Sagacity.from_url(shared_store_url)
        try:
            journal = sagacity.journal
            now = sagacity.now()
            journal.append("a-attention", Phase.ENDED, payload={"outcome": "NEEDS_ATTENTION"})
            journal.append("b-stalled", Phase.INTENT, tool_name="t", call_id="t#1", payload={})
            journal.acquire_lease("b-stalled", "x:1:ab:ns1", now=now, expires_at=now)
            journal.append("c-done", Phase.ENDED, payload={"outcome": "COMPLETED"})
        finally:
            sagacity.close()
        wanted = "NEEDS_ATTENTION,COMPENSATION_FAILED,STALLED"
        found = _lines(
            run_cli("sagas", "--status", wanted, "--json", "--database", shared_store_url)
        )
        assert [d["saga_id"] for d in found] == ["a-attention", "b-stalled"]
        bad = run_cli("sagas", "--status", "OPEN,STALE", "--database", shared_store_url)
        assert bad.returncode == 2
        assert bad.stderr.startswith("sagacity sagas: --status 'STALE' is not one of ")
