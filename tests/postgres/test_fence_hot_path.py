"""The lease fence off the hot path: a fenced append on the locked path fences the head.

`sagacity_append_locked` checks the lease's token under the saga's lock, so the entry it
writes is a head the token held the saga at: the next append under that lease is the
plain one-INSERT fast path, and a takeover since is still refused (its TAKEN_OVER holds
the seq that INSERT takes).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest

from sagacity import LeaseLostError, Phase
from sagacity.audit import verify
from sagacity.journal.postgres import PostgresJournal

pytestmark = pytest.mark.postgres

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)


@pytest.fixture
def journals(pg_url: str) -> Iterator[tuple[PostgresJournal, PostgresJournal]]:
    former, taker = PostgresJournal(pg_url), PostgresJournal(pg_url)
    yield former, taker
    former.close()
    taker.close()


def test_a_new_sagas_second_append_goes_unchecked(
    journals: tuple[PostgresJournal, PostgresJournal],
) -> None:
    """Lease at head 0, first append locked: the head is fenced, the second is one INSERT."""
    former, _ = journals
    lease = former.acquire_lease("s", "former", now=T0, expires_at=T0 + MINUTE)
    former.append("s", Phase.INTENT, call_id="c#1", fence=lease)
    assert former.stats.locked == 1
    assert former._appender.heads["s"].fenced_by == lease.token
    former.append("s", Phase.EXECUTED, call_id="c#1", ref_seq=1, fence=lease)
    assert (former.stats.fast, former.stats.locked) == (1, 1)


def test_a_takeover_after_the_locked_append_still_fences(
    journals: tuple[PostgresJournal, PostgresJournal],
) -> None:
    """The former holder's unchecked append meets TAKEN_OVER and is refused, nothing written."""
    former, taker = journals
    lease = former.acquire_lease("s", "former", now=T0, expires_at=T0 + MINUTE)
    former.append("s", Phase.INTENT, call_id="c#1", fence=lease)
    taken = taker.acquire_lease("s", "taker", now=T0 + 2 * MINUTE, expires_at=T0 + 3 * MINUTE)
    assert taken.token == lease.token + 1
    before = taker.entries("s")
    assert [e.phase for e in before] == [Phase.INTENT, Phase.TAKEN_OVER]
    with pytest.raises(LeaseLostError):
        former.append("s", Phase.EXECUTED, call_id="c#1", ref_seq=1, fence=lease)
    assert taker.entries("s") == before
    assert verify(taker, "s").ok


def test_a_released_lease_never_fences_from_the_locked_path(
    journals: tuple[PostgresJournal, PostgresJournal],
) -> None:
    """A token let go here fences no head, locked path or not: a straggler stays checked."""
    former, taker = journals
    lease = former.acquire_lease("s", "former", now=T0, expires_at=T0 + MINUTE)
    former.release_lease(lease)
    former._appender.heads.pop("s", None)  # the straggler takes the locked path
    former.append("s", Phase.INTENT, call_id="late", fence=lease)  # its token still holds
    assert former._appender.heads["s"].fenced_by is None
    taker.acquire_lease("s", "taker", now=T0, expires_at=T0 + MINUTE)  # released: no marker
    with pytest.raises(LeaseLostError):
        former.append("s", Phase.EXECUTED, call_id="late", ref_seq=1, fence=lease)
    assert [e.call_id for e in taker.entries("s")] == ["late"]
