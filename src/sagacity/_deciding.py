"""Deciding on approval requests: show them, approve one, edit one.

The decisions of `Sagacity` that take no lease (each is a conditional append, see
`approval/_lifecycle.py`); a mixin, so that the facade in `saga.py` stays thin.
`reject` compensates, so it lives with the facade's leased operations.
"""

from __future__ import annotations

from typing import Any

from sagacity._ids import require_name
from sagacity._stored_call import edited_input
from sagacity.approval import ApprovalLifecycle, ApprovalRequest, edit_request
from sagacity.journal import JournalEntry
from sagacity.tools import SagaTool

__all__ = ["ApprovalDecisions"]


class ApprovalDecisions:
    """`Sagacity.pending`, `approve` and `edit`."""

    approval: ApprovalLifecycle
    _tools: dict[str, SagaTool]

    def pending(self, saga_id: str | None = None) -> list[ApprovalRequest]:
        """Return the approval requests waiting, of one saga or of all.

        Each is shown as the journal recorded it, with its `state` (`waiting`,
        `approved`, or `tampered` when the stored copy disagrees with the journal, with
        the `problem`), and its `approvals`: who approved, and when.
        """
        return self.approval.pending(saga_id)

    def approve(
        self,
        saga_id: str,
        *,
        approver: str,
        request_id: str | None = None,
        expected_sha256: str | None = None,
        justification: str | None = None,
    ) -> JournalEntry:
        """Journal a named approver's approval of a pending request's exact input.

        Args:
            saga_id: The saga.
            approver: Who approves; recorded in the chain.
            request_id: Which request; may be left out when the saga has exactly one.
            expected_sha256: The hash the approver was shown; refused if the request's
                input no longer hashes to it.
            justification: Why they approve, journaled with the approval and covered by
                its signature; required when the tool declares `justification_required`.

        Returns:
            The APPROVED entry. The request stays stored: resuming needs its hash.

        Raises:
            SelfApprovalError: The approver started the saga, or edited the input.
            ApprovalAlreadyGivenError: This approver approved it already, or it has all
                the approvers it needs.
            ApprovalError: Another check refused (rejected, used, expired, changed).
            ConfigurationError: Signatures are required and this Sagacity cannot sign.
        """
        require_name(approver, "approver")
        return self.approval.approve(
            saga_id,
            approver=approver,
            request_id=request_id,
            expected_sha256=expected_sha256,
            justification=justification,
        )

    def edit(
        self,
        saga_id: str,
        *,
        approver: str,
        request_id: str | None = None,
        new_input: dict[str, Any],
    ) -> ApprovalRequest:
        """Replace a pending request's input: the old request is closed, a new one asks.

        Journals a new AWAITING_APPROVAL for the same call with `new_input` (the whole
        input, checked against the tool's signature where it is wrapped here, defaults
        applied) and a REJECTED closing the old request. The saga is not compensated.
        The new request needs its approvals like any other; `approver`, its input's
        author, cannot give one. `resume_saga(saga_id)` then runs exactly `new_input`.

        Raises:
            ApprovalInputError: A field names no parameter, one is missing, or a value
                does not fit; nothing was journaled.
            ApprovalError: The request is unknown, rejected, used or changed.
        """
        require_name(approver, "approver")
        request = self.approval.pending_request(saga_id, request_id)
        checked = edited_input(self._tools.get(request.tool_name), request, new_input)
        return edit_request(
            self.approval,
            saga_id,
            editor=approver,
            request_id=request.request_id,
            new_input=checked,
        )
