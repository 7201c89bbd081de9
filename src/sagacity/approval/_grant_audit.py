"""What `verify` checks of standing grants beyond each chain's own hashes and links.

A chain verifies link by link from its first entry, so a GRANT_USED deleted from the end
of a grant's chain leaves a shorter chain that still verifies, and the grant covers a
call more than it was given. The call it covered still names it: its INTENT carries
`approval_grant` with the seq and hash of its GRANT_USED. `GrantAudit` is fed every entry
`verify` reads and reports each GRANT_USED an INTENT names that the grant's chain no
longer holds, or holds with another hash. It also reports a GRANTED entry that a process
requiring signed approvals would not count (no signature, an untrusted key, malformed
terms), as `verify` reports such an APPROVED.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sagacity._history import payload_of
from sagacity.approval._grant_chain import GRANT_PREFIX, granted_problem
from sagacity.journal import JournalEntry, Phase

if TYPE_CHECKING:
    from sagacity.approval._policy import ApprovalPolicy

__all__ = ["GrantAudit", "GrantProblem"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GrantProblem:
    """One thing wrong with a grant's chain: where, and why."""

    saga_id: str
    """The grant's chain, `grant-<id>`."""
    seq: int
    """The seq at fault."""
    reason: str
    """What is wrong."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Use:
    """A covered call's INTENT, and the GRANT_USED it names."""

    saga_id: str
    call_id: str
    intent_seq: int
    grant_hash: str


class GrantAudit:
    """Cross-checks covered calls against their grants' chains, fed entries as read."""

    __slots__ = ("chains", "named", "signatures", "unsigned", "used")

    def __init__(self, signatures: ApprovalPolicy | None = None) -> None:
        self.signatures = signatures
        """Checks each GRANTED entry's signature and terms; None: not checked."""
        self.named: list[tuple[str, int, _Use]] = []
        """The GRANT_USED each covered INTENT names: (grant chain, seq, the INTENT)."""
        self.used: dict[tuple[str, int], str] = {}
        """Every GRANT_USED read, by (grant chain, seq): its hash."""
        self.chains: set[str] = set()
        """The grant chains read (their GRANTED was seen)."""
        self.unsigned: list[GrantProblem] = []
        """The GRANTED entries a process requiring signed approvals would not count."""

    def see(self, entry: JournalEntry) -> None:
        """Note what `entry` says about a grant."""
        phase = entry.phase
        if phase is Phase.INTENT:
            record = payload_of(entry).get("approval_grant")
            if not isinstance(record, dict):
                return
            grant_id, seq, hash_ = (record.get(k) for k in ("grant_id", "grant_seq", "grant_hash"))
            if isinstance(grant_id, str) and type(seq) is int and isinstance(hash_, str):
                use = _Use(
                    saga_id=entry.saga_id,
                    call_id=str(entry.call_id),
                    intent_seq=entry.seq,
                    grant_hash=hash_,
                )
                self.named.append((GRANT_PREFIX + grant_id, seq, use))
        elif phase is Phase.GRANT_USED:
            self.used[(entry.saga_id, entry.seq)] = entry.hash
        elif phase is Phase.GRANTED:
            self.chains.add(entry.saga_id)
            if self.signatures is not None:
                grant_id = entry.saga_id.removeprefix(GRANT_PREFIX)
                why = granted_problem(entry, grant_id, self.signatures)
                if why is not None:
                    self.unsigned.append(
                        GrantProblem(
                            saga_id=entry.saga_id,
                            seq=entry.seq,
                            reason=f"unsigned grant: the GRANTED entry does not count: {why}",
                        )
                    )

    def problems(self, *, every_chain_read: bool) -> list[GrantProblem]:
        """Each GRANT_USED a covered call names that its grant's chain does not hold as named.

        Args:
            every_chain_read: The whole journal was read, so a chain not seen was deleted.
                False for a part of it (an export of some sagas): a chain not seen is
                not checked.
        """
        found = []
        for chain, seq, use in self.named:
            if chain not in self.chains and not every_chain_read:
                continue
            call = (
                f"the INTENT of call {use.call_id!r} in saga {use.saga_id!r} (seq "
                f"{use.intent_seq}) names this grant's GRANT_USED at seq {seq}"
            )
            held = self.used.get((chain, seq))
            if held is None:
                reason = (
                    f"deleted: {call}, which the chain no longer holds; the grant would "
                    "cover more calls than it was given"
                )
            elif held != use.grant_hash:
                reason = (
                    f"rewritten: {call} with hash {use.grant_hash[:12]}…, but the chain's "
                    f"entry at that seq hashes to {held[:12]}…"
                )
            else:
                continue
            found.append(GrantProblem(saga_id=chain, seq=seq, reason=reason))
        return found
