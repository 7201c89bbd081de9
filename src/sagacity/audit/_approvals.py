"""Which journaled approvals a deployment requiring signatures does not count, for display.

`pending`, `show` and the approval inbox mark such an entry `unsigned: not counted`,
never as a decision by the approver it names: a row anyone with database access can
write proves nothing about that person.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sagacity.journal import JournalEntry, Phase

if TYPE_CHECKING:
    from sagacity.approval._policy import ApprovalPolicy

__all__ = ["NOT_COUNTED", "unsigned_approvals"]

NOT_COUNTED = "unsigned: not counted"
"""How an APPROVED entry whose signature does not verify is shown."""


def unsigned_approvals(
    policy: ApprovalPolicy, saga_id: str, entries: Iterable[JournalEntry]
) -> dict[int, str]:
    """The APPROVED `entries` that do not count for their signature: seq to why.

    Empty unless `policy` requires signed approvals: where it does not, every approval
    counts whatever it carries.
    """
    if not policy.require_signed:
        return {}
    found: dict[int, str] = {}
    for entry in entries:
        if entry.phase is Phase.APPROVED:
            why = policy.signature_problem(saga_id, entry)
            if why is not None:
                found[entry.seq] = why
    return found
