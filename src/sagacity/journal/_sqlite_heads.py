"""The heads a SQLite journal remembers per saga, and the lease token known to hold each.

An append after a remembered head is one `INSERT` of the next seq: the primary key
refuses it if any writer took that seq since. A fenced append must also be refused
once its lease is no longer the saga's. It is checked in its `INSERT`
(`INSERT … SELECT … WHERE EXISTS` on the lease row) unless the head it follows is
**fenced** by its token: known to this journal to have been written, or read under the
write lock, while that token held the saga, with no other writer's row after it.

An unchecked append under a fenced head is safe because every way the lease can pass
to another worker after that head, through this journal or another, takes the seq the
`INSERT` takes, or is let go through this journal first:

- a lease that expired unreleased is taken over with TAKEN_OVER journaled after the
  saga's head, in the taking transaction: it holds the next seq, the `INSERT` is
  refused, and the locked path checks the token and raises `LeaseLostError`;
- a lease released through this journal, and a saga ended through it (after ENDED the
  next worker takes the lease with no TAKEN_OVER), are let go first: their saga's
  appends are checked again, and the token never fences a head again;
- a row another writer appended (an ENDED among them) takes the next seq: the
  `INSERT` is refused, and the saga's appends are checked until its lease is taken
  again through this journal.

A lease handed over by editing `sagacity_lease` by hand, or released with a copy of its
token through another journal, journals nothing that fences: the holder's appends under
a fenced head are not refused then.
"""

from __future__ import annotations

from sagacity.journal._entry import GENESIS_HASH, Phase
from sagacity.journal._lease import SagaLease

__all__ = ["Head", "Heads"]

MAX_REMEMBERED = 10_000
"""Sagas remembered at most: past it the journal forgets them all, and reads heads again."""

Head = tuple[int, str, int | None]
"""(seq, hash, token): a saga's last entry as this journal knows it, and the lease token
known to hold the saga there (None: a fenced append after it is checked)."""


class Heads:
    """The heads of one journal, and the leases it took and has not let go.

    Not thread-safe: the journal calls it under its lock.
    """

    def __init__(self) -> None:
        self._heads: dict[str, Head] = {}
        self._held: dict[str, int] = {}
        """The token of each lease this journal took and has not let go, by saga."""

    def get(self, saga_id: str) -> Head | None:
        """The saga's remembered head, if any."""
        return self._heads.get(saga_id)

    def __contains__(self, saga_id: object) -> bool:
        return saga_id in self._heads

    def wrote(
        self, saga_id: str, seq: int, hash: str, phase: Phase, fence: SagaLease | None
    ) -> None:
        """Remember the entry this journal just wrote after the head it knew, or read it after.

        The head is fenced by `fence` only while that lease is held by this journal and
        not let go; ENDED lets it go (see the module's docstring).
        """
        token = None
        if phase is Phase.ENDED:
            self._held.pop(saga_id, None)
        elif fence is not None and self._held.get(saga_id) == fence.token:
            token = fence.token
        self._remember(saga_id, (seq, hash, token))

    def read(self, saga_id: str, seq: int, hash: str) -> None:
        """Remember a head read under the write lock, fencing nothing."""
        self._remember(saga_id, (seq, hash, None))

    def moved(self, saga_id: str) -> None:
        """Another writer appended after the head, or it is unknown: stop fencing the saga.

        Its lease's appends are checked until it is taken again through this journal.
        """
        self._heads.pop(saga_id, None)
        self._held.pop(saga_id, None)

    def taken(self, lease: SagaLease, head: tuple[int, str] | None) -> None:
        """Remember a lease this journal took, and the head it read in the same transaction.

        A saga with no entries is not fenced at seq 0, since a takeover before its first
        entry journals no TAKEN_OVER: its first append is checked, and fences its entry.
        """
        if len(self._held) >= MAX_REMEMBERED:
            self._held.clear()  # forgetting only makes appends checked
        self._held[lease.saga_id] = lease.token
        if head is None:
            self.read(lease.saga_id, 0, GENESIS_HASH)
        else:
            self._remember(lease.saga_id, (head[0], head[1], lease.token))

    def let_go(self, lease: SagaLease) -> None:
        """The lease is being released through this journal: its appends are checked again."""
        if self._held.get(lease.saga_id) == lease.token:
            del self._held[lease.saga_id]
        head = self._heads.get(lease.saga_id)
        if head is not None and head[2] is not None:
            self._heads[lease.saga_id] = (head[0], head[1], None)

    def _remember(self, saga_id: str, head: Head) -> None:
        heads = self._heads
        if len(heads) >= MAX_REMEMBERED and saga_id not in heads:
            heads.clear()
        heads[saga_id] = head
