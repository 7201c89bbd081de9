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
from sagacity.journal._group import AppendRequest, Slots
from sagacity.journal.postgres import _threads
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


class Holding:
    """Commits of sagas named `held…` that wait for the test, and how many are in flight."""

    def __init__(self) -> None:
        self.committed: list[str] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.in_flight = 0

    def one(self, request: AppendRequest) -> JournalEntry:
        if request.saga_id.startswith("held"):
            with self.lock:
                self.in_flight += 1
            assert self.release.wait(30)
            with self.lock:
                self.in_flight -= 1
        with self.lock:
            self.committed.append(request.saga_id)
        return entry_for(request)

    def many(self, requests: Sequence[AppendRequest]) -> list[JournalEntry | BaseException]:
        with self.lock:
            self.committed.extend(r.saga_id for r in requests)
        return [entry_for(r) for r in requests]


def appending(group: ThreadGroup, saga_id: str) -> threading.Thread:
    thread = threading.Thread(target=group.append, args=(AppendRequest(saga_id, Phase.INTENT),))
    thread.start()
    return thread


def crowd(group: ThreadGroup, threads: int) -> None:
    """Have `threads` threads append once each (not held), all alive at once: distinct."""
    appended = threading.Barrier(threads)

    def append(n: int) -> None:
        group.append(AppendRequest(f"crowd-{n}", Phase.INTENT))
        appended.wait(30)

    workers = [threading.Thread(target=append, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert len(group._seen) == threads


@pytest.fixture
def judged_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group counts its threads at every append, over an hour."""
    monkeypatch.setattr(_threads, "_JUDGE_EVERY", 0.0)
    monkeypatch.setattr(_threads, "CROWD_WINDOW", 3600.0)


def test_no_more_threads_than_slots_commit_each_at_once(judged_at_once: None) -> None:
    """Three threads, four slots: the three appends are in flight together, none queued."""
    db = Holding()
    group = ThreadGroup(db.one, db.many, leaders=4, fresh=1)
    threads = [appending(group, f"held-{n}") for n in range(3)]
    until(lambda: db.in_flight == 3, "three commits in flight at once")
    assert group._queue == []
    db.release.set()
    for thread in threads:
        thread.join(30)
    assert sorted(db.committed) == ["held-0", "held-1", "held-2"]


def test_more_threads_than_slots_queue_behind_one_commit(
    judged_at_once: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More threads than slots: an append waits for the fresh commit in flight.

    A slot is free, yet the append goes only after that commit ends, in one batch with
    the one queued beside it.
    """
    monkeypatch.setattr(_threads, "CROWDED_STALE", 3600.0)
    db = Holding()
    group = ThreadGroup(db.one, db.many, leaders=2, fresh=1)
    crowd(group, 3)
    held = appending(group, "held")
    until(lambda: db.in_flight == 1, "the held commit in flight")
    behind = [appending(group, f"behind-{n}") for n in range(2)]
    until(lambda: len(group._queue) == 2, "both appends queued")
    assert not group._slots.free(time.monotonic())  # one slot of two is idle, yet no commit
    assert "behind-0" not in db.committed
    db.release.set()
    for thread in [held, *behind]:
        thread.join(30)
    assert db.committed[3] == "held"
    assert sorted(db.committed[4:]) == ["behind-0", "behind-1"]
    assert group.stats.largest == 2  # the two in one batch


def test_a_crowded_commit_in_flight_too_long_stops_holding_appends_back(
    judged_at_once: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More threads than slots: a commit in flight past `CROWDED_STALE` holds no one back.

    (A stalled leader, a lock.) The next append takes the free slot while it is in flight.
    """
    monkeypatch.setattr(_threads, "CROWDED_STALE", 0.05)
    monkeypatch.setattr(Slots, "STALE_AFTER", 3600.0)  # the crowded limit, not this one
    db = Holding()
    group = ThreadGroup(db.one, db.many, leaders=2, fresh=1)
    crowd(group, 3)
    held = appending(group, "held")
    until(lambda: db.in_flight == 1, "the held commit in flight")
    behind = appending(group, "behind")
    until(lambda: "behind" in db.committed, "the append behind the stale commit committed")
    assert db.in_flight == 1  # while the held one is still in flight
    db.release.set()
    held.join(30)
    behind.join(30)
    assert db.committed[3:] == ["behind", "held"]
