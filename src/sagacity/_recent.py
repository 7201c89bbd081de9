"""The journal of each saga this process let go last: the next lease at that head skips the read.

A durable engine's steps join their saga one at a time (`Sagacity.join`): lease, read,
act, let go. When the next step lands in the same process, the read would return what the
last step left, so it is skipped if the lease proves nothing changed. `LeaseKeeper` keeps
each history it held when it lets go, and offers it back as `known_history`.
"""

from __future__ import annotations

import collections
import threading
import weakref

from sagacity._history import SagaHistory
from sagacity.journal import JournalEntry, SideEffectJournal
from sagacity.journal._lease import SagaLease

__all__ = ["RecentHistories", "recent_histories"]

_KEPT = 1024
"""Sagas remembered at most; the least recently let go is forgotten first."""


class RecentHistories:
    """What each saga's journal held when this process let its lease go.

    A lease is taken at the saga's head (`SagaLease.head_seq`: its last seq, read with the
    lease, under the lease's own lock). Entries kept for the saga that are seq 1 to that
    head with no gap are the journal then: entries are never changed or removed, and seqs
    have no gaps. So `history` gives them instead of a read. Anything appended since, by
    anyone (an approval, another worker, a takeover's TAKEN_OVER), moves the head, and the
    journal is read as before. A journal that does not say its head is always read.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[str, tuple[JournalEntry, ...]] = (
            collections.OrderedDict()
        )

    def history(self, saga_id: str, lease: SagaLease | None) -> SagaHistory | None:
        """The saga's history if what was kept is all the journal held at `lease`'s take."""
        if lease is None or not lease.head_seq:
            return None
        return self.at(saga_id, lease.head_seq)

    def at(self, saga_id: str, head_seq: int) -> SagaHistory | None:
        """The saga's history if what was kept is seq 1 to `head_seq`, its head read since."""
        kept = self.kept(saga_id)
        if kept is None or len(kept) != head_seq:
            return None
        return SagaHistory.of(saga_id, kept)

    def kept(self, saga_id: str) -> tuple[JournalEntry, ...] | None:
        """The entries kept for the saga (seq 1 to the last, no gap), if any."""
        with self._lock:
            return self._entries.get(saga_id)

    def keep(self, history: SagaHistory) -> None:
        """Remember `history` as the saga's journal now; forget a saga that ended."""
        entries = tuple(history.entries)
        whole = all(entry.seq == seq for seq, entry in enumerate(entries, start=1))
        with self._lock:
            self._entries.pop(history.saga_id, None)
            if history.ended is not None or history.lease_lost or not whole:
                return
            self._entries[history.saga_id] = entries
            while len(self._entries) > _KEPT:
                self._entries.popitem(last=False)


_BY_JOURNAL: weakref.WeakKeyDictionary[SideEffectJournal, RecentHistories] = (
    weakref.WeakKeyDictionary()
)
_BY_JOURNAL_LOCK = threading.Lock()


def recent_histories(journal: SideEffectJournal) -> RecentHistories | None:
    """The histories kept for `journal` (one set per journal object); None if it cannot hold one."""
    with _BY_JOURNAL_LOCK:
        try:
            found = _BY_JOURNAL.get(journal)
            if found is None:
                found = _BY_JOURNAL[journal] = RecentHistories()
        except TypeError:  # a journal that cannot be weakly referenced is always read
            return None
        return found
