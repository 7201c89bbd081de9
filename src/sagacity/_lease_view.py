"""Who works on each open saga, read from its lease: for the operator's views.

`sagacity sagas`, `show`, `doubts`, the inbox and `GET /sagacity/sagas` show each open
saga's worker (`workers_of`): a live holder until its expiry, or no live worker since
when, and `STALLED` selects the `OPEN` sagas that no live worker holds. The lease rows
are read without taking anything (`leases_of`); a holder's process that is gone is
recognised on its own host (`holder_gone`), which `LeaseKeeper` also uses to take such a
saga over at once.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sagacity.journal import SideEffectJournal
from sagacity.journal._lease import RELEASED, SagaLease, lease_time

if TYPE_CHECKING:  # the summaries are the views'; the lease keeper needs none
    from sagacity._summary import SagaSummary

__all__ = [
    "OPEN_STATUSES",
    "STALLED",
    "LeaseReader",
    "Worker",
    "holder_gone",
    "is_stalled",
    "leases_of",
    "pid_namespace",
    "worker_of",
    "workers_of",
]

OPEN_STATUSES = frozenset({"OPEN", "AWAITING_APPROVAL", "SUSPENDED"})
"""The statuses of a saga that has not ended: each has a worker to show."""

STALLED = "STALLED"
"""The filter for an `OPEN` saga with no live worker: its worker died, or nothing runs
it. Not a status the journal records (a saga waiting for approval or paused by its
framework waits for a person or its framework, not a worker)."""


def pid_namespace() -> str | None:
    """This process's PID namespace (`ns4026531836`), on Linux; None elsewhere."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    digits = "".join(c for c in link if c.isdigit())
    return f"ns{digits}" if digits else None


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
    if host != socket.gethostname() or namespace != pid_namespace():
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


@runtime_checkable
class LeaseReader(Protocol):
    """A journal that reads its lease rows without taking anything (SQLite, memory)."""

    def read_leases(self, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
        """The lease rows of `saga_ids` (those that have one)."""
        ...


def leases_of(journal: SideEffectJournal, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
    """The lease rows of `saga_ids` (those that have one), read without taking anything.

    Read straight from each backend's lease table, since taking a lease to look at it
    would take over a dead holder's saga. A journal of another kind, or a database
    without the table, gives none: the views then say no live worker is known.
    """
    if not saga_ids:
        return {}
    if isinstance(journal, LeaseReader):
        return journal.read_leases(saga_ids)
    if type(journal).__name__ == "PostgresJournal":  # imported only where psycopg is
        return _postgres_leases(journal, saga_ids)
    return {}


def _lease(saga_id: str, owner: str, token: int, expires_at: datetime.datetime) -> SagaLease:
    return SagaLease(saga_id=saga_id, owner=owner, token=token, expires_at=expires_at)


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
