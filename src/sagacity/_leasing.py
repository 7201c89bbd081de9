"""Holding a saga's lease while this worker runs, resumes, compensates or resolves it.

The read side, who holds each open saga for the operator's views, is `_lease_view`.

A durable engine's steps join their saga one after another, in one process, a moment
apart. With `linger`, a join that lets its saga go parks the lease instead of releasing
it (`ParkedLeases`): still held, still renewed, and adopted by the saga's next lease
keeper in this process without a commit, or released by the renewer once the linger
passed. Another worker waits for it up to that long.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
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
from sagacity._parking import parked_journals, parked_leases
from sagacity._recent import RecentHistories, recent_histories
from sagacity._renewing import renewer
from sagacity.errors import JournalError, LeaseLostError, SagaBusyError
from sagacity.journal import SideEffectJournal
from sagacity.journal._lease import SagaLease

__all__ = ["LeaseKeeper", "release_parked"]

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
        linger: Seconds to keep the lease parked after the block, for the saga's next
            keeper in this process (see `ParkedLeases`); 0 releases it at once.

    A lease parked here for the saga is adopted on entry, whatever this keeper's own
    `linger`: it is this process's already, and taking it again would wait for itself.
    """

    def __init__(
        self,
        journal: SideEffectJournal,
        saga_id: str,
        *,
        ttl: datetime.timedelta,
        wait: float,
        clock: Callable[[], datetime.datetime],
        linger: float = 0.0,
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
        self.linger = linger
        """Seconds the lease stays parked after the block; a join sets 0 to let it go."""
        self.parked_until = math.inf
        """While parked, when the renewer releases the lease (`time.monotonic()`)."""
        self._lost = False
        self._adopted = False
        """The lease was parked here by an earlier keeper: its take's head is old news."""

    @property
    def saga_id(self) -> str:
        """The saga held."""
        return self._saga_id

    @property
    def journal(self) -> SideEffectJournal:
        """The journal whose database holds the lease."""
        return self._journal

    def __enter__(self) -> LeaseKeeper:
        deadline = time.monotonic() + self._wait
        pause = _POLL
        while not (self._adopted_parked() or self._acquired(deadline, pause)):
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        return self

    async def __aenter__(self) -> LeaseKeeper:
        """Take the lease from async code, never blocking the event loop.

        Each try is a commit, made by the journal's `aacquire_lease` if it has one
        (PostgreSQL: on the loop's async connections), else on a worker thread the loop
        awaits; the wait for a busy saga is an `asyncio.sleep`.
        """
        self.linger = 0.0  # parked, it would be released off the loop: not worth it here
        deadline = time.monotonic() + self._wait
        pause = _POLL
        while not await self._try_acquire(deadline, pause):
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        return self

    async def _try_acquire(self, deadline: float, pause: float) -> bool:
        """One try, off the loop; a task cancelled meanwhile lets go of what it took."""
        trying = asyncio.ensure_future(self._attempt(deadline, pause))
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

    async def _attempt(self, deadline: float, pause: float) -> bool:
        """Adopt the lease parked here (on a worker thread), else take it."""
        parking = parked_leases(self._journal, create=False)
        parked_here = parking is not None and self._saga_id in parking
        if parked_here and await asyncio.to_thread(self._adopted_parked):
            return True
        native = getattr(self._journal, "aacquire_lease", None)
        if native is None:
            return await asyncio.to_thread(self._acquired, deadline, pause)
        return await self._aacquired(native, deadline, pause)

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
        if renewer.let_go_now(self) and not self._must_release():
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
        renewer.hold(self)
        return True

    def _adopted_parked(self) -> bool:
        """Adopt the lease an earlier keeper of this process parked on the saga, if any.

        No commit: the lease is this process's already. One lost, or with less than a
        third of its time to live left (a renewal may not land in time), is released
        instead, and the lease is taken as usual.
        """
        parking = parked_leases(self._journal, create=False)
        parked: LeaseKeeper | None = None if parking is None else parking.take(self._saga_id)
        if parked is None:
            return False
        renewer.let_go(parked)  # a renewal of it under way lands first: its lease is newest
        if parked.lost or parked._expiring():
            parked._release()
            return False
        assert parked.lease is not None
        self._owner = parked._owner
        # Renewed since, and appended to: the head it was taken at says nothing now, so
        # `known_history` reads the head, and `empty_history` knows nothing.
        self.lease = dataclasses.replace(parked.lease, head_seq=None)
        self._adopted = True
        self.due = parked.due
        renewer.hold(self)
        return True

    def _expiring(self) -> bool:
        """Less than a third of the lease's time to live is left."""
        assert self.lease is not None
        return self.lease.expires_at - self._clock() < self._ttl / 3

    def turn(self) -> float:
        """When the renewer should next look at this keeper: to renew, or to unpark it."""
        return min(self.due, self.parked_until)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        recent = recent_histories(self._journal)
        if recent is not None:
            for history in self._histories:
                recent.keep(history)  # still leased: the journal holds this much, for now
        if kind is None and self._parked():
            return
        renewer.let_go(self)
        self._release()

    def _release(self) -> None:
        """Free the saga for the next worker, if it is still this worker's to free."""
        if self._must_release():
            assert self.lease is not None
            # Not released, it expires on its own: the next worker waits for that.
            with contextlib.suppress(JournalError):
                self._journal.release_lease(self.lease)

    def _parked(self) -> bool:
        """Park the lease for the saga's next keeper here, if lingering and still ours.

        Never after an exception, nor for a lease lost or freed by the saga's end.
        """
        if self.linger <= 0 or not self._must_release() or self.due == math.inf:
            return False
        parking = parked_leases(self._journal)
        if parking is None:
            return False
        _release_parked_at_exit()
        self.parked_until = time.monotonic() + self.linger
        parking.park(self)
        renewer.hold(self)  # still renewed; woken in time to release it
        return True

    def unparked(self) -> None:
        """The linger passed or the journal is closing: release the lease (on a claim)."""
        self._release()
        parking = parked_leases(self._journal, create=False)
        if parking is not None:
            parking.left(self)

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
        """The saga's history at the lease's take, if known without a read (see `_recent`).

        For an adopted lease, what this process kept of the saga if one read of the
        saga's head (no commit) finds nothing after it: while parked, the lease kept out
        other workers, not an approval, nor a takeover after an expiry.
        """
        recent = recent_histories(self._journal)
        if self._adopted:
            return None if recent is None else self._unmoved(recent)
        empty = self.empty_history
        if empty is not None or self.lease is None or recent is None:
            return empty
        return recent.history(self._saga_id, self.lease)

    def _unmoved(self, recent: RecentHistories) -> SagaHistory | None:
        """The kept history if the saga's head is still its last seq, else None."""
        kept = recent.kept(self._saga_id)
        if kept is None:
            return None
        try:
            # The first entry after the kept head, in (saga, seq) order: another saga's,
            # or none, when nothing was appended to this one since.
            after = self._journal.list_entries(after=(self._saga_id, len(kept)), limit=1)
        except JournalError:
            return None
        if after and after[0].saga_id == self._saga_id:
            return None
        return SagaHistory.of(self._saga_id, kept)

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
        return self._lost or any(history.lease_lost for history in self._histories)

    def renew(self) -> None:
        """Renew the lease now (on the renewer's thread); note it lost if it was."""
        self.due = time.monotonic() + self.interval
        assert self.lease is not None
        try:
            self.lease = self._journal.renew_lease(self.lease, expires_at=self._clock() + self._ttl)
        except LeaseLostError:
            self._lost = True
            for history in self._histories:
                history.lease_lost = True
            self.due = float("inf")  # never again: the saga is another worker's
        except JournalError:
            pass  # the database is away: try again at the next turn; the lease may hold


_EXIT_LOCK = threading.Lock()
_exit_hooked = False


def release_parked(journal: SideEffectJournal) -> None:
    """Release now every lease parked for `journal`: before it closes, at exit."""
    parking = parked_leases(journal, create=False)
    if parking is None:
        return
    for keeper in parking.claim_all():
        renewer.let_go(keeper)
        keeper.unparked()


def _release_all_parked() -> None:
    """At exit: release the leases still parked.

    A process killed leaves them to expire, or to the next worker on its host, which
    finds their holder gone (`holder_gone`) and takes them over at once.
    """
    for journal in parked_journals():
        release_parked(journal)


def _release_parked_at_exit() -> None:
    """Register `_release_all_parked` at the first park.

    At-exit hooks run last registered first: this one runs before those of the journal
    (its connection pool) opened earlier.
    """
    global _exit_hooked
    with _EXIT_LOCK:
        if not _exit_hooked:
            atexit.register(_release_all_parked)
            _exit_hooked = True
