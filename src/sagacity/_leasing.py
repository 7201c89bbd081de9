"""Holding a saga's lease while this worker runs, resumes, compensates or resolves it.

The read side, who holds each open saga for the operator's views, is `_lease_view`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType

from sagacity._chain_kind import refuse_grant_chain
from sagacity._history import SagaHistory
from sagacity._lease_view import holder_gone, leases_of, pid_namespace
from sagacity._offloop import finished_off_loop
from sagacity._recent import recent_histories
from sagacity.errors import JournalError, LeaseLostError, SagaBusyError
from sagacity.journal import SideEffectJournal
from sagacity.journal._lease import SagaLease

__all__ = ["LeaseKeeper"]

_POLL = 0.05
"""The first pause between tries to take a busy saga's lease; it doubles up to 0.5 s."""


def _owner() -> str:
    """`host:pid:random`, and on Linux `:ns…`, the PID namespace (see `holder_gone`)."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    namespace = pid_namespace()
    return owner if namespace is None else f"{owner}:{namespace}"


class LeaseKeeper:
    """Takes a saga's lease on entry, renews it while held, and releases it on exit.

    The lease is renewed every third of its time to live, by the one renewer thread of
    the process, so that work longer than the lease keeps it; a worker that stalls past
    the expiry (a stopped process, a long pause) is taken over and fenced out: its next
    append is refused. From async code (`async with`), waiting for a busy saga does not
    block the event loop.

    Args:
        journal: The journal whose database holds the lease.
        saga_id: The saga to hold.
        ttl: How long the lease lasts without a renewal.
        wait: How long to wait for a busy saga; 0 refuses at once with `SagaBusyError`.
        clock: The current time, timezone-aware.
    """

    def __init__(
        self,
        journal: SideEffectJournal,
        saga_id: str,
        *,
        ttl: datetime.timedelta,
        wait: float,
        clock: Callable[[], datetime.datetime],
    ) -> None:
        self._journal = journal
        self._saga_id = saga_id
        self._ttl = ttl
        self._wait = wait
        self._clock = clock
        self._owner = _owner()
        self._histories: list[SagaHistory] = []
        self._since: list[int] = []
        """Each held history's last seq when it was held."""
        self.interval = ttl.total_seconds() / 3
        """Seconds between renewals: a third of the time to live."""
        self.due = 0.0
        """When the renewer renews next (`time.monotonic()`)."""
        self.lease: SagaLease | None = None

    def __enter__(self) -> LeaseKeeper:
        deadline = time.monotonic() + self._wait
        pause = _POLL
        while not self._acquired(deadline, pause):
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        return self

    async def __aenter__(self) -> LeaseKeeper:
        """Take the lease from async code, never blocking the event loop.

        Each try is a commit, made by the journal's `aacquire_lease` if it has one
        (PostgreSQL: on the loop's async connections), else on a worker thread the loop
        awaits; the wait for a busy saga is an `asyncio.sleep`.
        """
        deadline = time.monotonic() + self._wait
        pause = _POLL
        while not await self._try_acquire(deadline, pause):
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        return self

    async def _try_acquire(self, deadline: float, pause: float) -> bool:
        """One try, off the loop; a task cancelled meanwhile lets go of what it took."""
        native = getattr(self._journal, "aacquire_lease", None)
        trying = asyncio.ensure_future(
            asyncio.to_thread(self._acquired, deadline, pause)
            if native is None
            else self._aacquired(native, deadline, pause)
        )
        try:
            return await asyncio.shield(trying)
        except asyncio.CancelledError:
            while not trying.done():  # the try is under way: let it finish
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(trying)
            if not trying.cancelled() and trying.exception() is None and trying.result():
                # Through further cancels (anyio's scopes cancel at every await): a
                # release cancelled before its thread started would hold the saga until
                # the lease expired.
                await finished_off_loop(lambda: self.__exit__(None, None, None))
            raise

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Release the lease on a worker thread the loop awaits (see `__exit__`).

        Done even if the task is cancelled meanwhile: a release left unstarted would leave
        the renewer holding the saga for nobody.
        """
        if _renewer.let_go_now(self) and not self._must_release():
            return  # not renewing it, and the saga's end freed it: nothing waits
        await finished_off_loop(lambda: self.__exit__(kind, error, traceback))

    def _acquired(self, deadline: float, pause: float) -> bool:
        """Try once; False when the saga is busy and waiting `pause` more is allowed."""
        now = self._clock()
        try:
            lease = self._journal.acquire_lease(
                self._saga_id, self._owner, now=now, expires_at=now + self._ttl
            )
        except SagaBusyError:
            expiry = self._gone_holders_expiry(now)
            if expiry is not None:
                with contextlib.suppress(SagaBusyError):
                    return self._held(
                        self._journal.acquire_lease(
                            self._saga_id, self._owner, now=expiry, expires_at=now + self._ttl
                        )
                    )
            if time.monotonic() + pause > deadline:
                raise
            return False
        return self._held(lease)

    async def _aacquired(
        self, acquire: Callable[..., Awaitable[SagaLease]], deadline: float, pause: float
    ) -> bool:
        """`_acquired` through the journal's `aacquire_lease`."""
        now = self._clock()
        try:
            lease = await acquire(self._saga_id, self._owner, now=now, expires_at=now + self._ttl)
        except SagaBusyError:
            expiry = await asyncio.to_thread(self._gone_holders_expiry, now)
            if expiry is not None:
                with contextlib.suppress(SagaBusyError):
                    return self._held(
                        await acquire(
                            self._saga_id, self._owner, now=expiry, expires_at=now + self._ttl
                        )
                    )
            if time.monotonic() + pause > deadline:
                raise
            return False
        return self._held(lease)

    def _gone_holders_expiry(self, now: datetime.datetime) -> datetime.datetime | None:
        """The expiry of a busy lease whose holder's process is gone, else None.

        Taking the lease "at" that expiry is the takeover that expiry would allow, made
        early: the token grows and TAKEN_OVER is journaled, so fencing holds as after any
        expiry. Only a holder known dead qualifies (see `holder_gone`).
        """
        try:
            lease = leases_of(self._journal, [self._saga_id]).get(self._saga_id)
        except JournalError:
            return None
        if lease is None or lease.expires_at <= now or not holder_gone(lease.owner):
            return None
        return lease.expires_at

    def _held(self, lease: SagaLease) -> bool:
        self.lease = lease
        self.due = time.monotonic() + self.interval
        _renewer.hold(self)
        return True

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _renewer.let_go(self)
        recent = recent_histories(self._journal)
        if recent is not None:
            for history in self._histories:
                recent.keep(history)  # still leased: the journal holds this much, for now
        if self._must_release():
            assert self.lease is not None
            # Not released, it expires on its own: the next worker waits for that.
            with contextlib.suppress(JournalError):
                self._journal.release_lease(self.lease)

    def _must_release(self) -> bool:
        """Whether the lease is still this worker's to free: the saga did not end here."""
        return self.lease is not None and not self.lost and not self._ended()

    @property
    def empty_history(self) -> SagaHistory | None:
        """The saga's history if its lease was taken at head 0: it has no entries.

        None could be written after the take without the lease's token, which is this
        worker's now, so there is nothing to read. None when the journal must be read.
        """
        if self.lease is None or self.lease.head_seq != 0:
            return None
        return SagaHistory.of(self._saga_id, [])

    @property
    def known_history(self) -> SagaHistory | None:
        """The saga's history at the lease's take, if known without a read (see `_recent`)."""
        recent = recent_histories(self._journal)
        empty = self.empty_history
        if empty is not None or self.lease is None or recent is None:
            return empty
        return recent.history(self._saga_id, self.lease)

    def hold(self, history: SagaHistory) -> SagaHistory:
        """Make `history`'s appends fenced by this lease; return it.

        Raises:
            SagaStateError: `history` is a standing grant's chain, which no saga action
                may append to (see `_chain_kind`).
        """
        refuse_grant_chain(history.saga_id, history.entries)
        history.fence = self.lease
        self._histories.append(history)
        self._since.append(history.last_seq)
        return history

    def _ended(self) -> bool:
        """This worker ended the saga: that frees the lease (see `acquire_lease`)."""
        return any(
            history.ended is not None and history.ended.seq > since
            for history, since in zip(self._histories, self._since, strict=True)
        )

    @property
    def lost(self) -> bool:
        """True once the lease was found taken over."""
        return any(history.lease_lost for history in self._histories)

    def renew(self) -> None:
        """Renew the lease now (on the renewer's thread); note it lost if it was."""
        self.due = time.monotonic() + self.interval
        assert self.lease is not None
        try:
            self.lease = self._journal.renew_lease(self.lease, expires_at=self._clock() + self._ttl)
        except LeaseLostError:
            for history in self._histories:
                history.lease_lost = True
            self.due = float("inf")  # never again: the saga is another worker's
        except JournalError:
            pass  # the database is away: try again at the next turn; the lease may hold


class _Renewer:
    """One thread per process that renews every lease held here, each on its turn.

    One thread for all, started on first use: a thread started and joined per saga
    would cost more than the saga's own appends.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held: set[LeaseKeeper] = set()
        self._renewing: set[LeaseKeeper] = set()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf
        """When the waiting thread wakes on its own: a lease due later needs no wake-up."""

    def hold(self, keeper: LeaseKeeper) -> None:
        with self._changed:
            self._held.add(keeper)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sagacity-lease-renewer", daemon=True
                )
                self._thread.start()
            elif keeper.due < self._wakes_at:
                self._changed.notify()

    def let_go_now(self, keeper: LeaseKeeper) -> bool:
        """Stop renewing `keeper`; False if a renewal of it is under way (see `let_go`)."""
        with self._changed:
            self._held.discard(keeper)
            return keeper not in self._renewing

    def let_go(self, keeper: LeaseKeeper) -> None:
        """Stop renewing `keeper`; wait for a renewal of it under way to finish.

        A renewal that landed after the release would hold the saga again, for nobody.
        """
        with self._changed:
            self._held.discard(keeper)
            self._changed.wait_for(lambda: keeper not in self._renewing)

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = {keeper for keeper in self._held if keeper.due <= now}
                if not due:
                    nearest = min((keeper.due for keeper in self._held), default=math.inf)
                    self._wakes_at = nearest
                    self._changed.wait(None if nearest == math.inf else nearest - now)
                    continue
                self._renewing = due
            for keeper in due:  # renewed outside the lock: a renewal waits on the database
                try:
                    keeper.renew()
                except Exception:  # the thread must outlive any one lease, and renew the rest
                    keeper.due = time.monotonic() + keeper.interval
            with self._changed:
                self._renewing = set()
                self._changed.notify_all()


_renewer = _Renewer()
