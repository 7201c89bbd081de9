"""Group commit: appends that arrive while a commit is in flight are committed together.

A journal on a database pays for a durable commit per append. When many sagas append at
once (threads of sync sagas, or async sagas awaiting the journal from one event loop),
the appends that arrive while a commit is in flight wait for it, then go to the database
as one batch in one transaction: one commit makes them all durable. Each caller still
returns only once its own entry is committed, and a batch keeps every append's own
semantics (a conditional or fenced append refused in a batch fails alone).

- **Sync callers** lead by turns (leader/follower, as databases do it for their log):
  a caller that finds nothing in flight appends on its own thread, as before group
  commit existed; a caller that finds a commit in flight queues, and when that commit
  ends one of the waiting callers commits the whole queue on its thread. No thread hop.
- **Async callers** (`aappend`) queue too, and the loop awaits their commit: a writer
  thread of the journal leads when no sync caller does, and wakes the waiting task with
  one callback on its loop. The event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from sagacity.errors import JournalError
from sagacity.journal._cancels import (
    RECORDS_AN_OUTCOME,
    AppendWithdrawn,
    CommittedThenCancelled,
    cancel_of,
    committed,
    finished,
    kept,
    through_cancels,
)
from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import JournalEntry, Phase
from sagacity.journal._lease import SagaLease

T = TypeVar("T")

__all__ = [
    "RECORDS_AN_OUTCOME",
    "AppendRequest",
    "AppendWithdrawn",
    "CommittedThenCancelled",
    "GroupCommit",
    "GroupStats",
    "Slots",
    "cancel_of",
    "committed",
    "finished",
    "kept",
    "through_cancels",
]


class AppendRequest(NamedTuple):
    """One append, as `SideEffectJournal.append` was asked for it.

    A named tuple: made on every append, it must cost less than a frozen dataclass.
    """

    saga_id: str
    phase: Phase
    tool_name: str | None = None
    call_id: str | None = None
    ref_seq: int | None = None
    payload: JsonValue = None
    expected_seq: int | None = None
    fence: SagaLease | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GroupStats:
    """How a journal's commits went, counted since it was opened."""

    commits: int
    """Commits made: one per append alone, one per batch."""
    batched: int
    """Appends committed in batches of more than one."""
    largest: int
    """The largest batch committed."""


CommitOne = Callable[[AppendRequest], JournalEntry]
CommitMany = Callable[[Sequence[AppendRequest]], list[JournalEntry | BaseException]]


class _Pending:
    __slots__ = ("future", "request")

    def __init__(self, request: AppendRequest) -> None:
        self.request = request
        self.future: concurrent.futures.Future[JournalEntry] = concurrent.futures.Future()


class Slots:
    """The commits in flight, and whether another may start or must wait to be batched.

    At most `most` commits are in flight (one per connection). Appends queue, to go in
    the next batch, behind `fresh` commits started less than `STALE_AFTER` ago: a
    client that sends fewer, larger commits spends less of its interpreter per append
    than one that sends one commit per append, however many the server could overlap.
    A commit in flight longer than that (waiting on a lock: an operator's pause, a
    takeover) no longer holds the others back.

    Not thread-safe: its owner guards it.
    """

    STALE_AFTER = 0.01
    """Seconds after which a commit in flight no longer makes appends wait."""

    def __init__(self, most: int, fresh: int | None = None) -> None:
        self.most = max(1, most)
        self.fresh = self.most if fresh is None else max(1, min(fresh, self.most))
        self.stale_after: float | None = None
        """Seconds after which a commit goes stale here; None: `STALE_AFTER`."""
        self._started: dict[int, float] = {}
        self._tokens = 0

    def __len__(self) -> int:
        return len(self._started)

    def free(self, now: float) -> bool:
        """Whether a commit may start now."""
        started = self._started
        if len(started) >= self.most:
            return False
        if len(started) < self.fresh:
            return True
        since = now - self._stale_after()
        return sum(1 for at in started.values() if at > since) < self.fresh

    def start(self, now: float) -> int:
        """Count a commit that starts; the token ends it."""
        self._tokens += 1
        self._started[self._tokens] = now
        return self._tokens

    def start_if_idle(self, now: float) -> int | None:
        """`start` when no commit is in flight (then one may start); else None.

        The path of an append that comes alone, in one call: with nothing in flight, a
        commit may start whatever `most` and `fresh` are.
        """
        if self._started:
            return None
        self._tokens += 1
        self._started[self._tokens] = now
        return self._tokens

    def end(self, token: int) -> None:
        del self._started[token]

    def recheck_in(self, now: float) -> float | None:
        """Seconds until `free` may turn true with no commit ending, or None.

        None when only a commit's end can free a slot; else when the oldest commit in
        flight goes stale.
        """
        if len(self._started) >= self.most or not self._started:
            return None
        stale_at = min(self._started.values()) + self._stale_after()
        return max(stale_at - now, 0.0) + 0.0005  # a little after: `free` is then true

    def _stale_after(self) -> float:
        return self.STALE_AFTER if self.stale_after is None else self.stale_after


class GroupCommit:
    """Commits a journal's appends alone when they come alone, together when they overlap.

    Args:
        one: Commits one append (the journal's ordinary path); raises what the append
            raises.
        many: Commits several appends in one transaction; returns, in order, each one's
            entry or the error that refused it alone; raises when the transaction failed
            as a whole (then none of them was committed by it).
        name: Names the writer threads.
        leaders: How many commits may be in flight at once (each on its own connection).
        fresh: Behind how many fresh commits in flight appends queue (see `Slots`);
            `leaders` by default.
        writers: How many writer threads may lead for async callers (at most `leaders`):
            more threads than that contend for the interpreter more than they overlap.
    """

    def __init__(
        self,
        one: CommitOne,
        many: CommitMany,
        *,
        name: str,
        leaders: int = 1,
        fresh: int | None = None,
        writers: int = 1,
    ) -> None:
        self._one = one
        self._many = many
        self._name = name
        self._slots = Slots(leaders, fresh)
        self._max_writers = max(1, min(writers, self._slots.most))
        self._mutex = threading.Lock()
        """The condition's lock: the path of an append that comes alone takes it directly,
        without the condition's Python-level wrappers."""
        self._changed = threading.Condition(self._mutex)
        self._queue: list[_Pending] = []
        self._writers: list[threading.Thread] = []
        self._idle_writers = 0
        self._sleepers = 0
        """Threads waiting on the condition: a commit that ends wakes them, if any."""
        self._closed = False
        self._commits = self._batched = self._largest = 0

    @property
    def stats(self) -> GroupStats:
        """How many commits, how many appends in batches, and the largest batch."""
        with self._changed:
            return GroupStats(commits=self._commits, batched=self._batched, largest=self._largest)

    @property
    def _in_flight(self) -> int:
        return len(self._slots)

    def append(self, request: AppendRequest) -> JournalEntry:
        """Commit `request` from a sync caller; return its entry once it is durable."""
        with self._mutex:
            token = None if self._queue else self._slots.start_if_idle(time.monotonic())
            if token is not None:
                self._commits += 1
        if token is not None:
            try:
                return self._one(request)  # alone: on this thread, as without group commit
            finally:
                with self._mutex:
                    self._slots.end(token)
                    if self._sleepers:
                        # Wakes the callers queued meanwhile: one of them leads next.
                        self._changed.notify_all()
        return self._queued(request)

    def _queued(self, request: AppendRequest) -> JournalEntry:
        """Queue `request` behind the commits in flight, or lead it when one may start."""
        changed = self._changed
        with changed:
            now = time.monotonic()
            if not self._queue and self._slots.free(now):
                token = self._slots.start(now)
                self._count(1)
                pending = None
            else:
                pending = _Pending(request)
                self._queue.append(pending)
        if pending is None:
            try:
                return self._one(request)  # a commit may start beside those in flight
            finally:
                self._finished(token)
        future = pending.future
        while True:
            with changed:
                while not future.done() and not self._may_lead():
                    self._wait()
                if future.done():
                    break
                batch, token = self._take()
            self._commit(batch, token)
        return future.result()

    def _may_lead(self) -> bool:
        """Whether a queue waits and a commit may start (under the condition)."""
        return bool(self._queue) and self._slots.free(time.monotonic())

    def _wait(self) -> None:
        """Wait for a commit to end, or for a fresh one to go stale (under the condition)."""
        self._sleepers += 1
        self._changed.wait(self._slots.recheck_in(time.monotonic()) if self._queue else None)
        self._sleepers -= 1

    def submit(self, request: AppendRequest) -> concurrent.futures.Future[JournalEntry]:
        """Queue `request` for a writer; the future is done once it is durable (or refused).

        Cancelling the future before its batch starts withdraws the append: nothing is
        written. Once its batch has started, cancelling fails and the append goes on.
        """
        pending = _Pending(request)
        with self._changed:
            if self._closed:
                raise JournalError(
                    f"saga {request.saga_id!r}: cannot append {request.phase.value}: "
                    f"{self._name} is closed; open a new journal"
                )
            self._queue.append(pending)
            # A writer must exist even while a sync caller leads: when that commit ends,
            # no sync caller may be left to commit this one.
            if self._idle_writers == 0 and len(self._writers) < self._max_writers:
                thread = threading.Thread(
                    target=self._write, name=f"{self._name}-writer", daemon=True
                )
                self._writers.append(thread)
                thread.start()
            if self._slots.free(time.monotonic()):
                self._changed.notify_all()
        return pending.future

    async def aappend(self, request: AppendRequest) -> JournalEntry:
        """Commit `request` from async code; return its entry once it is durable.

        The loop awaits a writer thread, which wakes the task with one callback on its
        loop: a future wrapped and shielded would cost the loop two more turns, a tenth
        of the hop. Cancelled, the caller never guesses: an append whose batch has not
        started is withdrawn (`AppendWithdrawn`: nothing is written), unless it records
        an outcome; one being committed is waited for, and `CommittedThenCancelled`
        carries its entry (see `committed`).
        """
        woken = asyncio.get_running_loop().create_future()
        future = self.submit(request)
        future.add_done_callback(functools.partial(_wake, woken))
        try:
            await woken
        except asyncio.CancelledError as cancelled:
            if request.phase not in RECORDS_AN_OUTCOME and future.cancel():
                raise cancel_of(AppendWithdrawn(), cancelled) from None
            caught = cancelled
        else:
            return future.result()
        return await kept(asyncio.wrap_future(future), caught)  # under way: see it through

    def close(self) -> None:
        """Commit what is queued, then stop the writer threads."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            writers = list(self._writers)
        for thread in writers:
            if thread is not threading.current_thread():
                thread.join(timeout=30)

    def count(self, appends: int) -> None:
        """Count a commit of `appends` appends made outside this group (an async path's)."""
        with self._changed:
            self._count(appends)

    def _count(self, appends: int) -> None:
        self._commits += 1
        if appends > 1:
            self._batched += appends
            self._largest = max(self._largest, appends)

    def _take(self) -> tuple[list[_Pending], int]:
        """Take the whole queue as the next batch, and its slot (under the condition)."""
        batch, self._queue = self._queue, []
        self._count(len(batch))
        return batch, self._slots.start(time.monotonic())

    def _finished(self, token: int) -> None:
        with self._changed:
            self._slots.end(token)
            if self._sleepers:
                # Wakes the callers whose entries this commit settled, and the next leader.
                self._changed.notify_all()

    def _commit(self, batch: list[_Pending], token: int) -> None:
        """Commit a batch, settle each caller's future, and let the next leader go."""
        try:
            # A future cancelled before its batch started is withdrawn: nothing is written.
            live = [p for p in batch if p.future.set_running_or_notify_cancel()]
            results: list[JournalEntry | BaseException]
            if len(live) == 1:
                try:
                    results = [self._one(live[0].request)]
                except BaseException as error:
                    results = [error]
            elif live:
                try:
                    results = self._many([p.request for p in live])
                except BaseException as error:
                    results = [error] * len(live)
            else:
                results = []
            for pending, result in zip(live, results, strict=True):
                if isinstance(result, BaseException):
                    pending.future.set_exception(result)
                else:
                    pending.future.set_result(result)
        finally:
            self._finished(token)

    def _write(self) -> None:
        """A writer thread: leads a batch whenever async appends wait and no one leads."""
        changed = self._changed
        while True:
            with changed:
                self._idle_writers += 1
                while not self._may_lead():
                    if self._closed and not self._queue:
                        self._idle_writers -= 1
                        return
                    self._wait()
                self._idle_writers -= 1
                batch, token = self._take()
            self._commit(batch, token)


def _wake(woken: asyncio.Future[None], _: object) -> None:
    """Wake the task awaiting `woken`, from any thread (a closed loop has no one to wake)."""
    loop = woken.get_loop()
    with contextlib.suppress(RuntimeError):  # closed
        loop.call_soon_threadsafe(_set_woken, woken)


def _set_woken(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # not cancelled meanwhile
        woken.set_result(None)
