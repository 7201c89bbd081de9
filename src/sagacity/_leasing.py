"""Holding a saga's lease while this worker runs, resumes, compensates or resolves it.

Also the read side, for the operator's views (`sagacity sagas`, `show`, `doubts`, the
inbox, `GET /sagacity/sagas`): who holds each open saga and until when, or since when no
live worker does (`leases_of`, `worker_of`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType

from sagacity._history import SagaHistory
from sagacity._offloop import finished_off_loop
from sagacity._summary import SagaSummary
from sagacity.errors import JournalError, LeaseLostError, SagaBusyError
from sagacity.journal import SideEffectJournal
from sagacity.journal._lease import RELEASED, SagaLease, lease_time

__all__ = [
    "OPEN_STATUSES",
    "STALLED",
    "LeaseKeeper",
    "Worker",
    "holder_gone",
    "is_stalled",
    "leases_of",
    "worker_of",
    "workers_of",
]

OPEN_STATUSES = frozenset({"OPEN", "AWAITING_APPROVAL", "SUSPENDED"})
"""The statuses of a saga that has not ended: each has a worker to show."""

STALLED = "STALLED"
"""The filter for an `OPEN` saga with no live worker: its worker died, or nothing runs
it. Not a status the journal records (a saga waiting for approval or paused by its
framework waits for a person or its framework, not a worker)."""

_POLL = 0.05
"""The first pause between tries to take a busy saga's lease; it doubles up to 0.5 s."""


def _pid_namespace() -> str | None:
    """This process's PID namespace (`ns4026531836`), on Linux; None elsewhere."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    digits = "".join(c for c in link if c.isdigit())
    return f"ns{digits}" if digits else None


def _owner() -> str:
    """`host:pid:random`, and on Linux `:ns…`, the PID namespace (see `holder_gone`)."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    namespace = _pid_namespace()
    return owner if namespace is None else f"{owner}:{namespace}"


def holder_gone(owner: str) -> bool:
    """Whether the lease's holder is known dead: its process no longer exists.

    Known only for a holder on this host and in this PID namespace (its owner names
    both): there a process id that no longer exists cannot be running the saga, and a
    process that died stays dead. Two containers may share a host name and not their
    process ids, hence the namespace; a holder elsewhere, or of an older owner format,
    is never said to be gone (its lease is waited out). A process id reused since says
    alive: the taker waits, as it would have.
    """
    parts = owner.split(":")
    if len(parts) != 4 or os.name != "posix":
        return False
    host, pid_text, _, namespace = parts
    if host != socket.gethostname() or namespace != _pid_namespace():
        return False
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # it exists, and is someone else's
        return False
    return False


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

    def hold(self, history: SagaHistory) -> SagaHistory:
        """Make `history`'s appends fenced by this lease; return it."""
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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Worker:
    """Who works on an open saga, read from its lease: a live holder, or nobody since when."""

    live: bool
    """A worker holds the saga's lease now (it has not expired)."""
    holder: str | None
    """The lease's holder (host, process id, a random part), if the saga has a lease
    that was not released; None if it was released, or it never had one."""
    expires_at: str | None
    """When the holder's lease expires (RFC 3339 UTC), if it was not released."""
    since: str | None
    """For no live worker: since when (the expiry a dead holder did not renew, or the
    saga's last activity when the lease was let go); None while a worker holds it, or
    when the holder's process is gone before its lease expired."""
    gone: bool = False
    """The holder's lease has not expired, but its process, on this host, is gone: the
    next worker here takes the saga over at once (see `holder_gone`)."""

    def to_json(self) -> dict[str, object]:
        """The worker as a JSON object."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line: `held by H until T`, or `no live worker since T (H stopped renewing)`."""
        if self.live:
            return f"held by {self.holder} until {self.expires_at}"
        if self.gone:
            return (
                f"no live worker: {self.holder}'s process is gone (its lease would run to "
                f"{self.expires_at})"
            )
        text = "no live worker" + ("" if self.since is None else f" since {self.since}")
        if self.holder is not None:
            text += f" ({self.holder} stopped renewing its lease)"
        return text


def worker_of(lease: SagaLease | None, now: datetime.datetime, last_at: str | None) -> Worker:
    """How an open saga's lease stands at `now`; `last_at` is the saga's last activity."""
    if lease is None or lease.expires_at == RELEASED:
        return Worker(live=False, holder=None, expires_at=None, since=last_at)
    expiry = lease_time(lease.expires_at)
    if lease.expires_at > now:
        gone = holder_gone(lease.owner)
        return Worker(live=not gone, holder=lease.owner, expires_at=expiry, since=None, gone=gone)
    return Worker(live=False, holder=lease.owner, expires_at=expiry, since=expiry)


def workers_of(
    journal: SideEffectJournal, summaries: Sequence[SagaSummary], now: datetime.datetime
) -> dict[str, Worker]:
    """The worker of each saga among `summaries` that has not ended, by saga id."""
    open_ids = [s.saga_id for s in summaries if s.status in OPEN_STATUSES]
    leases = leases_of(journal, open_ids)
    return {
        s.saga_id: worker_of(leases.get(s.saga_id), now, s.last_at)
        for s in summaries
        if s.status in OPEN_STATUSES
    }


def is_stalled(summary: SagaSummary, worker: Worker | None) -> bool:
    """An `OPEN` saga that no live worker holds (see `STALLED`)."""
    return summary.status == "OPEN" and worker is not None and not worker.live


def leases_of(journal: SideEffectJournal, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
    """The lease rows of `saga_ids` (those that have one), read without taking anything.

    Read straight from each backend's lease table, since taking a lease to look at it
    would take over a dead holder's saga. A journal of another kind, or a database
    without the table, gives none: the views then say no live worker is known.
    """
    from sagacity.journal import InMemoryJournal, SqliteJournal

    if not saga_ids:
        return {}
    if isinstance(journal, InMemoryJournal):
        with journal._lock:
            return {s: journal._leases[s] for s in saga_ids if s in journal._leases}
    if isinstance(journal, SqliteJournal):
        return _sqlite_leases(journal, saga_ids)
    if type(journal).__name__ == "PostgresJournal":  # imported only where psycopg is
        return _postgres_leases(journal, saga_ids)
    return {}


def _lease(saga_id: str, owner: str, token: int, expires_at: datetime.datetime) -> SagaLease:
    return SagaLease(saga_id=saga_id, owner=owner, token=token, expires_at=expires_at)


def _sqlite_leases(journal: object, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
    import sqlite3

    found: dict[str, SagaLease] = {}
    with journal._lock:  # type: ignore[attr-defined]
        for start in range(0, len(saga_ids), 500):  # under SQLite's 999 parameters
            chunk = list(saga_ids[start : start + 500])
            query = (
                "SELECT saga_id, owner, token, expires_at FROM sagacity_lease WHERE saga_id "
                f"IN ({', '.join('?' for _ in chunk)})"
            )
            try:
                rows = journal._cursor.execute(query, chunk).fetchall()  # type: ignore[attr-defined]
            except sqlite3.Error:  # a database made before leases: none to show
                return {}
            for saga_id, owner, token, expires in rows:
                when = datetime.datetime.fromisoformat(expires)
                found[saga_id] = _lease(saga_id, owner, token, when)
    return found


def _postgres_leases(journal: object, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
    db = journal._db  # type: ignore[attr-defined]
    query = (
        f"SELECT saga_id, owner, token, expires_at FROM {db.tables.lease} WHERE saga_id = ANY(%s)"
    )
    rows = db.run(
        lambda: f"cannot read the saga leases in {db.settings.where}",
        lambda conn: conn.execute(query, (list(saga_ids),)).fetchall(),
    )
    return {str(r[0]): _lease(str(r[0]), str(r[1]), int(r[2]), r[3]) for r in rows}
