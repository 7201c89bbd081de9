"""Holding a saga's lease while this worker runs, resumes, compensates or resolves it."""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from types import TracebackType

from sagacity._history import SagaHistory
from sagacity.errors import JournalError, LeaseLostError, SagaBusyError
from sagacity.journal import SideEffectJournal
from sagacity.journal._lease import SagaLease

__all__ = ["LeaseKeeper"]

_POLL = 0.05
"""The first pause between tries to take a busy saga's lease; it doubles up to 0.5 s."""


class LeaseKeeper:
    """Takes a saga's lease on entry, renews it while held, and releases it on exit.

    The lease is renewed every third of its time to live, on a thread of its own, so
    that work longer than the lease keeps it; a worker that stalls past the expiry (a
    stopped process, a long pause) is taken over and fenced out: its next append is
    refused.

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
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._histories: list[SagaHistory] = []
        self.lease: SagaLease | None = None

    def __enter__(self) -> LeaseKeeper:
        deadline = time.monotonic() + self._wait
        pause = _POLL
        while True:
            now = self._clock()
            try:
                self.lease = self._journal.acquire_lease(
                    self._saga_id, self._owner, now=now, expires_at=now + self._ttl
                )
                break
            except SagaBusyError:
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        self._renewer = threading.Thread(
            target=self._renew, name=f"sagacity-lease-{self._saga_id}", daemon=True
        )
        self._renewer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.lease is not None and not self.lost and not self._ended():
            try:
                self._journal.release_lease(self.lease)
            except JournalError:
                pass  # not released, it expires on its own: the next worker waits for that

    def hold(self, history: SagaHistory) -> SagaHistory:
        """Make `history`'s appends fenced by this lease; return it."""
        history.fence = self.lease
        self._histories.append(history)
        return history

    def _ended(self) -> bool:
        """The saga's last entry is the ENDED this worker wrote: that frees the lease."""
        return any(h.ended is not None and h.ended.seq == h.last_seq for h in self._histories)

    @property
    def lost(self) -> bool:
        """True once the lease was found taken over."""
        return any(history.lease_lost for history in self._histories)

    def _renew(self) -> None:
        interval = self._ttl.total_seconds() / 3
        while not self._stop.wait(interval):
            assert self.lease is not None
            try:
                self.lease = self._journal.renew_lease(
                    self.lease, expires_at=self._clock() + self._ttl
                )
            except LeaseLostError:
                for history in self._histories:
                    history.lease_lost = True
                return
            except JournalError:
                continue  # the database is away: try again; the lease may still hold
