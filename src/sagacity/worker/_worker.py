"""The worker: resumes each decided saga with the application's resumer, exactly once."""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sagacity._decisions import WORK, Decision, Resumer
from sagacity.errors import ConfigurationError

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["Worker", "WorkerHealth"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WorkerHealth:
    """How a worker stands: what `health_file` holds and `sagacity worker --health` reads."""

    pid: int
    """The worker's process id."""
    state: str
    """`"starting"`, `"running"`, `"stopping"` or `"stopped"`."""
    started_at: datetime.datetime
    """When the worker started (UTC)."""
    beat_at: datetime.datetime
    """The worker's last heartbeat (UTC): it is alive and polling when this is recent."""
    wakeup: str
    """How decisions wake it: `"listen"` (PostgreSQL LISTEN/NOTIFY) or `"poll"`."""
    resumed: int = 0
    """Decisions this worker resumed (its resumer ran, or the walk, to the end)."""
    failed: int = 0
    """Resumes that raised: logged, the saga left as the journal says."""
    unroutable: tuple[str, ...] = ()
    """Sagas waiting for a resumer name this worker has none for."""


Resumers = Resumer | Mapping[str, Resumer]
"""One resumer for every saga, or one per resumer name (see `Worker`)."""


class Worker:
    """Resumes each decided saga with the application's resumer, under the saga's lease.

    Any number of workers, in any number of processes sharing the database, resume each
    decision exactly once: the saga's lease decides who, and the journal is read again
    under it, so a worker that lost the race does nothing. A worker killed mid-resume
    leaves the lease to expire (`Sagacity(lease_ttl=...)`); another worker then resumes
    the saga again, where the journal replays what ran and refuses what is in doubt, so
    the approved call never runs twice.

    Which resumer continues a saga is read from its journal: the name its approval
    request recorded (`Decision.resumer`: an adapter's name, `"workflow"`, or `"work"` for
    plain code; see `pausing_as`).

    Args:
        sagacity: The Sagacity whose journal is watched; its tools (`wrap`) and
            compensations must be the application's, so that resumed calls and the
            compensation walk run here.
        resumer: How paused runs continue. One `Resumer` continues every saga. A mapping
            from resumer names to resumers picks by `Decision.resumer`; a saga whose name
            has no entry is left alone (logged once, and listed in `WorkerHealth`), never
            guessed. With None, or with no `"work"` entry in the mapping, a saga paused by
            plain code (`"work"`) is resumed by running its approved call with the stored
            input (`Sagacity.resume_saga(saga_id)`, no work), and a rejected one is
            compensated.
        poll_interval: Seconds between looks at the journal when nothing woke the
            worker: the latency on SQLite and in memory (default 0.2 s), the safety net
            under LISTEN/NOTIFY on PostgreSQL (default 5 s).
        listen: On PostgreSQL, use LISTEN/NOTIFY (True), poll only (False: behind
            PgBouncer in transaction mode), or decide by trying LISTEN (None).
        health_file: Where the worker writes its `WorkerHealth` as JSON at every
            heartbeat (`sagacity worker --health FILE` checks it).
        rescan_interval: Seconds between full looks for every saga still waiting to be
            resumed (those a missed wake-up left, or a dead worker's).

    Raises:
        ConfigurationError: A resumer is not callable, a name is empty, or an interval is
            not positive.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        resumer: Resumers | None = None,
        *,
        poll_interval: float | None = None,
        listen: bool | None = None,
        health_file: str | os.PathLike[str] | None = None,
        rescan_interval: float = 30.0,
    ) -> None:
        self.sagacity = sagacity
        self._single: Resumer | None = None
        self._named: dict[str, Resumer] = {}
        if isinstance(resumer, Mapping):
            for name, each in resumer.items():
                if not isinstance(name, str) or not name.strip():
                    raise ConfigurationError(
                        f"a resumer name must be a non-empty string, not {name!r}"
                    )
                self._named[name] = _checked(each, name)
        elif resumer is not None:
            self._single = _checked(resumer, "resumer")
        if poll_interval is not None and poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be positive, not {poll_interval}")
        if rescan_interval <= 0:
            raise ConfigurationError(f"rescan_interval must be positive, not {rescan_interval}")
        self.poll_interval = poll_interval
        self.listen = listen
        self.health_file = None if health_file is None else os.fspath(health_file)
        self.rescan_interval = rescan_interval

    def resumer_for(self, decision: Decision) -> Resumer | None:
        """The resumer that continues `decision`'s saga; None for the stored call.

        Raises:
            LookupError: A mapping was given and has no resumer of the decision's name.
        """
        if self._single is not None:
            return self._single
        found = self._named.get(decision.resumer)
        if found is not None or decision.resumer == WORK:
            return found
        raise LookupError(
            f"saga {decision.saga_id!r}: request {decision.request_id} was paused by "
            f"{decision.resumer!r}, and this worker has no resumer of that name (it has "
            f"{sorted(self._named) or 'none'}); give Worker a resumer for {decision.resumer!r}"
        )


def _checked(resumer: object, name: str) -> Resumer:
    if not callable(resumer):
        raise ConfigurationError(f"resumer {name!r} is not callable: {resumer!r}")
    return resumer
