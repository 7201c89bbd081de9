"""Leases this process parked after a join let its saga go (`Sagacity.join`'s `linger`).

The registry, per journal; the renewer (`_renewing`) renews and releases what is parked,
and `K` parks and adopts.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Generic, Protocol, TypeVar

from sagacity.journal import SideEffectJournal

__all__ = ["Parked", "ParkedLeases", "parked_journals", "parked_leases"]


class Parked(Protocol):
    """A lease keeper as the registry sees it (`_leasing.LeaseKeeper`)."""

    parked_until: float
    """While parked, when the renewer releases the lease (`time.monotonic()`)."""

    @property
    def saga_id(self) -> str:
        """The saga held."""
        ...


K = TypeVar("K", bound=Parked)


class ParkedLeases(Generic[K]):
    """The leases this process parked after a join let its saga go (`linger`), per journal.

    A parked lease is still held: the renewer renews it, and releases it once its linger
    passed. The saga's next lease keeper in this process adopts it instead of taking the
    lease (no commit). Taking one out is exclusive: of two threads joining the saga at
    once, one adopts it and the other takes the lease as any worker would, waiting for
    it. A lease on its way out (being released) is waited for, so that a keeper of this
    process never finds the saga busy with its own lease.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._parked: dict[str, K] = {}
        self._leaving: dict[str, K] = {}

    def __contains__(self, saga_id: object) -> bool:
        with self._changed:
            return saga_id in self._parked or saga_id in self._leaving

    def park(self, keeper: K) -> None:
        """Keep `keeper`'s lease for the saga's next keeper here."""
        with self._changed:
            self._parked[keeper.saga_id] = keeper

    def take(self, saga_id: str) -> K | None:
        """The keeper parked on the saga, taken out for adoption; None if none is parked.

        A lease being released is waited for first: then the saga is free to take.
        """
        with self._changed:
            self._changed.wait_for(lambda: saga_id not in self._leaving)
            keeper = self._parked.pop(saga_id, None)
            if keeper is not None:
                keeper.parked_until = math.inf
            return keeper

    def claim(self, keeper: K) -> bool:
        """Take `keeper` out to release it, unless it was adopted; then call `left`."""
        with self._changed:
            if self._parked.get(keeper.saga_id) is not keeper:
                return False
            del self._parked[keeper.saga_id]
            keeper.parked_until = math.inf
            self._leaving[keeper.saga_id] = keeper
            return True

    def claim_all(self) -> list[K]:
        """Take every parked keeper out to release it (see `claim`)."""
        with self._changed:
            keepers = list(self._parked.values())
            self._parked.clear()
            for keeper in keepers:
                keeper.parked_until = math.inf
                self._leaving[keeper.saga_id] = keeper
            return keepers

    def left(self, keeper: K) -> None:
        """A claimed keeper's lease was released (or left to expire)."""
        with self._changed:
            if self._leaving.get(keeper.saga_id) is keeper:
                del self._leaving[keeper.saga_id]
            self._changed.notify_all()


_PARKED: weakref.WeakKeyDictionary[SideEffectJournal, ParkedLeases[Any]] = (
    weakref.WeakKeyDictionary()
)
_PARKED_LOCK = threading.Lock()


def parked_leases(journal: SideEffectJournal, *, create: bool = True) -> ParkedLeases[Any] | None:
    """The leases parked for `journal`; None if it has none (and not `create`) or cannot.

    A journal that cannot be weakly referenced parks nothing: its leases are released.
    """
    with _PARKED_LOCK:
        try:
            found = _PARKED.get(journal)
            if found is None and create:
                found = _PARKED[journal] = ParkedLeases[Any]()
        except TypeError:
            return None
        return found


def parked_journals() -> list[SideEffectJournal]:
    """The journals that have parked leases, or had (at exit, to release what is left)."""
    with _PARKED_LOCK:
        return list(_PARKED.keys())
