"""The approval lifecycle in one place: ask, decide, check, consume, and show.

An IRREVERSIBLE call is *asked* (an AWAITING_APPROVAL entry in the journal, and a
request in the store); a human *decides* (APPROVED or REJECTED, journaled); when the
call runs it is *checked* against the journal (`_check.py` holds every refusal) and its
request is *consumed*. A framework's own "no" inside a run is a rejection too
(`decline`). What is shown to an approver is read from the journal, never from the
editable store alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sagacity import _telemetry
from sagacity._history import SagaHistory, payload_of
from sagacity._unicode import principal_key
from sagacity.annotations import declaration_of
from sagacity.approval._check import (
    check_approved,
    check_current,
    check_unused,
    journaled_request,
    verified_request,
)
from sagacity.approval._policy import ApprovalHook, ApprovalPolicy, notify, refuse_self_approval
from sagacity.approval._request import ApprovalRequest, ApprovalStore
from sagacity.errors import (
    AppendConflictError,
    ApprovalAlreadyGivenError,
    ApprovalAlreadyUsedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ApprovalToolMismatchError,
    ConfigurationError,
    JournalError,
    SagaStateError,
    SelfApprovalError,
)
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal, sha256_hex

__all__ = ["ApprovalHook", "ApprovalLifecycle", "Clock"]


Clock = Callable[[], datetime.datetime]
"""Returns the current time, timezone-aware."""


class WrappedTool(Protocol):
    """What `declare` reads of a tool `Sagacity.wrap` made."""

    name: str
    func: Callable[..., Any]


class LeaseHolder(Protocol):
    """Fences a history's appends by a saga lease (`sagacity._leasing.LeaseKeeper`)."""

    def hold(self, history: SagaHistory) -> SagaHistory:
        """Make `history`'s appends fenced by the lease."""
        ...


_DECISION_RETRIES = 8
"""How often a decision re-reads the saga after another writer appended first."""


class ApprovalLifecycle:
    """Asks for, records, checks and consumes approvals of IRREVERSIBLE calls.

    Args:
        journal: Where AWAITING_APPROVAL, APPROVED, REJECTED and REFUSED are journaled.
        store: Where pending requests are kept between asking and running.
        ttl: How long a request stays usable; None for no expiry.
        clock: The current time, timezone-aware.
        policy: How approvals are signed, and which signatures count.
        on_request: Called with each new request once it is journaled and stored; an
            exception it raises is logged, never raised.
    """

    def __init__(
        self,
        journal: SideEffectJournal,
        store: ApprovalStore,
        *,
        ttl: datetime.timedelta | None,
        clock: Clock,
        policy: ApprovalPolicy | None = None,
        on_request: ApprovalHook | None = None,
    ) -> None:
        self.journal = journal
        self.store = store
        self.ttl = ttl
        self.now = clock
        self.policy = policy or ApprovalPolicy()
        self.on_request = on_request
        self.declared_approvers: dict[str, int] = {}
        """How many approvers each wrapped tool declared, by name: a copy of a tool that
        an adapter makes asks for as many as the tool itself."""

    def declare(self, tools: Iterable[WrappedTool]) -> None:
        """Remember how many approvers each wrapped tool declares (`compensable(approvers=)`)."""
        for tool in tools:
            declared = declaration_of(tool.func)
            self.declared_approvers[tool.name] = declared.approvers if declared else 1

    # -- ask ----------------------------------------------------------------------------

    def ask(
        self,
        history: SagaHistory,
        *,
        tool_name: str,
        call_id: str,
        input: dict[str, JsonValue],
        reason: str,
        started_by: str | None = None,
        approvers: int = 1,
        replaces: ApprovalRequest | None = None,
        edited_by: str | None = None,
        request_id: str | None = None,
        expected_seq: int | None = None,
    ) -> ApprovalRequest:
        """Journal AWAITING_APPROVAL and store the request; `replaces` an expired or edited one.

        The payload records who started the saga and how many approvers the call needs:
        the check reads both from here, never from the store. `on_request` is told last.
        """
        now = self.now()
        expires_at = None if self.ttl is None else now + self.ttl
        request_id = request_id or uuid.uuid4().hex
        approvers = max(approvers, self.declared_approvers.get(tool_name, 1))
        digest = sha256_hex(input)
        payload: dict[str, JsonValue] = {
            "request_id": request_id,
            "input": input,
            "input_sha256": digest,
            "reason": reason,
            "expires_at": None if expires_at is None else expires_at.isoformat(),
        }
        # The defaults are left out, so an entry reads as it did before the policy existed:
        # absent, `started_by` is nobody named and `approvers_required` is 1.
        if started_by is not None:
            payload["started_by"] = started_by
        if approvers != 1:
            payload["approvers_required"] = approvers
        if replaces is not None:
            payload["replaces"] = replaces.request_id
        if edited_by is not None:
            payload["edited_by"] = edited_by
        entry = history.append(
            self.journal,
            Phase.AWAITING_APPROVAL,
            tool_name=tool_name,
            call_id=call_id,
            payload=payload,
            expected_seq=expected_seq,
        )
        request = ApprovalRequest(
            request_id=request_id,
            saga_id=history.saga_id,
            seq=entry.seq,
            call_id=call_id,
            tool_name=tool_name,
            input=input,
            input_sha256=digest,
            reason=reason,
            requested_at=now,
            expires_at=expires_at,
            started_by=started_by,
            approvers_required=approvers,
            edited_by=edited_by,
        )
        self.store.save(request)
        _telemetry.approval_event(
            request.saga_id,
            "approval.request",
            request_id=request.request_id,
            tool=request.tool_name,
        )
        if replaces is not None:
            self._close(replaces, "replaced")
        notify(self.on_request, request)
        return request

    # -- check (on the hot path, under the saga scope's lock) ---------------------------

    def asked(
        self, history: SagaHistory, *, call_id: str, tool_name: str
    ) -> ApprovalRequest | None:
        """Return the verified request call `call_id` answers; None if it was never asked.

        Raises:
            ApprovalToolMismatchError: The call id was asked for another tool (journaled
                as REFUSED).
            ApprovalRejectedError: It was rejected.
            ApprovalAlreadyUsedError: The call ran after it was asked.
            ApprovalNotFoundError: The request is no longer stored.
        """
        awaiting = history.asked.get(call_id)
        if awaiting is None:
            return None
        request_id = str(payload_of(awaiting).get("request_id"))
        if awaiting.tool_name != tool_name:
            refusal = ApprovalToolMismatchError(
                f"saga {history.saga_id!r}: call id {call_id!r} was asked for tool "
                f"{awaiting.tool_name!r} (request {request_id}, seq {awaiting.seq}); tool "
                f"{tool_name!r} is not run under it. Give every call its own id"
            )
            self._refused(history, awaiting, tool_name, "tool_mismatch", refusal)
            raise refusal
        stored = self.store.get(request_id)
        if stored is None:
            # Consumed since the journal was read, by a worker whose INTENT is there now.
            history.reload(self.journal)
            check_unused(journaled_request(history.saga_id, awaiting), history)
            raise ApprovalNotFoundError(
                f"saga {history.saga_id!r}: approval request {request_id} for call "
                f"{call_id!r} is no longer stored; the call is not run"
            )
        return self.verified(stored, history)

    def check(self, history: SagaHistory, request: ApprovalRequest, *, input_sha256: str) -> None:
        """Refuse unless the verified `request` may run now with this input.

        An input that hashes otherwise is journaled as REFUSED before the refusal is
        raised; an expired request is asked again, so the saga can still be approved.
        """
        try:
            check_approved(
                request, history, input_sha256=input_sha256, now=self.now(), policy=self.policy
            )
        except ApprovalHashMismatchError as refusal:
            awaiting = history.entry(request.seq)
            assert awaiting is not None  # the request was verified against it
            self._refused(
                history, awaiting, request.tool_name, "input_mismatch", refusal, input_sha256
            )
            raise
        except ApprovalExpiredError as expired:
            renewed = self.ask(
                history,
                tool_name=request.tool_name,
                call_id=request.call_id,
                input=request.input,
                reason=request.reason,
                started_by=request.started_by,
                approvers=request.approvers_required,
                replaces=request,
                edited_by=request.edited_by,
            )
            raise ApprovalExpiredError(
                f"{expired}; request {renewed.request_id} now asks for the same call: approve "
                "it, then resume the saga"
            ) from None

    def consume(self, request: ApprovalRequest) -> None:
        """Delete a used request: an approval runs its call once."""
        self._close(request, "consumed")

    def _close(self, request: ApprovalRequest, how: str) -> None:
        """Delete a request that nothing may approve any more, and say so (telemetry)."""
        self.store.delete(request.request_id)
        _telemetry.approval_closed(request, how)

    def _refused(
        self,
        history: SagaHistory,
        awaiting: JournalEntry,
        tool_name: str,
        reason: str,
        refusal: ApprovalError,
        input_sha256: str | None = None,
    ) -> None:
        """Journal REFUSED: the attempt leaves evidence in the chain, not only an exception."""
        history.append(
            self.journal,
            Phase.REFUSED,
            tool_name=tool_name,
            call_id=awaiting.call_id,
            ref_seq=awaiting.seq,
            payload={
                "reason": reason,
                "request_id": payload_of(awaiting).get("request_id"),
                "input_sha256": input_sha256,
                "error": str(refusal),
            },
        )
        _telemetry.approval_refused(history.saga_id, tool_name, reason, refusal)

    # -- decide -------------------------------------------------------------------------

    def approve(
        self,
        saga_id: str,
        *,
        approver: str,
        request_id: str | None,
        expected_sha256: str | None,
    ) -> JournalEntry:
        """Journal APPROVED for a pending request, after every check (see `Sagacity.approve`).

        Refused, with nothing journaled, for the saga's starter or the input's editor
        (`SelfApprovalError`), for an approver whose approval counts already, and once the
        request has all the approvals it needs (`ApprovalAlreadyGivenError`). Each refusal
        is logged as a WARNING naming the saga, the approver and why: it leaves no entry.
        """
        try:
            return self._approve(
                saga_id, approver=approver, request_id=request_id, expected_sha256=expected_sha256
            )
        except (ApprovalError, SagaStateError, ConfigurationError) as refusal:
            _approval_refused(saga_id, approver, refusal)
            raise

    def _approve(
        self,
        saga_id: str,
        *,
        approver: str,
        request_id: str | None,
        expected_sha256: str | None,
    ) -> JournalEntry:
        for _ in range(_DECISION_RETRIES):
            history = self.history(saga_id)
            request = self._pending(history, request_id)
            refuse_ended(history)
            check_unused(request, history)
            check_current(request, history)
            refuse_self_approval(request, approver)
            counted = request.approvals
            me = principal_key(approver)
            mine = next((a for a in counted if principal_key(a.approver) == me), None)
            if mine is not None:
                raise ApprovalAlreadyGivenError(
                    f"saga {saga_id!r}: request {request.request_id} for tool "
                    f"{request.tool_name!r} was approved by {approver!r} at {mine.approved_at} "
                    f"(seq {mine.seq}); an approver approves a request once"
                )
            if len(counted) >= request.approvers_required:
                first = counted[0]
                raise ApprovalAlreadyGivenError(
                    f"saga {saga_id!r}: request {request.request_id} for tool "
                    f"{request.tool_name!r} was approved by {first.approver!r} at "
                    f"{first.approved_at} (seq {first.seq})"
                    + (
                        f" and {len(counted) - 1} more, {len(counted)} of "
                        f"{request.approvers_required} needed"
                        if len(counted) > 1
                        else ""
                    )
                    + "; a request is approved once"
                )
            if request.expired(self.now()):
                raise ApprovalExpiredError(
                    f"saga {saga_id!r}: request {request.request_id} expired at "
                    f"{request.expires_at}; resume the saga to ask again, or reject it"
                )
            if expected_sha256 is not None and expected_sha256 != request.input_sha256:
                raise ApprovalHashMismatchError(
                    f"saga {saga_id!r}: the approver was shown sha256 {expected_sha256[:12]}…, "
                    f"but request {request.request_id} is for {request.input_sha256[:12]}…; "
                    "show the approver the current input"
                )
            payload: dict[str, JsonValue] = {
                "request_id": request.request_id,
                "approver": approver,
                "input_sha256": request.input_sha256,
                **self.policy.signature(saga_id, request, approver),
            }
            try:
                entry = history.append(
                    self.journal,
                    Phase.APPROVED,
                    tool_name=request.tool_name,
                    call_id=request.call_id,
                    ref_seq=request.seq,
                    payload=payload,
                    expected_seq=history.last_seq,
                )
            except AppendConflictError:
                continue  # another writer appended: decide again on what it wrote
            _telemetry.approval_event(
                saga_id, "approval.approve", request_id=request.request_id, tool=request.tool_name
            )
            return entry
        raise _lost_races(saga_id, "approval")

    def reject(
        self,
        saga_id: str,
        *,
        approver: str,
        reason: str,
        request_id: str | None,
        keeper: LeaseHolder | None = None,
    ) -> SagaHistory:
        """Journal REJECTED and consume the request; return the saga's history after it.

        A request whose stored copy was changed can still be rejected: the rejection
        names the journal's AWAITING_APPROVAL entry.

        Raises:
            ApprovalAlreadyUsedError: The approved call started running.
        """
        for _ in range(_DECISION_RETRIES):
            history = self.history(saga_id)
            if keeper is not None:
                keeper.hold(history)
            stored = self._stored(saga_id, request_id)
            refuse_ended(history)
            awaiting = history.awaiting.get(stored.request_id)
            if awaiting is None:
                raise ApprovalNotFoundError(
                    f"saga {saga_id!r}: request {stored.request_id} has no AWAITING_APPROVAL "
                    "entry in the journal; there is nothing to reject"
                )
            request = journaled_request(saga_id, awaiting)
            check_unused(request, history)
            try:
                self._append_rejection(history, request, approver=approver, reason=reason)
            except AppendConflictError:
                continue
            self._close(stored, "rejected")
            _telemetry.approval_event(
                saga_id, "approval.reject", request_id=request.request_id, tool=request.tool_name
            )
            return history
        raise _lost_races(saga_id, "rejection")

    def decline(
        self, history: SagaHistory, request: ApprovalRequest, *, source: str, reason: str
    ) -> JournalEntry:
        """Journal a framework's own rejection of a call inside a run, and consume it.

        The call is not run, whatever sagacity holds; the saga goes on (the framework
        tells its model). `source` names where the "no" came from.
        """
        check_unused(request, history)
        entry = self._append_rejection(
            history, request, approver=None, source=source, reason=reason, guarded=False
        )
        self._close(request, "declined")
        return entry

    def _append_rejection(
        self,
        history: SagaHistory,
        request: ApprovalRequest,
        *,
        approver: str | None,
        reason: str,
        source: str | None = None,
        guarded: bool = True,
    ) -> JournalEntry:
        # Guarded, a rejection is appended only if the journal is as it was read: a worker
        # that journals the approved call's INTENT first wins, and the rejection is refused.
        return history.append(
            self.journal,
            Phase.REJECTED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload={"request_id": request.request_id, "approver": approver, "reason": reason}
            if source is None
            else {
                "request_id": request.request_id,
                "approver": approver,
                "source": source,
                "reason": reason,
            },
            expected_seq=history.last_seq if guarded else None,
        )

    # -- show and find ------------------------------------------------------------------

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
        return verified

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


def refuse_ended(history: SagaHistory) -> None:
    """A saga that ended has no requests left to decide (a stale stored one included)."""
    if history.ended is not None:
        raise SagaStateError(
            f"saga {history.saga_id!r} ended {history.outcome} at seq {history.ended.seq}; "
            "its requests can no longer be decided"
        )


def checked_clock(clock: Clock) -> Clock:
    """Refuse a clock whose times cannot be compared with the stores' aware ones."""
    probe = clock()
    if not isinstance(probe, datetime.datetime) or probe.utcoffset() is None:
        raise ConfigurationError(
            f"clock returned {probe!r}; it must return a timezone-aware datetime, such as "
            "datetime.datetime.now(datetime.UTC)"
        )
    return clock


def explain_unusable(history: SagaHistory, request_id: str | None) -> None:
    """Raise why the newest (or the named) request of a saga can no longer run, if known."""
    for awaiting in sorted(history.awaiting.values(), key=lambda e: e.seq, reverse=True):
        if request_id not in (None, payload_of(awaiting).get("request_id")):
            continue
        check_unused(journaled_request(history.saga_id, awaiting), history)
        if request_id is None:
            return  # only the newest request says why the saga cannot resume


_REFUSAL_REASONS: dict[type[Exception], str] = {
    ApprovalNotFoundError: "request_not_found",
    ApprovalMissingError: "request_changed",
    ApprovalHashMismatchError: "hash_mismatch",
    SelfApprovalError: "self_approval",
    ApprovalAlreadyGivenError: "already_approved",
    ApprovalAlreadyUsedError: "already_used",
    ApprovalRejectedError: "rejected",
    ApprovalExpiredError: "expired",
    SagaStateError: "saga_ended",
    ConfigurationError: "cannot_sign",
    ApprovalError: "refused",
}
"""The `reason` a refused approval is logged with, by the refusal's class (or its base)."""


def _approval_refused(saga_id: str, approver: str, refusal: Exception) -> None:
    """Log a refused `approve` at WARNING: nothing is journaled, so the log is its trace."""
    reason = next(
        (_REFUSAL_REASONS[c] for c in type(refusal).__mro__ if c in _REFUSAL_REASONS), "refused"
    )
    _telemetry.logger.warning(
        "saga %r: approval by %r refused (%s): %s", saga_id, approver, reason, refusal
    )


def _lost_races(saga_id: str, what: str) -> JournalError:
    return JournalError(
        f"saga {saga_id!r}: the {what} lost {_DECISION_RETRIES} races with other writers of "
        "the saga and was not recorded; decide again"
    )


def _answered(stored: ApprovalRequest, history: SagaHistory) -> bool:
    """Whether the journal answered the stored request: its call ran after it, or it was rejected.

    A worker killed between the call's outcome and the store's delete leaves such a copy
    behind; it must not keep the saga waiting for a decision already made.
    """
    awaiting = history.awaiting.get(stored.request_id)
    return awaiting is not None and awaiting not in history.open_requests()
