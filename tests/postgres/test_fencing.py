"""PostgreSQL's fast path appends under a lease with no look at it: what keeps it fenced.

A takeover journals TAKEN_OVER at the seq the former holder would write next. A lease
released, or freed by an ENDED, is taken again without one, so an append of the former
holder must never go unchecked past that point: those on their way when the holder
releases are waited for, and none is sent unchecked after it.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sagacity import LeaseLostError, Phase
from sagacity.journal import JournalEntry, SagaLease
from sagacity.journal._group import AppendRequest
from sagacity.journal.postgres import PostgresJournal
from tests.postgres.test_batch_faults import commit_batch
from tests.postgres.test_faults import Admin, blocked_backend

pytestmark = pytest.mark.postgres

T0 = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)


@pytest.fixture
def journals(pg_url: str) -> Iterator[tuple[PostgresJournal, PostgresJournal]]:
    """The former holder's journal and the next worker's, on one schema."""
    former, taker = PostgresJournal(pg_url), PostgresJournal(pg_url)
    yield former, taker
    former.close()
    taker.close()


def warm(journal: PostgresJournal) -> SagaLease:
    """A lease on "s" whose token the journal knows to hold the head.

    The journal's next append under it goes with no look at the lease.
    """
    lease = journal.acquire_lease("s", "former", now=T0, expires_at=T0 + MINUTE)
    for n in (1, 2):  # the first is checked, and arms the head for the second
        journal.append("s", Phase.INTENT, call_id=f"c#{n}", fence=lease)
    assert journal._heads["s"].fenced_by == lease.token
    return lease


def one_append(journal: PostgresJournal, lease: SagaLease) -> JournalEntry:
    return journal.append("s", Phase.INTENT, call_id="late", fence=lease)


def in_a_batch(journal: PostgresJournal, lease: SagaLease) -> JournalEntry:
    (result,) = commit_batch(
        journal, [AppendRequest("s", Phase.INTENT, call_id="late", fence=lease)], "sync"
    )
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("send", [one_append, in_a_batch], ids=["alone", "in-a-batch"])
def test_a_release_waits_for_an_unchecked_append_on_its_way(
    journals: tuple[PostgresJournal, PostgresJournal],
    admin: Admin,
    send: Callable[[PostgresJournal, SagaLease], JournalEntry],
) -> None:
    """An unchecked append held up in the server when its holder releases lands first.

    The release waits for it, so the next worker, which journals no TAKEN_OVER after a
    release, reads it.
    """
    former, taker = journals
    lease = warm(former)
    admin.execute("BEGIN")  # every INSERT into the journal waits for this lock
    admin.execute(f"LOCK TABLE {former.database.tables.journal} IN SHARE MODE")
    sent: list[JournalEntry] = []
    released = threading.Event()
    sending = threading.Thread(target=lambda: sent.append(send(former, lease)))
    releasing = threading.Thread(target=lambda: (former.release_lease(lease), released.set()))
    try:
        sending.start()
        blocked_backend(admin)
        releasing.start()
        time.sleep(0.3)
        assert not released.is_set()  # it waits for the append on its way
    finally:
        admin.execute("ROLLBACK")
    sending.join(10)
    releasing.join(10)
    assert released.is_set()
    taker.acquire_lease("s", "taker", now=T0, expires_at=T0 + MINUTE)
    assert [e.call_id for e in taker.entries("s")] == ["c#1", "c#2", "late"]
    assert sent[0].seq == 3


@pytest.mark.parametrize("freed_by", ["release", "ENDED"])
def test_an_append_after_the_lease_was_let_go_is_checked_and_never_rearms(
    journals: tuple[PostgresJournal, PostgresJournal], freed_by: str
) -> None:
    """A straggler accepted after its holder let go (the token unchanged) arms nothing.

    Once the next worker took the saga, the straggler after it is refused.
    """
    former, taker = journals
    lease = warm(former)
    if freed_by == "release":
        former.release_lease(lease)
    else:
        former.append("s", Phase.ENDED, payload={"outcome": "COMPLETED"}, fence=lease)
    straggler = former.append("s", Phase.EXECUTED, call_id="c#2", ref_seq=2, fence=lease)
    assert former._heads["s"].fenced_by is None  # accepted, checked, not held
    taker.acquire_lease("s", "taker", now=T0, expires_at=T0 + MINUTE)
    before = taker.entries("s")
    assert before[-1] == straggler
    with pytest.raises(LeaseLostError):
        former.append("s", Phase.EXECUTED, call_id="c#1", ref_seq=1, fence=lease)
    assert taker.entries("s") == before
