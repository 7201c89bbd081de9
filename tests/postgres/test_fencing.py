"""PostgreSQL's fast path appends under a lease with no look at it: what keeps it fenced.

A takeover journals TAKEN_OVER at the seq the former holder would write next. A lease
released, or freed by an ENDED, is taken again without one, so no append of the former
holder may go unchecked past that point: a release with one of its appends under way
frees nothing (the lease expires, and is taken over), and none goes unchecked after it.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sagacity import LeaseLostError, Phase, SagaBusyError, SerializationError
from sagacity.journal import JournalEntry, SagaLease
from sagacity.journal.postgres import PostgresJournal
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
    assert journal._appender.heads["s"].fenced_by == lease.token
    return lease


def one_append(journal: PostgresJournal, lease: SagaLease) -> JournalEntry:
    return journal.append("s", Phase.INTENT, call_id="late", fence=lease)


def on_a_loop(journal: PostgresJournal, lease: SagaLease) -> JournalEntry:
    async def append() -> JournalEntry:
        return await journal.aappend("s", Phase.INTENT, call_id="late", fence=lease)

    return asyncio.run(append())


@pytest.mark.parametrize("send", [one_append, on_a_loop], ids=["sync", "async"])
def test_a_release_with_an_append_under_way_leaves_the_lease_to_expire(
    journals: tuple[PostgresJournal, PostgresJournal],
    admin: Admin,
    send: Callable[[PostgresJournal, SagaLease], JournalEntry],
) -> None:
    """An unchecked append held up in the server keeps its holder's release from freeing it.

    The next worker takes the saga over once the lease expires, and its TAKEN_OVER fences
    the append, which lands before it or is refused, never after it.
    """
    former, taker = journals
    lease = warm(former)
    admin.execute("BEGIN")  # every INSERT into the journal waits for this lock
    admin.execute(f"LOCK TABLE {former.database.tables.journal} IN SHARE MODE")
    outcome: list[JournalEntry | LeaseLostError] = []

    def late() -> None:
        try:
            outcome.append(send(former, lease))
        except LeaseLostError as refused:
            outcome.append(refused)

    sending = threading.Thread(target=late)
    later = T0 + 2 * MINUTE
    taking = threading.Thread(
        target=lambda: taker.acquire_lease("s", "taker", now=later, expires_at=later + MINUTE)
    )
    try:
        sending.start()
        blocked_backend(admin)
        former.release_lease(lease)  # returns at once, and frees nothing
        with pytest.raises(SagaBusyError, match="held by former"):
            taker.acquire_lease("s", "taker", now=T0, expires_at=T0 + MINUTE)
        taking.start()  # after the expiry: its TAKEN_OVER waits for the lock too
        time.sleep(0.2)
    finally:
        admin.execute("ROLLBACK")
    sending.join(10)
    taking.join(10)
    entries = taker.entries("s")
    marker = next(e for e in entries if e.phase is Phase.TAKEN_OVER)
    assert entries[marker.seq :] == []  # the new holder reads the journal from here
    if isinstance(outcome[0], JournalEntry):
        assert outcome[0].seq < marker.seq
    assert [e.call_id for e in entries[:2]] == ["c#1", "c#2"]


def test_a_refused_append_does_not_hold_the_release(
    journals: tuple[PostgresJournal, PostgresJournal],
) -> None:
    """An append refused before anything was sent is no longer under way.

    (Its payload has no canonical form.) The release frees the saga, and the next worker
    takes it at once, with no TAKEN_OVER.
    """
    former, taker = journals
    lease = warm(former)
    with pytest.raises(SerializationError):
        former.append("s", Phase.INTENT, call_id="big", payload=2**60, fence=lease)
    former.release_lease(lease)
    taker.acquire_lease("s", "taker", now=T0, expires_at=T0 + MINUTE)
    assert [e.phase for e in taker.entries("s")] == [Phase.INTENT, Phase.INTENT]


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
    assert former._appender.heads["s"].fenced_by is None  # accepted, checked, not held
    taker.acquire_lease("s", "taker", now=T0, expires_at=T0 + MINUTE)
    before = taker.entries("s")
    assert before[-1] == straggler
    with pytest.raises(LeaseLostError):
        former.append("s", Phase.EXECUTED, call_id="c#1", ref_seq=1, fence=lease)
    assert taker.entries("s") == before
