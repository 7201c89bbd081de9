"""Verification of the hash chain: every hash recomputed, every link and seq checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from sagacity._history import payload_of
from sagacity.journal import GENESIS_HASH, JournalEntry, Phase, SideEffectJournal
from sagacity.journal._rows import UnreadableRowError

if TYPE_CHECKING:
    from sagacity.approval._grant_audit import GrantAudit
    from sagacity.approval._policy import ApprovalPolicy
    from sagacity.audit._keys import PublicKey

__all__ = [
    "ChainCheck",
    "ChainHead",
    "Problem",
    "VerificationReport",
    "chain_heads",
    "iter_entries",
    "iter_saga_ids",
    "verify",
    "verify_entries",
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """The first thing wrong with one saga's chain."""

    saga_id: str
    """The saga whose chain is broken."""
    seq: int
    """The first bad seq: entries before it verified; from here on nothing can be trusted.
    For an approval whose signature does not verify: that APPROVED entry's seq."""
    reason: str
    """What is wrong: a hash mismatch, a broken link, a gap, a duplicate, a truncation,
    a stored row that cannot be read, an approval not signed by a trusted key."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class VerificationReport:
    """The result of `verify`."""

    sagas: int
    """How many sagas were checked."""
    entries: int
    """How many entries were checked."""
    problems: list[Problem]
    """One per broken saga, and one per approval whose signature does not verify (when
    `verify` was given approval keys), in saga and seq order; empty when all is well."""
    store_problems: list[str] = dataclasses.field(default_factory=list)
    """What is wrong with the store itself rather than a chain: a missing append-only
    trigger (someone made the journal table writable)."""

    @property
    def ok(self) -> bool:
        """True when every chain verified and the store has its protections."""
        return not self.problems and not self.store_problems


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChainHead:
    """The last entry of a saga's chain, recorded to detect a later truncation or rewrite.

    A chain verifies link by link from its first entry, so deleting entries from its end
    leaves a shorter chain that still verifies. Keep heads outside the database (a
    ticket, a log shipped elsewhere) and pass them to `verify`.
    """

    saga_id: str
    """The saga."""
    seq: int
    """The seq of its last entry when the head was recorded."""
    hash: str
    """That entry's hash."""


def iter_entries(journal: SideEffectJournal, *, batch: int = 1000) -> Iterator[JournalEntry]:
    """Yield every entry of the journal in (saga_id, seq) order, a page at a time."""
    after: tuple[str, int] | None = None
    while True:
        page = journal.list_entries(after=after, limit=batch)
        yield from page
        if len(page) < batch:
            return
        after = (page[-1].saga_id, page[-1].seq)


def chain_heads(journal: SideEffectJournal, saga_id: str | None = None) -> list[ChainHead]:
    """Return the head of one saga's chain, or of every saga's, in saga order.

    Record them when `verify` passes, and keep them where whoever can edit the
    database cannot; `verify(journal, heads=...)` then detects truncation.
    """
    saga_ids: Iterable[str] = [saga_id] if saga_id is not None else iter_saga_ids(journal)
    heads = []
    for saga in saga_ids:
        entries = journal.entries(saga)
        if entries:
            heads.append(ChainHead(saga_id=saga, seq=entries[-1].seq, hash=entries[-1].hash))
    return heads


def iter_saga_ids(journal: SideEffectJournal, *, batch: int = 1000) -> Iterator[str]:
    """Yield every saga id of the journal in ascending order, a page at a time."""
    after: str | None = None
    while True:
        page = journal.list_sagas(after=after, limit=batch)
        yield from page
        if len(page) < batch:
            return
        after = page[-1]


def verify(
    journal: SideEffectJournal,
    saga_id: str | None = None,
    *,
    heads: Iterable[ChainHead] = (),
    progress: Callable[[int], None] | None = None,
    approval_public_keys: Iterable[PublicKey] = (),
) -> VerificationReport:
    """Recompute every hash and link of one saga, or of every saga in the journal.

    Sagas are read one at a time, as the journal stores them: an entry that names
    another saga than the one it is stored under is itself a problem. So is a stored row
    that cannot be read at all (an unknown phase, a payload that is not JSON): it cannot
    be hash-checked, so the saga's first bad seq is that row's at the latest, the saga's
    later rows are not read, and the other sagas are checked as usual.

    Args:
        journal: The journal to check.
        saga_id: One saga to check; None for all.
        heads: Heads recorded earlier with `chain_heads`: a saga whose chain now ends
            before its recorded head, or whose entry at that seq has another hash, is
            reported, as is a saga that has vanished. Without them, entries deleted from
            the end of a chain go unseen.
        progress: Called with 1 after each saga is checked (a progress bar).
        approval_public_keys: The keys approvals must be signed with: each APPROVED
            entry of a chain that verifies up to it, whose signature does not verify with
            one of them (none, an unknown key, another approver's or request's), is a
            problem naming its saga and seq, as a deployment requiring signed approvals
            would not count it. Empty: signatures are not checked.
    """
    signatures = _signature_policy(approval_public_keys)
    grants = _grant_audit(signatures)
    recorded = {head.saga_id: head for head in heads}
    if saga_id is not None:
        saga_ids: Iterable[str] = [saga_id]
        recorded = {saga_id: recorded[saga_id]} if saga_id in recorded else {}
    else:
        saga_ids = iter_saga_ids(journal)
    problems: list[Problem] = []
    sagas = count = 0
    for saga in saga_ids:
        sagas += 1
        chain = ChainCheck(recorded.pop(saga, None), signatures)
        try:
            entries: Iterable[JournalEntry] = journal.entries(saga)
            unreadable = None
        except UnreadableRowError as error:  # the entries before the row were read
            entries, unreadable = error.readable, error
        for entry in entries:
            count += 1
            chain.check(entry, saga)
            if chain.problem is None:
                grants.see(entry)
        if unreadable is not None:
            count += 1
            chain.unreadable(unreadable.seq, unreadable.reason)
        problem = chain.finish(saga)
        if problem is not None:
            problems.append(problem)
        problems.extend(chain.unsigned)
        if progress is not None:
            progress(1)
    for saga, head in recorded.items():  # recorded, but the journal has no entry of it
        sagas += 1
        problem = ChainCheck(head).finish(saga)
        if problem is not None:
            problems.append(problem)
    problems.extend(_grant_problems(grants, problems, every_chain_read=saga_id is None))
    # Text before anything else: a SQLite file edited by hand may hold a BLOB saga id.
    problems.sort(
        key=lambda problem: (type(problem.saga_id) is not str, problem.saga_id, problem.seq)
    )
    return VerificationReport(
        sagas=sagas, entries=count, problems=problems, store_problems=_store_problems(journal)
    )


def _store_problems(journal: SideEffectJournal) -> list[str]:
    """Missing append-only triggers, for the SQL backends that have them; read only."""
    missing_triggers = getattr(journal, "missing_triggers", None)
    if missing_triggers is None:
        return []
    return [
        f"the append-only trigger {name} is missing or disabled: the journal table accepts "
        "UPDATE and DELETE; find out who removed it before re-creating it"
        for name in missing_triggers()
    ]


def verify_entries(
    entries: Iterable[JournalEntry],
    *,
    heads: Iterable[ChainHead] = (),
    approval_public_keys: Iterable[PublicKey] = (),
) -> VerificationReport:
    """Verify entries given in seq order within each saga, as an export holds them.

    Each entry is checked against the chain of the saga its own `saga_id` names; sagas
    may come in any order, even interleaved. `heads` and `approval_public_keys` are as
    for `verify`.
    """
    signatures = _signature_policy(approval_public_keys)
    grants = _grant_audit(signatures)
    recorded = {head.saga_id: head for head in heads}
    chains: dict[str, ChainCheck] = {}
    count = 0
    for entry in entries:
        count += 1
        chain = chains.get(entry.saga_id)
        if chain is None:
            chain = chains[entry.saga_id] = ChainCheck(recorded.get(entry.saga_id), signatures)
        chain.check(entry, entry.saga_id)
        if chain.problem is None:
            grants.see(entry)
    for saga, head in recorded.items():
        if saga not in chains:
            chains[saga] = ChainCheck(head)
    problems = []
    for saga, chain in sorted(chains.items()):
        problem = chain.finish(saga)
        if problem is not None:
            problems.append(problem)
        problems.extend(chain.unsigned)
    problems.extend(_grant_problems(grants, problems, every_chain_read=False))
    problems.sort(key=lambda problem: (problem.saga_id, problem.seq))
    return VerificationReport(sagas=len(chains), entries=count, problems=problems)


def _grant_audit(signatures: ApprovalPolicy | None) -> GrantAudit:
    from sagacity.approval._grant_audit import GrantAudit

    return GrantAudit(signatures)


def _grant_problems(
    grants: GrantAudit, found: list[Problem], *, every_chain_read: bool
) -> list[Problem]:
    """The standing grants' problems, none for a chain already reported broken.

    GRANT_USED entries that covered calls name but their chain no longer holds (deleted
    or rewritten), and GRANTED entries that do not count under signed approvals.
    """
    broken = {problem.saga_id for problem in found}
    return [
        Problem(saga_id=problem.saga_id, seq=problem.seq, reason=problem.reason)
        for problem in grants.unsigned + grants.problems(every_chain_read=every_chain_read)
        if problem.saga_id not in broken
    ]


def _signature_policy(keys: Iterable[PublicKey]) -> ApprovalPolicy | None:
    """The policy that counts only approvals signed with `keys`; None for no keys."""
    from sagacity.approval._policy import ApprovalPolicy

    trusted = list(keys)
    return ApprovalPolicy.build(None, trusted, True) if trusted else None


class ChainCheck:
    """One saga's chain as verified so far."""

    __slots__ = ("head", "prev_hash", "problem", "seq", "signatures", "unsigned")

    def __init__(self, head: ChainHead | None, signatures: ApprovalPolicy | None = None) -> None:
        self.head = head
        """The head recorded for this saga, if any."""
        self.signatures = signatures
        """Checks each verified APPROVED entry's signature; None: not checked."""
        self.unsigned: list[Problem] = []
        """The verified APPROVED entries whose signature does not verify."""
        self.seq = 0
        """The last seq verified."""
        self.prev_hash = GENESIS_HASH
        """Its hash."""
        self.problem: tuple[int, str] | None = None
        """The first bad seq and why."""

    def check(self, entry: JournalEntry, saga_id: str) -> None:
        """Check the next entry of saga `saga_id`."""
        if self.problem is not None:
            return
        reason = _check(entry, saga_id, self.seq + 1, self.prev_hash)
        if reason is not None:
            self.problem = (self.seq + 1, reason)
            return
        self.seq = entry.seq
        self.prev_hash = entry.hash
        if self.signatures is not None and entry.phase is Phase.APPROVED:
            why = self.signatures.signature_problem(saga_id, entry)
            if why is not None:
                approver = payload_of(entry).get("approver")
                self.unsigned.append(
                    Problem(
                        saga_id=saga_id,
                        seq=entry.seq,
                        reason=f"unsigned approval: the APPROVED entry naming approver "
                        f"{approver!r} does not count: {why}",
                    )
                )
        head = self.head
        if head is not None and head.seq == entry.seq and head.hash != entry.hash:
            self.problem = (
                entry.seq,
                f"rewritten: seq {entry.seq} hashes to {entry.hash[:12]}…, but its head was "
                f"recorded as {head.hash[:12]}…; the chain was rebuilt at or before this seq",
            )

    def unreadable(self, seq: object, reason: str) -> None:
        """The next row of the saga, stored at `seq`, cannot be read: `reason` says why."""
        if self.problem is not None:
            return
        expected = self.seq + 1
        if type(seq) is int and seq == expected:
            self.problem = (expected, f"unreadable row: {reason}")
        else:
            self.problem = (
                expected,
                f"unreadable row stored at seq {seq!r} where {expected} was expected: {reason}",
            )

    def finish(self, saga_id: str) -> Problem | None:
        """Return the chain's first problem, once all its entries were checked."""
        head = self.head
        if self.problem is None and head is not None and self.seq == 0:
            self.problem = (
                1,
                f"deleted: the journal has no entry of this saga, but its head was recorded "
                f"at seq {head.seq}",
            )
        if self.problem is None and head is not None and self.seq < head.seq:
            self.problem = (
                self.seq + 1,
                f"truncation: the chain ends at seq {self.seq}, but its head was recorded at "
                f"seq {head.seq}; the entries after seq {self.seq} were deleted",
            )
        if self.problem is None:
            return None
        return Problem(saga_id=saga_id, seq=self.problem[0], reason=self.problem[1])


def _check(entry: JournalEntry, saga_id: str, expected_seq: int, prev_hash: str) -> str | None:
    if entry.saga_id != saga_id:
        return f"the entry stored at seq {expected_seq} names saga {entry.saga_id!r}"
    seq = entry.seq
    if type(seq) is not int:
        return f"seq {seq!r} is not an integer where {expected_seq} was expected"
    if seq < expected_seq:
        return f"duplicate or out-of-order seq {seq} where {expected_seq} was expected"
    if seq > expected_seq:
        return f"gap: seq {expected_seq} is missing (next is {seq})"
    if entry.prev_hash != prev_hash:
        return (
            f"broken link: prev_hash {str(entry.prev_hash)[:12]}… does not match the previous "
            f"entry's hash {prev_hash[:12]}…"
        )
    try:
        computed = entry.computed_hash()
    except Exception as error:  # a field of the wrong type has no canonical form
        return f"unhashable entry: {error}"
    if computed != entry.hash:
        return (
            f"hash mismatch: the entry's fields hash to {computed[:12]}…, but it records "
            f"{str(entry.hash)[:12]}…; the entry was changed after it was written"
        )
    return None
