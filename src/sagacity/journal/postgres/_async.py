"""PostgreSQL appends from async code, on psycopg's async connections, on the caller's loop.

An async append never hands its work to a thread: the event loop sends its statements on
a `psycopg.AsyncConnection` and awaits each answer, so one async saga costs what its
commits cost, and the loop is never blocked on the database. The statements are the
sync path's own (`_steps`), and so are the retries after a lost connection.

Each event loop has its own `LoopWriter`, its group commit: appends that find
`FRESH_COMMITS` commits in flight queue (see `Slots`), and when one ends the whole queue
goes as one batch (`_batch`): one statement and one commit for all; an append that finds
a slot free and nothing queued is committed by its caller's own task. At most
`pool_max_size` connections are out per loop at once.

The connections themselves are the journal's (`IdleConnections`): an idle one, reused
LIFO and checked before use like the sync pool's, serves whichever loop asks next, so
that a program running one `asyncio.run` per request does not open a connection per
request. An `AsyncConnection` waits on the loop that runs it, and one is only ever used
by one task at a time. Not `psycopg_pool.AsyncConnectionPool`: a pool's worker tasks
belong to the loop that opened it and die with it, while a journal outlives loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from sagacity.errors import JournalError
from sagacity.journal._entry import JournalEntry
from sagacity.journal._group import (
    RECORDS_AN_OUTCOME,
    AppendRequest,
    AppendWithdrawn,
    Slots,
    committed,
    kept,
)
from sagacity.journal.postgres._append import Append
from sagacity.journal.postgres._appender import Appender
from sagacity.journal.postgres._batch import Batch
from sagacity.journal.postgres._connections import AsyncLease, IdleConnections
from sagacity.journal.postgres._leases import LeaseStatements, LeaseTake, Taken
from sagacity.journal.postgres._steps import Steps, arun_steps
from sagacity.journal.postgres._threads import ThreadGroup

__all__ = ["FRESH_COMMITS", "LoopWriter"]

T = TypeVar("T")

FRESH_COMMITS = 2
"""Commits in flight before appends queue for a batch (see `Slots`): fewer, larger
commits leave the loop more time for everything else (docs/performance.md)."""

_WAKE_AT_ONCE = 4
"""Callers a batch wakes per turn of the loop: each runs on to its next call at once, and
a batch of 60 woken together would hold the loop for 60 calls' work in one turn."""

_BATCH_SAGAS = 32
"""Sagas whose queued appends (or lease takes) a batch takes, each saga's all; the rest
wait for the next slot. The loop builds a batch in one turn: one of 64 sagas held it for
about 5 ms."""


class _Pending:
    __slots__ = ("future", "request", "started")

    def __init__(self, request: AppendRequest, future: asyncio.Future[JournalEntry]) -> None:
        self.request = request
        self.future = future
        self.started = False


class _PendingTake:
    __slots__ = ("future", "take")

    def __init__(self, take: LeaseTake, future: asyncio.Future[Taken]) -> None:
        self.take = take
        self.future = future


class LoopWriter:
    """A journal's async appends on one event loop: their group commit.

    A loop has at most `pool_max_size` of the journal's async connections out at once.
    """

    def __init__(
        self,
        appender: Appender,
        group: ThreadGroup,
        leases: LeaseStatements,
        idle: IdleConnections,
    ) -> None:
        self._appender = appender
        self._db = appender.db
        self._group = group
        self._leases = leases
        self._idle = idle
        """The journal's async connections, shared with its other loops."""
        self._slots = Slots(self._db.settings.pool_max_size, FRESH_COMMITS)
        self._kick: asyncio.TimerHandle | None = None
        """Starts the queue when a commit in flight goes stale, if none ends first."""
        self._queue: list[_Pending] = []
        self._takes: list[_PendingTake] = []
        """Lease takes waiting for a commit slot, to go together (see `take_lease`)."""
        self._takes_next = False
        """Whether the queued takes start before the queued appends, when both wait."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections = asyncio.Semaphore(self._db.settings.pool_max_size)
        """Connections out at once: commits, reads and leases together, as in the pool."""

    async def append(self, request: AppendRequest) -> JournalEntry:
        """Commit `request`; return its entry once durable.

        Alone (nothing queued, a commit slot free), the caller's own task commits it
        (`_alone`); else it queues for the next batch (see `committed` for cancellation).
        """
        if not self._queue and self._slots.free(time.monotonic()):
            return await self._alone(request)
        pending = _Pending(request, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._start_queue()
        return await committed(pending.future, lambda: self._withdraw(pending), phase=request.phase)

    async def _alone(self, request: AppendRequest) -> JournalEntry:
        """Commit one append in the caller's task: no task or future in between.

        Cancelled with its statement in flight, psycopg cancels the statement in the
        server and waits for it to end, so the entry may or may not be written: the
        append goes on in doubt, in a task of its own that no further cancel reaches,
        until it is known. The caller then gets what `committed` gives a queued append:
        `CommittedThenCancelled` with the entry, `AppendWithdrawn` when nothing was sent
        (an outcome is sent all the same), else a `CancelledError`.
        """
        appender = self._appender
        append = appender.new_append(request)
        token = self._slots.start(time.monotonic())
        self._group.count(1)
        try:
            try:
                return await self._append(append)
            except asyncio.CancelledError as error:
                cancelled = error
                unsent = append.sent is None and not append.locked_sent
                if unsent and request.phase not in RECORDS_AN_OUTCOME:
                    raise AppendWithdrawn() from None  # nothing was sent
                append.in_doubt = append.sent is not None
                with appender.guard:
                    appender.heads.pop(append.saga_id, None)
            return await kept(self._append(append), cancelled)
        finally:
            self._slots.end(token)
            self._start_queue()

    async def take_lease(self, take: LeaseTake) -> Taken:
        """Take a saga's lease (`LeaseStatements.acquire`); `SagaBusyError` if it is held.

        A commit slot free and no take waiting, the caller's task takes it; else it waits
        for the next batch of takes: one statement for all (`_take_many`). Sagas started
        together (a burst of requests) then cost the loop one statement, not one each.
        Cancelled alone, psycopg cancels the statement in the server. Cancelled while
        its batch is under way, the take goes on, as one whose reply was lost: the lease
        may be taken, and a retry with the same owner and expiry is granted it
        (`LeaseKeeper` shields its takes, and releases what a cancelled one took).
        """
        if not self._takes and self._slots.free(time.monotonic()):
            token = self._slots.start(time.monotonic())
            try:
                return await self._take_alone(take)
            finally:
                self._slots.end(token)
                self._start_queue()
        pending = _PendingTake(take, asyncio.get_running_loop().create_future())
        self._takes.append(pending)
        self._start_queue()
        return await pending.future

    async def _take_alone(self, take: LeaseTake, deadline: float | None = None) -> Taken:
        leases = self._leases
        return await self.run(
            lambda: leases.acquiring(take.saga_id), lambda: leases.acquire(take), deadline
        )

    @property
    def _in_flight(self) -> int:
        return len(self._slots)

    def _start_queue(self) -> None:
        """Start what waits if a commit may start; else look again when one may.

        Appends and lease takes that both wait take turns, so that neither starves the
        other: sagas that append without pause never keep a new saga from starting.
        """
        if not self._queue and not self._takes:
            return
        now = time.monotonic()
        while (self._queue or self._takes) and self._slots.free(now):
            if self._takes and (self._takes_next or not self._queue):
                takes, self._takes = _cut(self._takes, lambda pending: pending.take.saga_id)
                self._run_task(self._take_many(takes, self._slots.start(now)))
            else:
                queued, self._queue = _cut(self._queue, lambda pending: pending.request.saga_id)
                self._start(queued)
            self._takes_next = not self._takes_next
        if (self._queue or self._takes) and self._kick is None:
            again = self._slots.recheck_in(now)
            if again is not None:
                self._kick = asyncio.get_running_loop().call_later(again, self._kicked)

    def _kicked(self) -> None:
        self._kick = None
        self._start_queue()

    def _withdraw(self, pending: _Pending) -> bool:
        if pending.started:
            return False
        self._queue.remove(pending)
        return True

    def _start(self, batch: list[_Pending]) -> None:
        token = self._slots.start(time.monotonic())
        for pending in batch:
            pending.started = True
        self._group.count(len(batch))
        self._run_task(self._commit(batch, token))

    def _run_task(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(self._tasks.discard)

    async def _take_many(self, batch: list[_PendingTake], token: int) -> None:
        """Take a batch of leases in one statement; each alone if the statement fails.

        A statement that fails wrote nothing, or (its answer lost) took leases that are
        each this batch's own, which a try alone is granted: each try alone then gives
        its saga's own answer and its clear refusal. The tries alone go together, within
        the batch's time (`pool_timeout`): an outage costs the batch that time once.
        """
        leases = self._leases
        live = [pending for pending in batch if not pending.future.done()]  # not abandoned
        deadline = time.monotonic() + self._db.settings.timeout
        results: list[Taken | BaseException] = []
        try:
            if len(live) > 1:
                with contextlib.suppress(JournalError):
                    results = list(
                        await self.run(
                            lambda: leases.acquiring(live[0].take.saga_id),
                            lambda: leases.acquire_many([pending.take for pending in live]),
                            deadline,
                        )
                    )
            if not results:
                results = await asyncio.gather(
                    *(self._take_alone(pending.take, deadline) for pending in live),
                    return_exceptions=True,
                )
            await _settle([pending.future for pending in live], results)
        except BaseException:
            for pending in live:  # cancelled with the loop: what was sent may be taken
                if not pending.future.done():
                    pending.future.set_exception(
                        JournalError(
                            f"{leases.acquiring(pending.take.saga_id)}: its event loop "
                            "cancelled the try; the lease may have been taken"
                        )
                    )
            raise
        finally:
            self._slots.end(token)
            self._after_commit()

    async def _commit(self, batch: list[_Pending], token: int) -> None:
        """Commit a batch, settle each caller's future, and start the next batch."""
        results: list[JournalEntry | BaseException]
        try:
            if len(batch) == 1:
                try:
                    results = [await self._append(self._appender.new_append(batch[0].request))]
                except Exception as error:
                    results = [error]
            else:
                results = await self._many([pending.request for pending in batch])
            await _settle([pending.future for pending in batch], results)
        except BaseException:
            # Cancelled with the loop: what was sent may or may not be committed.
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(
                        JournalError(
                            f"saga {pending.request.saga_id!r}: the append of "
                            f"{pending.request.phase.value} was interrupted (its event loop "
                            "cancelled it); the entry may or may not have been committed"
                        )
                    )
            raise
        finally:
            self._slots.end(token)
            self._after_commit()

    def _after_commit(self) -> None:
        """Start what waits; or, the loop ending, refuse it: nothing more is sent."""
        if not _cancelling():
            self._start_queue()
            return
        queued, self._queue = self._queue, []
        for pending in queued:
            pending.future.set_exception(
                JournalError(
                    f"saga {pending.request.saga_id!r}: {pending.request.phase.value} "
                    "was not appended: its event loop is ending"
                )
            )
        takes, self._takes = self._takes, []
        for take in takes:
            if not take.future.done():
                take.future.set_exception(
                    JournalError(
                        f"{self._leases.acquiring(take.take.saga_id)}: its event loop is ending"
                    )
                )

    async def run(
        self,
        describe: Callable[[], str],
        steps: Callable[[], Steps[T]],
        deadline: float | None = None,
    ) -> T:
        """`PostgresDatabase.run` on this loop: statements that may safely run twice.

        Retried until `deadline` (`time.monotonic()`), by default `pool_timeout` from now.
        """
        db = self._db
        deadline = time.monotonic() + db.settings.timeout if deadline is None else deadline
        attempts = 0
        while True:
            attempts += 1
            try:
                lease = await self._checkout(deadline)
                try:
                    return await arun_steps(lease.cursor, steps())
                finally:
                    self._checkin(lease)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
                pause = db.retry_pause(error, deadline, attempts)
                if pause is None:
                    raise JournalError(f"{describe()}: {db.describe_error(error)}") from error
            await asyncio.sleep(pause)

    async def _append(self, append: Append) -> JournalEntry:
        """`Appender.append` on this loop's connections."""
        appender = self._appender
        deadline = time.monotonic() + self._db.settings.timeout
        attempts = 0
        while True:
            attempts += 1
            try:
                lease = await self._checkout(deadline)
                try:
                    return await arun_steps(lease.cursor, appender.attempt(append), lease.prepared)
                finally:
                    self._checkin(lease)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
                pause = appender.failed_try(append, error, deadline, attempts)
            await asyncio.sleep(pause)

    async def _many(self, requests: list[AppendRequest]) -> list[JournalEntry | BaseException]:
        """`_batch.append_batch` on this loop's connections."""
        batch = Batch(self._appender, requests)
        if batch.sealed:
            sent = False
            try:
                lease = await self._checkout(time.monotonic() + self._db.settings.timeout)
                try:
                    sent = True
                    await arun_steps(lease.cursor, batch.insert(), lease.prepared)
                    batch.written()
                finally:
                    self._checkin(lease)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
                batch.failed(error, sent=sent)
        for index, append in batch.alone():
            try:
                batch.results[index] = await self._append(append)
            except Exception as failure:
                batch.results[index] = failure
        return batch.outcome()

    async def _checkout(self, deadline: float) -> AsyncLease:
        """An idle connection the server has not ended, else a new one; `_checkin` it."""
        db = self._db
        if not self._connections.locked():
            await self._connections.acquire()  # one is free: no wait, no timer
        else:
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    await self._connections.acquire()
            except TimeoutError:
                raise psycopg_pool.PoolTimeout(
                    f"all {db.settings.pool_max_size} connections of {db.settings.where} "
                    f"stayed busy for {db.settings.timeout:g} s"
                ) from None
        try:
            return await self._connection(deadline)
        except BaseException:
            self._connections.release()
            raise

    async def _connection(self, deadline: float) -> AsyncLease:
        db = self._db
        if db.closed or self._appender.closed:
            raise psycopg_pool.PoolClosed(f"the connection pool of {db.settings.where} is closed")
        lease = self._idle.take()
        if lease is not None:
            return lease
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                conn = await psycopg.AsyncConnection.connect(
                    db.settings.conninfo,
                    autocommit=True,  # an append is one statement, committed as it runs
                    prepare_threshold=0,
                    client_encoding="utf8",
                )
        except TimeoutError:
            raise psycopg_pool.PoolTimeout(
                f"no connection to {db.settings.where} within {db.settings.timeout:g} s"
            ) from None
        return AsyncLease(conn)

    def _checkin(self, lease: AsyncLease) -> None:
        self._connections.release()
        self._idle.give(lease)


P = TypeVar("P")


def _cut(queue: list[P], saga_of: Callable[[P], str]) -> tuple[list[P], list[P]]:
    """The next batch from `queue`, in order, and what stays.

    All that is queued of the first `_BATCH_SAGAS` sagas: a saga's queued appends are
    never split between batches started together, whose second would be sealed on a head
    the first is still writing.
    """
    if len(queue) <= _BATCH_SAGAS:
        return queue, []
    batch: list[P] = []
    rest: list[P] = []
    taken: set[str] = set()
    for pending in queue:
        saga_id = saga_of(pending)
        if saga_id in taken or len(taken) < _BATCH_SAGAS:
            taken.add(saga_id)
            batch.append(pending)
        else:
            rest.append(pending)
    return batch, rest


async def _settle(futures: list[asyncio.Future[T]], results: Sequence[T | BaseException]) -> None:
    """Settle each future with its result, `_WAKE_AT_ONCE` per turn of the loop.

    A future already done (its waiter abandoned it) is passed over. Cancelled meanwhile,
    the rest are settled first: their results are known.
    """
    cancelled: asyncio.CancelledError | None = None
    for settled, (future, result) in enumerate(zip(futures, results, strict=True)):
        if settled and settled % _WAKE_AT_ONCE == 0 and cancelled is None:
            try:
                await asyncio.sleep(0)  # other tasks of the loop run in between
            except asyncio.CancelledError as error:
                cancelled = error
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
    if cancelled is not None:
        raise cancelled


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
