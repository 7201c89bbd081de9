"""Verification of the hash chain: every hash recomputed, every link and seq checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from sagacity.journal import GENESIS_HASH, JournalEntry, SideEffectJournal

__all__ = ["Problem", "VerificationReport", "iter_entries", "verify", "verify_entries"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """The first thing wrong with one saga's chain."""

    saga_id: str
    """The saga whose chain is broken."""
    seq: int
    """The first bad seq: from here on, nothing in the saga can be trusted."""
    reason: str
    """What is wrong: a hash mismatch, a broken link, a gap, a duplicate, a truncation."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class VerificationReport:
    """The result of `verify`."""

    sagas: int
    """How many sagas were checked."""
    entries: int
    """How many entries were checked."""
    problems: list[Problem]
    """One per broken saga, in saga order; empty when all is well."""

    @property
    def ok(self) -> bool:
        """True when every chain verified."""
        return not self.problems


def iter_entries(journal: SideEffectJournal, *, batch: int = 1000) -> Iterator[JournalEntry]:
    """Yield every entry of the journal in (saga_id, seq) order, a page at a time."""
    after: tuple[str, int] | None = None
    while True:
        page = journal.list_entries(after=after, limit=batch)
        yield from page
        if len(page) < batch:
            return
        after = (page[-1].saga_id, page[-1].seq)


def verify(journal: SideEffectJournal, saga_id: str | None = None) -> VerificationReport:
    """Recompute every hash and link of one saga, or of the whole journal.

    Memory stays bounded: entries are read a page at a time and checked as they come.
    """
    source = journal.entries(saga_id) if saga_id is not None else iter_entries(journal)
    return verify_entries(source)


def verify_entries(entries: Iterable[JournalEntry]) -> VerificationReport:
    """Verify entries given in (saga_id, seq) order, as an export holds them."""
    problems: list[Problem] = []
    sagas = count = 0
    current: str | None = None
    expected_seq = 1
    prev_hash = GENESIS_HASH
    broken = False
    for entry in entries:
        count += 1
        if entry.saga_id != current:
            current, expected_seq, prev_hash, broken = entry.saga_id, 1, GENESIS_HASH, False
            sagas += 1
        if broken:
            continue
        reason = _check(entry, expected_seq, prev_hash)
        if reason is not None:
            problems.append(Problem(saga_id=entry.saga_id, seq=expected_seq, reason=reason))
            broken = True
            continue
        expected_seq += 1
        prev_hash = entry.hash
    return VerificationReport(sagas=sagas, entries=count, problems=problems)


def _check(entry: JournalEntry, expected_seq: int, prev_hash: str) -> str | None:
    if entry.seq < expected_seq:
        return f"duplicate or out-of-order seq {entry.seq} where {expected_seq} was expected"
    if entry.seq > expected_seq:
        return f"gap: seq {expected_seq} is missing (next is {entry.seq})"
    if entry.prev_hash != prev_hash:
        return (
            f"broken link: prev_hash {entry.prev_hash[:12]}… does not match the previous "
            f"entry's hash {prev_hash[:12]}…"
        )
    computed = entry.computed_hash()
    if computed != entry.hash:
        return (
            f"hash mismatch: the entry's fields hash to {computed[:12]}…, but it records "
            f"{entry.hash[:12]}…; the entry was changed after it was written"
        )
    return None
