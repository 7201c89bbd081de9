"""Pending requests as the journal records them: find one, show them all, close one.

The store is working state that anyone with database access can edit; every request
found or shown here is read against its AWAITING_APPROVAL entry
(`_check.verified_request`), and a request the journal says was used or rejected is not
pending, whatever the store still holds.
"""

from __future__ import annotations

import dataclasses

from sagacity import _telemetry
from sagacity._history import SagaHistory
from sagacity.approval._check import explain_unusable, journaled_request, verified_request
from sagacity.approval._policy import ApprovalPolicy
from sagacity.approval._provenance import with_provenance
from sagacity.approval._request import ApprovalRequest, ApprovalStore
from sagacity.errors import ApprovalError, ApprovalNotFoundError, JournalError
from sagacity.journal import SideEffectJournal

__all__ = ["PendingRequests"]


class PendingRequests:
    """Finding, showing and closing requests: the base of `ApprovalLifecycle`."""

    journal: SideEffectJournal
    store: ApprovalStore
    policy: ApprovalPolicy
    declared_approvers: dict[str, int]
    justification_required: set[str]

    def pending(
        self, saga_id: str | None = None, *, history: SagaHistory | None = None
    ) -> list[ApprovalRequest]:
        """Return the stored requests as the journal records them, with their state.

        A request whose stored copy disagrees with the journal is shown with the
        journal's input and a `problem`; it cannot be approved. So is each request of a
        saga whose journal cannot be read (a row edited outside sagacity): the others
        are shown as usual.
        """
        histories: dict[str, SagaHistory] = {} if history is None else {history.saga_id: history}
        unreadable: dict[str, JournalError] = {}
        shown = []
        for stored in self.store.pending(saga_id):
            found = histories.get(stored.saga_id)
            if found is None and stored.saga_id not in unreadable:
                try:
                    found = histories[stored.saga_id] = self.history(stored.saga_id)
                except JournalError as error:
                    unreadable[stored.saga_id] = error
            if found is None:
                problem = (
                    f"saga {stored.saga_id!r}: its journal cannot be read, so request "
                    f"{stored.request_id} cannot be checked against it nor approved: "
                    f"{unreadable[stored.saga_id]}"
                )
                shown.append(dataclasses.replace(stored, problem=problem))
                continue
            if _answered(stored, found):
                continue  # the journal says it was used or rejected; the store lagged behind
            shown.append(self._shown(stored, found))
        return shown

    def pending_request(self, saga_id: str, request_id: str | None) -> ApprovalRequest:
        """The verified pending request named, or the saga's only one.

        Raises:
            ApprovalNotFoundError: There is none, or several and none was named; the
                journal says why when a request was used or rejected.
        """
        return self._pending(self.history(saga_id), request_id)

    def pending_in(self, history: SagaHistory, request_id: str | None) -> ApprovalRequest:
        """The verified pending request named, or the saga's only one, read from `history`."""
        return self._pending(history, request_id)

    def verified(self, stored: ApprovalRequest, history: SagaHistory) -> ApprovalRequest:
        """The stored request as the journal records it (see `verified_request`).

        It needs at least as many approvers as this process's wrap of its tool declares:
        an AWAITING_APPROVAL appended by someone with database access cannot ask for
        fewer than the code does.
        """
        verified = verified_request(stored, history, self.policy)
        declared = self.declared_approvers.get(verified.tool_name, 1)
        if declared > verified.approvers_required:
            verified = dataclasses.replace(verified, approvers_required=declared)
        return with_provenance(verified, history, self.justification_required)

    def _shown(self, stored: ApprovalRequest, history: SagaHistory) -> ApprovalRequest:
        try:
            return self.verified(stored, history)
        except ApprovalError as problem:
            awaiting = history.awaiting.get(stored.request_id)
            shown = stored if awaiting is None else journaled_request(history.saga_id, awaiting)
            return dataclasses.replace(shown, problem=str(problem))

    def history(self, saga_id: str) -> SagaHistory:
        """Read the saga's journal."""
        return SagaHistory.of(saga_id, self.journal.entries(saga_id))

    def discard(self, saga_id: str) -> None:
        """Delete the saga's pending requests: it ended, so nothing may run now."""
        for request in self.store.pending(saga_id):
            self._close(request, "discarded")

    def _pending(self, history: SagaHistory, request_id: str | None) -> ApprovalRequest:
        try:
            stored = self._stored(history.saga_id, request_id)
        except ApprovalNotFoundError:
            history.reload(self.journal)  # consumed since it was read: the journal says why
            explain_unusable(history, request_id)
            raise
        return self.verified(stored, history)

    def _stored(self, saga_id: str, request_id: str | None) -> ApprovalRequest:
        if request_id is not None:
            request = self.store.get(request_id)
            if request is None or request.saga_id != saga_id:
                raise ApprovalNotFoundError(
                    f"saga {saga_id!r} has no pending approval request {request_id!r}"
                )
            return request
        pending = self.store.pending(saga_id)
        if len(pending) == 1:
            return pending[0]
        if not pending:
            raise ApprovalNotFoundError(f"saga {saga_id!r} has no pending approval request")
        raise ApprovalNotFoundError(
            f"saga {saga_id!r} has {len(pending)} pending approval requests "
            f"({', '.join(r.request_id for r in pending)}); name one with request_id"
        )

    def _close(self, request: ApprovalRequest, how: str) -> None:
        """Delete a request that nothing may approve any more, and say so (telemetry)."""
        self.store.delete(request.request_id)
        _telemetry.approval_closed(request, how)


def _answered(stored: ApprovalRequest, history: SagaHistory) -> bool:
    """Whether the journal answered the stored request: its call ran after it, or it was rejected.

    A worker killed between the call's outcome and the store's delete leaves such a copy
    behind; it must not keep the saga waiting for a decision already made.
    """
    awaiting = history.awaiting.get(stored.request_id)
    return awaiting is not None and awaiting not in history.open_requests()
