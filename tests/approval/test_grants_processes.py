"""Two processes consume one grant's amount on one SQLite file: never more than its maximum.

The PostgreSQL races are in `test_grants_race.py`; here the same consumers run against a
SQLite file, where the conditional append is the file lock's to serialise, and the grant
is limited by amount (each call pays 1, the grant allows 200 in all).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import Phase, Sagacity, verify
from tests.approval.test_grants_race import (
    _check_each_run_call_consumed_before,
    _consumers,
    _finished,
)

pytestmark = pytest.mark.slow


def test_two_processes_never_spend_more_than_the_amount(tmp_path: Path) -> None:
    """max_amount=200 in calls of 1 between two processes: 200 calls run, then each asks."""
    url = f"sqlite:///{tmp_path / 'sagacity.db'}"
    ledger = tmp_path / "ledger"
    with Sagacity.from_url(url) as sagacity:
        grant = sagacity.grant(
            "pay", grantor="carol", max_calls=1000, max_amount=200, amount_field="amount", ttl=600
        )
        last = _finished(_consumers(url, ledger))
        assert all(line.startswith("asked p") for line in last), last

        chain = sagacity.history(f"grant-{grant.grant_id}")
        assert [e.phase for e in chain] == [Phase.GRANTED] + [Phase.GRANT_USED] * 200
        intents = _check_each_run_call_consumed_before(sagacity, chain, ledger, 10**9)
        assert len(intents) == 200
        shown = sagacity.get_grant(grant.grant_id)
        assert (shown.state, shown.used_amount, shown.remaining_amount) == ("exhausted", "200", "0")
        assert verify(sagacity.journal).ok
        # Both processes consumed: the budget was raced for, not taken by one alone.
        assert {line.split("-")[0] for line in ledger.read_text().split()} == {"p0", "p1"}
