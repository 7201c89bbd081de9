"""The sync group commit's own rules, with stand-ins for the database (no server needed).

A caller interrupted while its append waits in the queue withdraws it (nothing of it is
committed), and the caller queued behind it leads the next commit instead: no one is
left waiting for a leader that is gone.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

import pytest

from sagacity import Phase
from sagacity.journal import JournalEntry
from sagacity.journal._entry import seal
from sagacity.journal._group import AppendRequest
from sagacity.journal.postgres._threads import ThreadGroup


class Interrupted(BaseException):
    """What the test's signal raises in the waiting main thread (as Ctrl-C would)."""


def entry_for(request: AppendRequest) -> JournalEntry:
    entry, _ = seal(
        request.saga_id,
        1,
        request.phase,
        tool_name=None,
        call_id=None,
        ref_seq=None,
        payload=None,
        prev_hash="0" * 64,
    )
    return entry


class Database:
    """Commits that wait for the test to let them go, and what was committed, in order."""

    def __init__(self) -> None:
        self.committed: list[str] = []
        self.hold = threading.Event()
        self.holding = threading.Event()

    def one(self, request: AppendRequest) -> JournalEntry:
        if request.saga_id == "held":
            self.holding.set()
            assert self.hold.wait(30)
        self.committed.append(request.saga_id)
        return entry_for(request)

    def many(self, requests: Sequence[AppendRequest]) -> list[JournalEntry | BaseException]:
        self.committed.extend(r.saga_id for r in requests)
        return [entry_for(r) for r in requests]


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.002)


@pytest.fixture
def interrupt_main() -> Iterator[None]:
    def raise_interrupted(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    before = signal.signal(signal.SIGUSR1, raise_interrupted)
    yield
    signal.signal(signal.SIGUSR1, before)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_an_interrupted_next_leader_hands_over(interrupt_main: None) -> None:
    """The main thread queues first, then another; the main one is interrupted and leaves.

    Its append is never committed; the other is, once the commit in flight ends.
    """
    db = Database()
    group = ThreadGroup(db.one, db.many, leaders=1, fresh=1)
    results: dict[str, JournalEntry] = {}

    def append(saga_id: str) -> None:
        results[saga_id] = group.append(AppendRequest(saga_id, Phase.INTENT))

    held = threading.Thread(target=append, args=("held",))
    held.start()
    assert db.holding.wait(30)  # the one commit slot is taken
    behind = threading.Thread(target=append, args=("behind",))
    main = threading.main_thread().ident
    assert main is not None

    def queue_behind_then_interrupt() -> None:
        until(lambda: len(group._queue) == 1, "the main thread queued")
        behind.start()
        until(lambda: len(group._queue) == 2, "a second caller queued")
        signal.pthread_kill(main, signal.SIGUSR1)

    helper = threading.Thread(target=queue_behind_then_interrupt)
    helper.start()
    with pytest.raises(Interrupted):
        group.append(AppendRequest("withdrawn", Phase.INTENT))
    helper.join(30)
    assert [w.request.saga_id for w in group._queue] == ["behind"]
    assert group._next is not None
    assert group._next.request.saga_id == "behind"
    db.hold.set()
    held.join(30)
    behind.join(30)
    assert not behind.is_alive()
    assert db.committed == ["held", "behind"]  # the withdrawn append never was
    assert sorted(results) == ["behind", "held"]
    assert group._queue == []
    assert group._next is None


def test_appends_to_one_saga_never_share_a_commit_in_flight() -> None:
    """While a saga's commit is in flight, its next append waits, even with slots free."""
    db = Database()
    group = ThreadGroup(db.one, db.many, leaders=4, fresh=4)
    first = threading.Thread(target=group.append, args=(AppendRequest("held", Phase.INTENT),))
    first.start()
    assert db.holding.wait(30)
    second = threading.Thread(target=group.append, args=(AppendRequest("held", Phase.EXECUTED),))
    other = threading.Thread(target=group.append, args=(AppendRequest("other", Phase.INTENT),))
    second.start()
    until(lambda: len(group._queue) == 1, "the saga's second append queued")
    other.start()
    other.join(30)
    assert db.committed == ["other"]  # another saga goes by; the held saga's waits
    db.hold.set()
    first.join(30)
    second.join(30)
    assert db.committed == ["other", "held", "held"]
