"""The one thread per process that renews the leases held here, and frees parked ones."""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol

from sagacity._parking import parked_leases
from sagacity.journal import SideEffectJournal

__all__ = ["LeaseRenewer", "Renewed", "renewer"]


class Renewed(Protocol):
    """A lease keeper as the renewer sees it (`_leasing.LeaseKeeper`)."""

    due: float
    """When the renewer renews next (`time.monotonic()`)."""
    interval: float
    """Seconds between renewals."""
    parked_until: float
    """While parked, when the renewer releases the lease (`time.monotonic()`)."""

    @property
    def saga_id(self) -> str:
        """The saga held."""
        ...

    @property
    def journal(self) -> SideEffectJournal:
        """The journal whose database holds the lease."""
        ...

    def turn(self) -> float:
        """When the renewer should next look at the keeper."""
        ...

    def renew(self) -> None:
        """Renew the lease now."""
        ...

    def unparked(self) -> None:
        """Release a parked lease claimed from its registry."""
        ...


class LeaseRenewer:
    """One thread per process that renews every lease held here, each on its turn.

    One thread for all, started on first use: a thread started and joined per saga
    would cost more than the saga's own appends.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held: set[Renewed] = set()
        self._renewing: set[Renewed] = set()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf
        """When the waiting thread wakes on its own: a lease due later needs no wake-up."""

    def hold(self, keeper: Renewed) -> None:
        with self._changed:
            self._held.add(keeper)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sagacity-lease-renewer", daemon=True
                )
                self._thread.start()
            elif keeper.turn() < self._wakes_at:
                self._changed.notify()

    def let_go_now(self, keeper: Renewed) -> bool:
        """Stop renewing `keeper`; False if a renewal of it is under way (see `let_go`)."""
        with self._changed:
            self._held.discard(keeper)
            return keeper not in self._renewing

    def let_go(self, keeper: Renewed) -> None:
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
                due = {keeper for keeper in self._held if keeper.turn() <= now}
                if not due:
                    nearest = min((keeper.turn() for keeper in self._held), default=math.inf)
                    self._wakes_at = nearest
                    self._changed.wait(None if nearest == math.inf else nearest - now)
                    continue
                self._renewing = due
            for keeper in due:  # renewed outside the lock: a renewal waits on the database
                try:
                    if keeper.parked_until <= now:
                        self._unpark(keeper)
                    elif keeper.due <= now:
                        keeper.renew()
                except Exception:  # the thread must outlive any one lease, and renew the rest
                    keeper.due = time.monotonic() + keeper.interval
            with self._changed:
                self._renewing = set()
                self._changed.notify_all()

    def _unpark(self, keeper: Renewed) -> None:
        """Release a lease whose linger passed, unless a keeper adopted it meanwhile."""
        parking = parked_leases(keeper.journal, create=False)
        if parking is None or not parking.claim(keeper):
            return  # adopted: its adopter lets it go from here (`let_go` waits for this)
        with self._changed:
            self._held.discard(keeper)
        keeper.unparked()


renewer = LeaseRenewer()
"""The process's renewer."""
