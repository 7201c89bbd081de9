"""Standing grants raced across processes on PostgreSQL: the grant's chain orders them.

Two processes consume one grant as fast as they can. Used up, no more calls than its
budget ran; revoked from a third process while they run, every call that ran consumed
the grant before the REVOKED entry, and the first call each process makes after it asks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity, verify
from sagacity.journal import JournalEntry
from tests._postgres import postgres_url_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to a fresh schema, dropped after the test."""
    yield from postgres_url_for(request)


def _consumers(url: str, ledger: Path, count: int = 2) -> list[subprocess.Popen[str]]:
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.approval._grant_child", url, f"p{n}", str(ledger)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    # Started together, and on once each has paid: neither a child's start-up nor a
    # loaded machine lets one child spend the whole budget before another pays at all.
    for said in ("started\n", "paid\n"):
        for child in children:
            assert child.stdout is not None
            assert child.stderr is not None
            line = child.stdout.readline()
            assert line == said, line or child.stderr.read()  # nothing: it died, say why
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
    for child in children:
        assert child.stdin is not None
        child.stdin.close()
    return children


def _finished(children: list[subprocess.Popen[str]]) -> list[str]:
    """Wait for each child to stop at its first asked call; return what each printed last."""
    last = []
    for child in children:
        # Read through the pipe's own reader: `communicate` reads the descriptor and would
        # miss what `readline` buffered with "started" (a child asked at once).
        assert child.stdout is not None
        assert child.stderr is not None
        with child:  # closes the pipes and waits
            out, err = child.stdout.read(), child.stderr.read()
        assert child.returncode == 0, err
        last.append(out.strip().splitlines()[-1] if out.strip() else "")
    return last


def _covered_intents(sagacity: Sagacity) -> list[JournalEntry]:
    found = []
    for saga_id in sagacity.journal.list_sagas(limit=10_000):
        for entry in sagacity.history(saga_id):
            payload = entry.payload
            if entry.phase is Phase.INTENT and "approval_grant" in (payload or {}):  # type: ignore[operator]
                found.append(entry)
    return found


def _check_each_run_call_consumed_before(
    sagacity: Sagacity, chain: list[JournalEntry], ledger: Path, limit_seq: int
) -> list[JournalEntry]:
    """Check the calls that ran against the grant's chain, and return their INTENTs.

    Each names a GRANT_USED of this chain, for its own call, before `limit_seq`; one
    GRANT_USED per call; the ledger holds exactly those calls.
    """
    uses = {e.seq: e for e in chain if e.phase is Phase.GRANT_USED}
    intents = _covered_intents(sagacity)
    for intent in intents:
        record = intent.payload["approval_grant"]  # type: ignore[call-overload,index]
        used = uses[record["grant_seq"]]
        assert used.seq < limit_seq
        assert used.hash == record["grant_hash"]
        assert (used.payload["saga_id"], used.payload["call_id"]) == (  # type: ignore[call-overload,index]
            intent.saga_id,
            intent.call_id,
        )
    assert sorted(i.payload["approval_grant"]["grant_seq"] for i in intents) == sorted(uses)  # type: ignore[call-overload,index]
    assert sorted(ledger.read_text().split()) == sorted(i.saga_id for i in intents)
    return intents


class TestGrantRaces:
    def test_two_processes_never_run_more_calls_than_the_budget(
        self, pg_url: str, tmp_path: Path
    ) -> None:
        """max_calls=7 between two processes: exactly 7 calls run, each consumed once."""
        ledger = tmp_path / "ledger"
        sagacity = Sagacity.from_url(pg_url)
        try:
            grant = sagacity.grant("pay", grantor="carol", max_calls=7, ttl=600)
            children = _consumers(pg_url, ledger)
            last = _finished(children)
            assert all(line.startswith("asked p") for line in last), last

            chain = sagacity.history(f"grant-{grant.grant_id}")
            assert [e.phase for e in chain] == [Phase.GRANTED] + [Phase.GRANT_USED] * 7
            intents = _check_each_run_call_consumed_before(sagacity, chain, ledger, 10**9)
            assert len(intents) == 7
            assert sagacity.get_grant(grant.grant_id).state == "exhausted"
            assert verify(sagacity.journal).ok
        finally:
            sagacity.close()

    def test_a_revocation_racing_two_processes_stops_every_later_call(
        self, pg_url: str, tmp_path: Path
    ) -> None:
        """Revoked while both consume: nothing consumes after REVOKED, each then asks."""
        ledger = tmp_path / "ledger"
        sagacity = Sagacity.from_url(pg_url)
        try:
            grant = sagacity.grant("pay", grantor="carol", max_calls=100_000, ttl=600)
            chain_id = f"grant-{grant.grant_id}"
            children = _consumers(pg_url, ledger)
            deadline = time.monotonic() + 60
            # Wait until both processes have consumed: the revocation lands mid-stream.
            while {
                e.payload["saga_id"].split("-")[0]  # type: ignore[call-overload,index,union-attr]
                for e in sagacity.history(chain_id)
                if e.phase is Phase.GRANT_USED
            } != {"p0", "p1"}:
                assert time.monotonic() < deadline, "the consumers never both consumed"
                assert all(c.poll() is None for c in children)

            revoked = sagacity.revoke(grant.grant_id, revoked_by="dave")
            assert revoked.state == "revoked"
            last = _finished(children)

            chain = sagacity.history(chain_id)
            (revocation,) = [e for e in chain if e.phase is Phase.REVOKED]
            assert chain[-1] == revocation  # nothing consumed after it
            intents = _check_each_run_call_consumed_before(sagacity, chain, ledger, revocation.seq)
            assert len(intents) == len(chain) - 2 >= 2
            # Each process's first call after the revocation asked a human.
            for line in last:
                asked = sagacity.history(line.split()[1])
                assert [e.phase for e in asked] == [Phase.AWAITING_APPROVAL]
                assert asked[0].recorded_at > revocation.recorded_at
            assert verify(sagacity.journal).ok
        finally:
            sagacity.close()
