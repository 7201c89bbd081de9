"""Group commit for a PostgreSQL journal's sync callers: threads that append at once.

Appends that overlap commits in flight wait, then go to the server as one batch, one
statement and one commit for all (`_batch.py`); each caller returns once its own entry
is committed, or raises its own refusal. Leader/follower, as databases do it for their
log: a caller that finds a free commit slot and nothing queued commits on its own thread;
one that finds none queues, and when a commit ends, one waiting caller takes the whole
queue and commits it on its thread. No thread hop.

What differs from `journal._group.GroupCommit`, which SQLite uses:

- **Each waiting thread is woken for a reason of its own**, never all at once: the callers
  whose entries a commit settled, and the one caller chosen to lead the next batch. With
  sixteen threads, waking every waiter at every commit (`Condition.notify_all`) took a
  quarter of the interpreter's time, every waiter taking the interpreter's lock in turn
  only to go back to sleep.
- **One commit in flight per saga, in this journal.** An append whose saga has a commit in
  flight here waits for it, then goes in the next batch, sealed on the head that commit
  left: two commits sealed on the same head would meet on the primary key, and the loser
  would take the locked path (and hold the saga on it for a while), which is how eight
  threads appending to one saga made half of what one thread made. The order of the
  appends to one saga is the order they came in.

How many commits go at once depends on how many threads append (docs/postgres.md, Group
commit; the measurements are in docs/performance.md):

- **No more threads than commit slots** (`leaders`): each append is committed at once, on
  a slot of its own, and the server merges the WAL flushes of the commits that overlap.
- **More threads than slots**, counted over the last `CROWD_WINDOW`: appends queue behind
  `fresh` commits in flight (one, in a journal) started less than `CROWDED_STALE` ago,
  and go as one batch when it ends. Committed one by one, sixteen threads spent twice
  the client's CPU a call and three times the server's, and made about 40 % fewer calls
  a second. A commit in flight longer than that (a busy machine, a lock) stops holding
  the others back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from sagacity.journal._entry import JournalEntry
from sagacity.journal._group import AppendRequest, GroupStats, Slots

__all__ = ["ThreadGroup"]

CROWD_WINDOW = 0.05
"""Seconds: the threads that appended within them are the ones counted against the slots."""

CROWDED_STALE = 0.002
"""Seconds after which, with more threads than slots, a commit in flight no longer makes
appends wait: under a few batches' time here; waiting longer, a machine short of CPU
stalled every thread on a leader that was not running."""

_JUDGE_EVERY = 0.01
"""Seconds between two countings of the threads."""

_QUEUED, _LEAD, _TAKEN, _DONE = 0, 1, 2, 3
"""A waiter's state: in the queue, in it and asked to lead, in a batch, settled."""


class _Waiter:
    """One queued append and its caller's wake-up."""

    __slots__ = ("outcome", "request", "signalled", "state", "wake")

    def __init__(self, request: AppendRequest) -> None:
        self.request = request
        self.state = _QUEUED
        self.outcome: JournalEntry | BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()  # released by `_signal`: a wake-up for this waiter alone
        self.signalled = False


class ThreadGroup:
    """Commits a journal's sync appends alone when they come alone, together when they overlap.

    Args:
        one: Commits one append (the journal's ordinary path); raises what it raises.
        many: Commits several appends in one statement; returns, in order, each one's
            entry or the error that refused it alone.
        leaders: How many commits may be in flight at once (each on its own connection).
        fresh: Behind how many fresh commits in flight appends queue while more threads
            append than there are `leaders` (see `Slots`).
    """

    def __init__(
        self,
        one: Callable[[AppendRequest], JournalEntry],
        many: Callable[[Sequence[AppendRequest]], list[JournalEntry | BaseException]],
        *,
        leaders: int,
        fresh: int,
    ) -> None:
        self._one = one
        self._many = many
        self._guard = threading.Lock()
        self._slots = Slots(leaders)
        self._crowded_fresh = fresh
        self._seen: dict[int, float] = {}
        """The threads that appended lately, and when each last did."""
        self._judge_at = 0.0
        self._queue: list[_Waiter] = []
        self._busy: dict[str, int] = {}
        """Sagas with a commit in flight here, and how many (one, but for a batch's tail)."""
        self._next: _Waiter | None = None
        """The queued caller that leads the next batch, when a slot frees."""
        self._writers: list[threading.Thread] = []
        """Never any: sync callers lead on their own threads (async ones on their loop)."""
        self._commits = self._batched = self._largest = 0

    @property
    def stats(self) -> GroupStats:
        """How many commits, how many appends in batches, and the largest batch."""
        with self._guard:
            return GroupStats(commits=self._commits, batched=self._batched, largest=self._largest)

    def count(self, appends: int) -> None:
        """Count a commit of `appends` appends made outside this group (an async path's)."""
        with self._guard:
            self._count(appends)

    def _count(self, appends: int) -> None:
        self._commits += 1
        if appends > 1:
            self._batched += appends
            self._largest = max(self._largest, appends)

    def close(self) -> None:
        """Nothing to stop: what is queued is committed by its callers' threads."""

    def append(self, request: AppendRequest) -> JournalEntry:
        """Commit `request`; return its entry once it is durable, or raise its refusal."""
        saga_id = request.saga_id
        with self._guard:
            now = time.monotonic()
            self._seen[threading.get_ident()] = now
            if now >= self._judge_at:
                self._judge(now)
            if saga_id not in self._busy and self._slots.free(now) and not self._queue:
                token = self._slots.start(now)
                self._busy[saga_id] = 1
                self._count(1)
                waiter = None
            else:
                waiter = _Waiter(request)
                self._queue.append(waiter)
                if self._next is None:
                    self._next = waiter
                batch = self._take(now) if self._may_lead(now) else None
        if waiter is None:
            try:
                return self._one(request)  # alone: on this thread, as without group commit
            finally:
                self._end(token, (saga_id,), ())
        if batch is not None:
            self._commit(*batch)
        try:
            return self._await(waiter)
        except BaseException:
            self._withdraw(waiter)
            raise

    def _judge(self, now: float) -> None:
        """Under the guard: count the threads that appended lately, and queue accordingly."""
        since = now - CROWD_WINDOW
        self._seen = seen = {ident: at for ident, at in self._seen.items() if at > since}
        slots = self._slots
        if len(seen) > slots.most:
            slots.fresh, slots.stale_after = self._crowded_fresh, CROWDED_STALE
        else:
            slots.fresh, slots.stale_after = slots.most, None
        self._judge_at = now + _JUDGE_EVERY

    def _withdraw(self, waiter: _Waiter) -> None:
        """A caller interrupted while it waited: its append, if still queued, is dropped.

        Nothing of it was written; one already in a batch goes on (the caller is not
        told). Someone else is found to lead the next batch.
        """
        with self._guard:
            if waiter.state not in (_QUEUED, _LEAD):
                return
            self._queue.remove(waiter)
            waiter.state = _DONE
            if self._next is waiter:
                self._next = self._queue[0] if self._queue else None
                if self._next is not None:
                    self._next.state = _LEAD
                    self._signal(self._next)

    def _await(self, waiter: _Waiter) -> JournalEntry:
        """Wait until `waiter` is settled, leading batches when asked to."""
        while True:
            with self._guard:
                if waiter.state == _DONE:
                    break
                now = time.monotonic()
                batch = None
                if (waiter.state == _LEAD or waiter is self._next) and self._may_lead(now):
                    batch = self._take(now)
                elif waiter.state == _LEAD:
                    waiter.state = _QUEUED  # another caller took the queue meanwhile
                # Only the next leader looks at the clock: a fresh commit may go stale.
                timeout = self._slots.recheck_in(now) if waiter is self._next else None
            if batch is not None:
                self._commit(*batch)
                continue
            woken = waiter.wake.acquire(timeout=-1 if timeout is None else timeout)
            if woken:
                if waiter.state == _DONE:  # final, and set before the wake-up was sent
                    break
                with self._guard:
                    waiter.signalled = False
        outcome = waiter.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome

    def _may_lead(self, now: float) -> bool:
        """Under the guard: whether a queued append may be committed now."""
        if not self._queue or not self._slots.free(now):
            return False
        busy = self._busy
        return any(waiter.request.saga_id not in busy for waiter in self._queue)

    def _take(self, now: float) -> tuple[list[_Waiter], int]:
        """Under the guard: the queued appends of sagas with no commit in flight, and a slot."""
        busy = self._busy
        batch: list[_Waiter] = []
        left: list[_Waiter] = []
        for waiter in self._queue:
            (left if waiter.request.saga_id in busy else batch).append(waiter)
        self._queue = left
        for waiter in batch:
            waiter.state = _TAKEN
            saga_id = waiter.request.saga_id
            busy[saga_id] = busy.get(saga_id, 0) + 1
        if self._next is None or self._next.state != _QUEUED:
            self._next = left[0] if left else None
            if self._next is not None and self._slots.fresh < self._slots.most:
                self._signal(self._next)  # to wait with the clock in view
        self._count(len(batch))
        return batch, self._slots.start(now)

    def _commit(self, batch: list[_Waiter], token: int) -> None:
        """Commit a batch taken from the queue, and settle each of its appends."""
        outcomes: Sequence[JournalEntry | BaseException]
        try:
            if len(batch) == 1:
                try:
                    outcomes = [self._one(batch[0].request)]
                except BaseException as error:
                    outcomes = [error]
            else:
                try:
                    outcomes = self._many([waiter.request for waiter in batch])
                except BaseException as error:
                    outcomes = [error] * len(batch)
            for waiter, outcome in zip(batch, outcomes, strict=True):
                waiter.outcome = outcome
        finally:
            for waiter in batch:
                if waiter.outcome is None:  # interrupted before settling (KeyboardInterrupt)
                    waiter.outcome = RuntimeError("the commit of this append was interrupted")
            self._end(token, [waiter.request.saga_id for waiter in batch], batch)

    def _end(self, token: int, sagas: Sequence[str], settled: Sequence[_Waiter]) -> None:
        """A commit ended: wake its callers, free its sagas, and wake the next leader.

        The wake-ups are sent once the guard is let go: a caller woken while it is held
        would only wait for it again, and a batch's callers would queue on it one by one.
        """
        wakes: list[_Waiter] = []
        with self._guard:
            self._slots.end(token)
            busy = self._busy
            for saga_id in sagas:
                left = busy[saga_id] - 1
                if left:
                    busy[saga_id] = left
                else:
                    del busy[saga_id]
            following = self._next
            if following is not None and self._may_lead(time.monotonic()):
                following.state = _LEAD
                if self._mark(following):
                    wakes.append(following)
            for waiter in settled:
                waiter.state = _DONE
                if self._mark(waiter):
                    wakes.append(waiter)
        for waiter in wakes:
            waiter.wake.release()

    @staticmethod
    def _mark(waiter: _Waiter) -> bool:
        """Under the guard: whether `waiter` is to be woken (not once already, unwoken)."""
        if waiter.signalled:
            return False
        waiter.signalled = True
        return True

    @classmethod
    def _signal(cls, waiter: _Waiter) -> None:
        """Under the guard: wake `waiter` (once, until it has woken)."""
        if cls._mark(waiter):
            waiter.wake.release()
