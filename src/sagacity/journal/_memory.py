"""The in-memory journal: for tests and single-process use."""

from __future__ import annotations

import bisect
import threading

from sagacity.journal._canonical import JsonValue
from sagacity.journal._entry import GENESIS_HASH, JournalEntry, Phase, seal

__all__ = ["InMemoryJournal"]


class InMemoryJournal:
    """A journal held in this process's memory; thread-safe and async-safe.

    Appends never await, so one lock orders them for threads and tasks alike.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sagas: dict[str, list[JournalEntry]] = {}

    def append(
        self,
        saga_id: str,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
    ) -> JournalEntry:
        """Append an entry (see `SideEffectJournal.append`)."""
        with self._lock:
            chain = self._sagas.get(saga_id)
            if chain is None:
                chain = self._sagas[saga_id] = []
            prev_hash = chain[-1].hash if chain else GENESIS_HASH
            entry, _ = seal(
                saga_id,
                len(chain) + 1,
                phase,
                tool_name=tool_name,
                call_id=call_id,
                ref_seq=ref_seq,
                payload=payload,
                prev_hash=prev_hash,
            )
            chain.append(entry)
            return entry

    def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return a saga's entries in seq order."""
        with self._lock:
            return list(self._sagas.get(saga_id, ()))

    def list_sagas(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Return saga ids in ascending order, after `after`."""
        with self._lock:
            ids = sorted(self._sagas)
        start = 0 if after is None else bisect.bisect_right(ids, after)
        return ids[start : start + limit]

    def list_entries(
        self, *, after: tuple[str, int] | None = None, limit: int = 1000
    ) -> list[JournalEntry]:
        """Return entries ordered by (saga_id, seq), after `after`."""
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
