"""The contract every journal backend keeps."""

from __future__ import annotations

import asyncio
import datetime
from typing import Protocol, runtime_checkable

from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import JournalEntry, Phase
from sagacity.journal._group import RECORDS_AN_OUTCOME, kept
from sagacity.journal._lease import SagaLease

__all__ = ["SideEffectJournal", "append_async", "entries_async"]


@runtime_checkable
class SideEffectJournal(Protocol):
    """An append-only, hash-chained store of journal entries, ordered per saga."""

    def append(
        self,
        saga_id: str,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
        fence: SagaLease | None = None,
    ) -> JournalEntry:
        """Durably append an entry; the journal assigns seq, time and hashes.

        Returns only once the entry is committed. Raises `JournalError` when it cannot
        be; an append is never silently dropped.

        With `expected_seq`, the append is conditional: the entry is written only if the
        saga's last seq is exactly `expected_seq` (0 for a saga with no entries), and so
        gets seq `expected_seq + 1`. Of writers racing with the same `expected_seq`, in
        this process or any other sharing the store, exactly one succeeds; the others
        write nothing and raise `AppendConflictError`, a `JournalError`.

        With `fence`, the entry is written only while that lease's token is still the
        saga's, checked in the same atomic step as the write; otherwise nothing is
        written and `LeaseLostError` (a `JournalError`) is raised.
        """
        ...

    def acquire_lease(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """Take the saga's lease until `expires_at`, if it is free or expired at `now`.

        A saga that ended since the lease was taken is free too: whoever ended it has
        nothing left to do, so ending a saga releases its lease without a commit of its
        own. Each acquisition gets a token greater than any before it for the saga.

        Raises:
            SagaBusyError: Another holder's lease runs past `now`; nothing was changed.
        """
        ...

    def renew_lease(self, lease: SagaLease, *, expires_at: datetime.datetime) -> SagaLease:
        """Move the lease's expiry to `expires_at`.

        Raises:
            LeaseLostError: The saga was taken over: the token is no longer the saga's.
        """
        ...

    def release_lease(self, lease: SagaLease) -> None:
        """Free the saga for the next worker; a lease already taken over is left alone."""
        ...

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order (empty for an unknown saga).

        Raises `JournalError` when the store cannot be read, naming the saga and seq
        when a stored entry cannot be read as one (edited outside sagacity).
        """
        ...

    def list_sagas(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Return up to `limit` saga ids in ascending order, those greater than `after`."""
        ...

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return up to `limit` entries of all sagas ordered by (saga_id, seq), after `after`.

        Raises `JournalError` as `entries` does.
        """
        ...

    def close(self) -> None:
        """Release connections; the journal is unusable afterwards."""
        ...


async def append_async(
    journal: SideEffectJournal,
    saga_id: str,
    phase: Phase,
    *,
    tool_name: str | None = None,
    call_id: str | None = None,
    ref_seq: int | None = None,
    payload: JsonValue = None,
    expected_seq: int | None = None,
    fence: SagaLease | None = None,
) -> JournalEntry:
    """`journal.append` awaited from async code, without blocking the event loop.

    A backend may define `aappend` with `append`'s signature (the three built-in ones
    do: a writer thread with group commit for SQLite, async connections awaited on the
    loop for PostgreSQL, the loop's own thread for memory); for any other journal, `append`
    runs on a worker thread. The guarantees are `append`'s: the entry is committed when
    this returns.
    """
    own = getattr(journal, "aappend", None)
    if own is not None:
        entry: JournalEntry = await own(
            saga_id,
            phase,
            tool_name=tool_name,
            call_id=call_id,
            ref_seq=ref_seq,
            payload=payload,
            expected_seq=expected_seq,
            fence=fence,
        )
        return entry
    appending = asyncio.to_thread(
        journal.append,
        saga_id,
        phase,
        tool_name=tool_name,
        call_id=call_id,
        ref_seq=ref_seq,
        payload=payload,
        expected_seq=expected_seq,
        fence=fence,
    )
    # An outcome is waited for through a cancel; an intent is not: its tool does not start.
    return await (kept(appending) if phase in RECORDS_AN_OUTCOME else appending)


async def entries_async(journal: SideEffectJournal, saga_id: str) -> list[JournalEntry]:
    """`journal.entries` awaited from async code, without blocking the event loop.

    The backend's `aentries` if it has one (PostgreSQL: the loop's async connections),
    else `entries` on a worker thread.
    """
    own = getattr(journal, "aentries", None)
    if own is not None:
        entries: list[JournalEntry] = await own(saga_id)
        return entries
    return await asyncio.to_thread(journal.entries, saga_id)
