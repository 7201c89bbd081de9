"""Resuming a saga without work: which approved call may run now, and with what input.

`Sagacity.resume_saga` asks `ApprovalLifecycle.resumable` once, before it takes the
saga's lease, and acts on the answer: a `ResumableCall`, or the refusal that says from
the journal why nothing can run. Under the lease it asks `ResumableCall.refuse_if_spent`
of the journal read there (another worker may have run the call meanwhile), and the
call then passes the hot path's own check, as any call does: `ApprovalLifecycle.asked`
finds its request, `ApprovalLifecycle.check` (`_check.check_approved`) verifies its
approvals and the input's hash, and `ApprovalLifecycle.consume` spends it.
"""

from __future__ import annotations

import dataclasses

from sagacity._history import SagaHistory
from sagacity.approval._check import explain_unusable
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import SagaStateError

__all__ = ["ResumableCall", "refuse_ended_resume"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResumableCall:
    """The approved call a resume without work runs: its request, as the journal records it."""

    request: ApprovalRequest
    """The pending request, verified against its AWAITING_APPROVAL entry: the call id,
    tool and journaled input to run."""

    def refuse_if_spent(self, history: SagaHistory) -> None:
        """Refuse if `history`, read under the lease, shows the call ran or was rejected.

        The call is run, never replayed: an approval runs its call once.

        Raises:
            ApprovalRejectedError: A REJECTED entry answers the request.
            ApprovalAlreadyUsedError: The approved call ran, or may have.
        """
        explain_unusable(history, self.request.request_id)


def refuse_ended_resume(history: SagaHistory, request_id: str | None) -> None:
    """Refuse to resume a saga that ended, saying why from the journal.

    Raises:
        ApprovalRejectedError: It ended after the request (the named one, else the
            newest) was rejected.
        ApprovalAlreadyUsedError: That request's approved call ran.
        SagaStateError: It ended otherwise.
    """
    if history.ended is None:
        return
    explain_unusable(history, request_id)
    raise SagaStateError(
        f"saga {history.saga_id!r} ended {history.outcome} at seq {history.ended.seq}; there "
        "is nothing to resume"
    )
