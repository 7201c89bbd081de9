"""Deciding on approval requests: show them, approve one, reject one, edit one.

The decisions of `Sagacity` (approving and editing are conditional appends, see
`approval/_lifecycle.py`; rejecting takes the saga's lease, for it compensates); a
mixin, so that the facade in `saga.py` stays thin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sagacity._ids import require_name
from sagacity._stored_call import edited_input
from sagacity.approval import ApprovalLifecycle, ApprovalRequest, edit_request
from sagacity.approval._provenance import checked_via
from sagacity.journal import JournalEntry
from sagacity.tools import SagaTool

if TYPE_CHECKING:
    from sagacity._leasing import LeaseKeeper
    from sagacity._outcome import SagaEnding, SagaResult

__all__ = ["ApprovalDecisions"]


class ApprovalDecisions:
    """`Sagacity.pending`, `approve`, `reject` and `edit`."""

    approval: ApprovalLifecycle
    _tools: dict[str, SagaTool]
    _ending: SagaEnding

    if TYPE_CHECKING:

        def _leased(
            self, saga_id: str, *, opening: bool = False, wait: float | None = None
        ) -> LeaseKeeper: ...

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
        via: str | None = None,
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
            via: The channel the decision came through, journaled and signed with it:
                "python" when None; sagacity's own channels pass "cli", "api", "inbox",
                "email" or "slack", an application its own short lowercase name.

        Returns:
            The APPROVED entry. The request stays stored: resuming needs its hash.

        Raises:
            SelfApprovalError: The approver started the saga, or edited the input.
            ApprovalAlreadyGivenError: This approver approved it already, or it has all
                the approvers it needs.
            ApprovalError: Another check refused (rejected, used, expired, changed).
            ConfigurationError: Signatures are required and this Sagacity cannot sign.
            ValueError: The approver names nobody, or `via` is not a short lowercase
                name (`^[a-z][a-z0-9_-]{0,31}$`).
        """
        require_name(approver, "approver")
        return self.approval.approve(
            saga_id,
            approver=approver,
            request_id=request_id,
            expected_sha256=expected_sha256,
            justification=justification,
            via=checked_via(via),
        )

    def reject(
        self,
        saga_id: str,
        *,
        approver: str,
        reason: str,
        request_id: str | None = None,
        via: str | None = None,
    ) -> SagaResult:
        """Journal a rejection, consume the request and compensate the saga.

        `via` is the channel the decision came through, journaled with it (see `approve`).

        Raises:
            ApprovalAlreadyUsedError: The approved call is already running (or ran).
            ValueError: The approver names nobody, the reason is not text, or `via` is
                not a channel's name.
        """
        require_name(approver, "approver")
        if not isinstance(reason, str):
            raise ValueError(
                f"saga {saga_id!r}: the rejection's reason must be text, not "
                f"{type(reason).__name__}"
            )
        channel = checked_via(via)
        with self._leased(saga_id) as keeper:
            history = self.approval.reject(
                saga_id,
                approver=approver,
                reason=reason,
                request_id=request_id,
                keeper=keeper,
                via=channel,
            )
            report = self._ending.walk(history)
            return self._ending.compensated(history, report, value=None, error=None)

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
