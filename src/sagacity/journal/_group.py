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
- **Async callers** (`submit`) queue too, and get a `concurrent.futures.Future`, which
  the loop awaits: a writer thread of the journal leads when no sync caller does. The
  event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from sagacity.errors import JournalError
from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import JournalEntry, Phase
from sagacity.journal._lease import SagaLease

__all__ = [
    "AppendRequest",
    "AppendWithdrawn",
    "CommittedThenCancelled",
    "GroupCommit",
    "GroupStats",
    "committed",
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
        writers: How many writer threads may lead for async callers (at most `leaders`):
            more threads than that contend for the interpreter more than they overlap.
    """

    def __init__(
        self, one: CommitOne, many: CommitMany, *, name: str, leaders: int = 1, writers: int = 1
    ) -> None:
        self._one = one
        self._many = many
        self._name = name
        self._leaders = max(1, leaders)
        self._max_writers = max(1, min(writers, self._leaders))
        self._changed = threading.Condition(threading.Lock())
        self._queue: list[_Pending] = []
        self._in_flight = 0
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

    def append(self, request: AppendRequest) -> JournalEntry:
        """Commit `request` from a sync caller; return its entry once it is durable."""
        changed = self._changed
        with changed:
            if self._in_flight < self._leaders and not self._queue:
                self._in_flight += 1
                self._commits += 1
                pending = None
            else:
                pending = _Pending(request)
                self._queue.append(pending)
        if pending is None:
            try:
                return self._one(request)  # alone: on this thread, as without group commit
            finally:
                self._finished()
        future = pending.future
        while True:
            with changed:
                while not future.done() and (self._in_flight >= self._leaders or not self._queue):
                    self._sleepers += 1
                    changed.wait()
                    self._sleepers -= 1
                if future.done():
                    break
                batch = self._take()
            self._commit(batch)
        return future.result()

    def submit(self, request: AppendRequest) -> concurrent.futures.Future[JournalEntry]:
        """Queue `request` from async code; the future is done once it is durable (or refused).

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
            if self._in_flight < self._leaders:
                self._changed.notify_all()
        return pending.future

    def close(self) -> None:
        """Commit what is queued, then stop the writer threads."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            writers = list(self._writers)
        for thread in writers:
            if thread is not threading.current_thread():
                thread.join(timeout=30)

    def _take(self) -> list[_Pending]:
        """Take the whole queue as the next batch (under the condition)."""
        batch, self._queue = self._queue, []
        self._in_flight += 1
        self._commits += 1
        if len(batch) > 1:
            self._batched += len(batch)
            self._largest = max(self._largest, len(batch))
        return batch

    def _finished(self) -> None:
        with self._changed:
            self._in_flight -= 1
            if self._sleepers:
                # Wakes the callers whose entries this commit settled, and the next leader.
                self._changed.notify_all()

    def _commit(self, batch: list[_Pending]) -> None:
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
            self._finished()

    def _write(self) -> None:
        """A writer thread: leads a batch whenever async appends wait and no one leads."""
        changed = self._changed
        while True:
            with changed:
                self._idle_writers += 1
                while self._in_flight >= self._leaders or not self._queue:
                    if self._closed and not self._queue:
                        self._idle_writers -= 1
                        return
                    self._sleepers += 1
                    changed.wait()
                    self._sleepers -= 1
                self._idle_writers -= 1
                batch = self._take()
            self._commit(batch)


class AppendWithdrawn(asyncio.CancelledError):
    """The awaiting task was cancelled before its append's batch started: nothing was written."""


class CommittedThenCancelled(asyncio.CancelledError):
    """The awaiting task was cancelled while its append was committed; it was written."""

    def __init__(self, entry: JournalEntry) -> None:
        super().__init__(f"saga {entry.saga_id!r}: seq {entry.seq} was committed, then cancelled")
        self.entry = entry
        """The entry, durable in the journal."""


async def committed(future: concurrent.futures.Future[JournalEntry]) -> JournalEntry:
    """Await an append submitted to a `GroupCommit` without blocking the event loop.

    Cancellation never leaves the caller guessing: an append whose batch has not
    started is withdrawn (`AppendWithdrawn`: nothing is written); one already being
    committed is waited for (a commit takes milliseconds), and `CommittedThenCancelled`
    carries its entry. Both are `CancelledError`s, so the task ends cancelled as asked,
    and the caller, which never sees the entry returned, does not act on it: a tool
    whose INTENT was being committed is not started.
    """
    waiting = asyncio.wrap_future(future)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        if future.cancel():
            raise AppendWithdrawn() from None
    while True:  # the commit is under way: wait for it, through any further cancel
        try:
            entry = await asyncio.shield(waiting)
        except asyncio.CancelledError:
            continue
        except BaseException:
            raise asyncio.CancelledError() from None  # not written, or in doubt: unknown
        raise CommittedThenCancelled(entry)
