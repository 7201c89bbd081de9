"""The in-memory journal: for tests and single-process use."""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import threading
from collections.abc import Sequence

from sagacity._ids import require_id, require_lookup
from sagacity.errors import AppendConflictError, SerializationError
from sagacity.journal._canonical import JsonValue, canonical_bytes, copy_json, decode_canonical
from sagacity.journal._entry import (
    GENESIS_HASH,
    JournalEntry,
    Phase,
    entry_hash,
    new_entry,
    refused_entry,
    utc_timestamp,
)
from sagacity.journal._lease import RELEASED, SagaLease, busy, lost

__all__ = ["InMemoryJournal"]

# Payloads that read back as themselves: no copy needed (a float may read back as an int).
_IMMUTABLE = frozenset((type(None), str, bool))


class InMemoryJournal:
    """A journal held in this process's memory; thread-safe and async-safe.

    Appends never await, so one lock orders them for threads and tasks alike. Each
    entry holds its own copy of the payload, decoded from the canonical bytes that were
    hashed: what is read back is what a SQL backend would return. The entries `append`
    returns and `entries` reads carry copies of their payloads, as a SQL backend's
    do: a caller that changes one (a replayed result it edits) changes its copy, never
    the journal.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sagas: dict[str, list[JournalEntry]] = {}
        self._leases: dict[str, SagaLease] = {}
        self._since: dict[str, int] = {}
        """Each lease's saga's last seq when it was taken: a later ENDED frees it."""

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
        """Append an entry, if the saga's last seq is `expected_seq` when given.

        See `SideEffectJournal.append`.

        Raises:
            AppendConflictError: `expected_seq` is not the saga's last seq; nothing was
                written.
            InvalidIdError: The saga id cannot be stored or shown (see `Sagacity.saga`).
        """
        require_id(saga_id, "saga id")
        try:  # SerializationError before the lock
            payload_bytes = canonical_bytes(payload)
        except SerializationError as error:
            raise refused_entry(error, saga_id, phase, tool_name, call_id) from error
        # The entry keeps its own copy of the payload, read back from the hashed bytes as
        # the SQL backends do: the caller's object may be changed later, the copy is not.
        stored = payload if type(payload) in _IMMUTABLE else decode_canonical(payload_bytes)
        with self._lock:
            if fence is not None:
                self._check_fence(fence)
            chain = self._sagas.get(saga_id)
            if expected_seq is not None:
                found = 0 if chain is None else len(chain)
                if found != expected_seq:
                    raise AppendConflictError(saga_id, expected_seq, found)
            return self._chained(saga_id, phase, tool_name, call_id, ref_seq, payload_bytes, stored)

    def _chained(
        self,
        saga_id: str,
        phase: Phase,
        tool_name: str | None,
        call_id: str | None,
        ref_seq: int | None,
        payload_bytes: bytes,
        stored: JsonValue,
    ) -> JournalEntry:
        """Chain an entry to the saga's last one (under the lock)."""
        chain = self._sagas.get(saga_id)
        seq = 1 if chain is None else len(chain) + 1
        prev_hash = chain[-1].hash if chain else GENESIS_HASH
        recorded_at = utc_timestamp()
        try:
            digest = entry_hash(
                saga_id,
                seq,
                phase,
                tool_name,
                call_id,
                ref_seq,
                payload_bytes,
                recorded_at,
                prev_hash,
            )
        except SerializationError as error:  # a field with no JSON form: nothing is kept
            raise refused_entry(error, saga_id, phase, tool_name, call_id) from error
        if chain is None:
            chain = self._sagas[saga_id] = []
        entry = new_entry(
            saga_id,
            seq,
            phase,
            tool_name,
            call_id,
            ref_seq,
            stored,
            recorded_at,
            prev_hash,
            digest,
        )
        chain.append(entry)
        if type(stored) in _IMMUTABLE:
            return entry
        # The caller gets its own copy, read back from the same bytes: what it does with
        # it (a replayed result it edits) never reaches the journal.
        return new_entry(
            saga_id,
            seq,
            phase,
            tool_name,
            call_id,
            ref_seq,
            decode_canonical(payload_bytes),
            recorded_at,
            prev_hash,
            digest,
        )

    async def aappend(
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
        """`append` for async code: it never waits on I/O, so it runs on the loop's thread."""
        return self.append(
            saga_id,
            phase,
            tool_name=tool_name,
            call_id=call_id,
            ref_seq=ref_seq,
            payload=payload,
            expected_seq=expected_seq,
            fence=fence,
        )

    async def aacquire_lease(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """`acquire_lease` for async code: it never waits on I/O, so it runs on the loop."""
        return self.acquire_lease(saga_id, owner, now=now, expires_at=expires_at)

    def acquire_lease(
        self, saga_id: str, owner: str, *, now: datetime.datetime, expires_at: datetime.datetime
    ) -> SagaLease:
        """Take the saga's lease if it is free at `now` (see `SideEffectJournal`)."""
        require_id(saga_id, "saga id")
        with self._lock:
            held = self._leases.get(saga_id)
            chain = self._sagas.get(saga_id, [])
            since = self._since.get(saga_id, 0)
            # A saga ended since the lease was taken is free: its holder has nothing left.
            ended = any(e.phase is Phase.ENDED for e in chain[since:])
            if held is not None and held.expires_at > now and not ended:
                raise busy(held)
            if held is not None and held.expires_at != RELEASED and not ended and chain:
                marker: JsonValue = {"owner": owner}  # its holder may still be running
                self._chained(
                    saga_id, Phase.TAKEN_OVER, None, None, None, canonical_bytes(marker), marker
                )
            self._since[saga_id] = len(chain)
            lease = SagaLease(
                saga_id=saga_id,
                owner=owner,
                token=1 if held is None else held.token + 1,
                expires_at=expires_at,
                head_seq=len(self._sagas.get(saga_id, ())),
            )
            self._leases[saga_id] = lease
            return lease

    def renew_lease(self, lease: SagaLease, *, expires_at: datetime.datetime) -> SagaLease:
        """Move the lease's expiry; `LeaseLostError` if it was taken over."""
        with self._lock:
            self._check_fence(lease)
            renewed = self._leases[lease.saga_id] = dataclasses.replace(
                lease, expires_at=expires_at
            )
            return renewed

    def release_lease(self, lease: SagaLease) -> None:
        """Free the saga, unless the lease was taken over."""
        with self._lock:
            if self._leases.get(lease.saga_id, lease).token == lease.token:
                self._leases[lease.saga_id] = dataclasses.replace(lease, expires_at=RELEASED)

    def read_leases(self, saga_ids: Sequence[str]) -> dict[str, SagaLease]:
        """The leases of `saga_ids` (those that have one), read without taking anything."""
        with self._lock:
            return {s: self._leases[s] for s in saga_ids if s in self._leases}

    def _check_fence(self, lease: SagaLease) -> None:
        held = self._leases.get(lease.saga_id)
        if held is None or held.token != lease.token:
            raise lost(lease)

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order, each with its own copy of its payload."""
        require_lookup(saga_id, "saga id")
        with self._lock:
            stored = list(self._sagas.get(saga_id, ()))
        return [entry if type(entry.payload) in _IMMUTABLE else _copied(entry) for entry in stored]

    async def aentries(self, saga_id: str) -> list[JournalEntry]:
        """`entries` for async code: it never waits on I/O, so it runs on the loop's thread."""
        return self.entries(saga_id)

    def list_sagas(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Return saga ids in ascending order, after `after`."""
        require_lookup(after, "listing position (after)")
        with self._lock:
            ids = sorted(self._sagas)
        start = 0 if after is None else bisect.bisect_right(ids, after)
        return ids[start : start + limit]

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return entries ordered by (saga_id, seq), after `after`."""
        if after is not None:
            require_lookup(after[0], "listing position (after)")
        result: list[JournalEntry] = []
        saga_after = None if after is None else after[0]
        if after is not None:
            result.extend(e for e in self.entries(after[0]) if e.seq > after[1])
        while len(result) < limit:
            ids = self.list_sagas(after=saga_after, limit=limit)
            if not ids:
                break
            for saga_id in ids:
                result.extend(self.entries(saga_id))
                if len(result) >= limit:
                    break
            saga_after = ids[-1]
        return result[:limit]

    def close(self) -> None:
        """Nothing to release."""

    def _chains(self) -> dict[str, list[JournalEntry]]:
        """The live storage, for tests that tamper with it (`sagacity.testing`)."""
        return self._sagas


def _copied(entry: JournalEntry) -> JournalEntry:
    """`entry` with a copy of its payload that shares no list or object with it."""
    return new_entry(
        entry.saga_id,
        entry.seq,
        entry.phase,
        entry.tool_name,
        entry.call_id,
        entry.ref_seq,
        copy_json(entry.payload),
        entry.recorded_at,
        entry.prev_hash,
        entry.hash,
    )
