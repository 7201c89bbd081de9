"""The approval lifecycle in one place: ask, decide, check, consume, and show.

An IRREVERSIBLE call is *asked* (an AWAITING_APPROVAL entry in the journal, and a
request in the store); a human *decides* (APPROVED or REJECTED, journaled: `_decide.py`);
when the call runs it is *checked* against the journal (`_check.py` holds every refusal)
and its request is *consumed*. A framework's own "no" inside a run is a rejection too
(`decline`). What is shown to an approver is read from the journal, never from the
editable store alone (`_pending.py`); which call a resume without work runs is answered
by `resumable` (`_resume.py`).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sagacity import _telemetry
from sagacity._chain_kind import refuse_grant_chain
from sagacity._decisions import current_resumer
from sagacity._history import SagaHistory, payload_of
from sagacity.annotations import declaration_of
from sagacity.approval._check import (
    check_approved,
    check_unused,
    explain_unusable,
    journaled_request,
)
from sagacity.approval._decide import RequestDecisions
from sagacity.approval._escalating import RequestEscalation
from sagacity.approval._escalation import ApproverGroup, ToolEscalation, tool_escalation
from sagacity.approval._policy import ApprovalHook, ApprovalPolicy, notify
from sagacity.approval._provenance import initiator
from sagacity.approval._request import ApprovalRequest, ApprovalStore
from sagacity.approval._resume import ResumableCall, refuse_ended_resume
from sagacity.approval._rules import ApprovalRule, approval_rule
from sagacity.errors import (
    ApprovalError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalNotFoundError,
    ApprovalToolMismatchError,
    ConfigurationError,
)
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal, sha256_hex

# `explain_unusable` is re-exported: the hot path and the scope ask it why a request
# cannot run.
__all__ = ["ApprovalHook", "ApprovalLifecycle", "ApproverGroup", "Clock", "explain_unusable"]


Clock = Callable[[], datetime.datetime]
"""Returns the current time, timezone-aware."""


class WrappedTool(Protocol):
    """What `declare` reads of a tool `Sagacity.wrap` made."""

    name: str
    func: Callable[..., Any]


class ApprovalLifecycle(RequestDecisions, RequestEscalation):
    """Asks for, records, checks and consumes approvals of IRREVERSIBLE calls.

    Args:
        journal: Where AWAITING_APPROVAL, APPROVED, REJECTED and REFUSED are journaled.
        store: Where pending requests are kept between asking and running.
        ttl: How long a request stays usable; None for no expiry.
        clock: The current time, timezone-aware.
        policy: How approvals are signed, and which signatures count.
        on_request: Called with each new request once it is journaled and stored; an
            exception it raises is logged, never raised.
        on_reminder: Called with a request when its reminder is journaled (REMINDED);
            an exception it raises is logged, never raised.
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
        on_reminder: ApprovalHook | None = None,
    ) -> None:
        self.journal = journal
        self.store = store
        self.ttl = ttl
        self.now = clock
        self.policy = policy or ApprovalPolicy()
        self.on_request = on_request
        self.on_reminder = on_reminder
        self.escalations: dict[str, ToolEscalation] = {}
        """When each wrapped tool's requests are reminded and where they escalate, by name."""
        self.declared_approvers: dict[str, int] = {}
        """How many approvers each wrapped tool declared, by name: a copy of a tool that
        an adapter makes asks for as many as the tool itself."""
        self.justification_required: set[str] = set()
        """The wrapped tools whose approvals must each give a justification, by name."""
        self.rules: dict[str, ApprovalRule] = {}
        """When each wrapped tool's calls need a human (`compensable(approval=)`), by
        name: a copy of a tool that an adapter makes is decided by the same rule."""

    def declare(self, tools: Iterable[WrappedTool]) -> None:
        """Remember how many approvers each wrapped tool declares (`compensable(approvers=)`).

        Raises:
            ConfigurationError: A tool's `remind_before` or `escalate_to` cannot apply
                here (no `approval_ttl`, a reminder not before expiry, an unknown group).
        """
        tools = list(tools)
        escalations = {}
        for tool in tools:  # all are checked before any is remembered
            declared = declaration_of(tool.func)
            if declared is not None:
                escalations[tool.name] = tool_escalation(
                    tool.name,
                    declared.remind_before,
                    declared.escalate_to,
                    ttl=self.ttl,
                    groups=self.policy.groups,
                    approvers=declared.approvers,
                )
        for name, escalation in escalations.items():
            if escalation is None:
                self.escalations.pop(name, None)
            else:
                self.escalations[name] = escalation
        for tool in tools:
            declared = declaration_of(tool.func)
            self.declared_approvers[tool.name] = declared.approvers if declared else 1
            rule = None
            if declared is not None:  # checked by wrap() already: this cannot raise there
                where = f"tool {tool.name!r}"
                rule = approval_rule(
                    declared.approval, tool.func, declared.reversibility, tool.name, where
                )
            if declared is not None and declared.justification_required:
                self.justification_required.add(tool.name)
            else:
                self.justification_required.discard(tool.name)
            if rule is None:
                self.rules.pop(tool.name, None)
            else:
                self.rules[tool.name] = rule

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
        rule: dict[str, JsonValue] | None = None,
    ) -> ApprovalRequest:
        """Journal AWAITING_APPROVAL and store the request; `replaces` an expired or edited one.

        The payload records who started the saga and how many approvers the call needs:
        the check reads both from here, never from the store. `on_request` is told last.
        """
        now = self.now()
        escalation = self.escalations.get(tool_name)
        ttl = self.ttl if escalation is None or escalation.ttl is None else escalation.ttl
        expires_at = None if ttl is None else now + ttl
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
        resumer = current_resumer() or _resumer_of(history, replaces)
        if resumer is not None:  # who continues the paused run (sagacity.worker)
            payload["resumer"] = resumer
        initiated = payload["initiated_by"] = initiator(resumer, started_by)
        required = tool_name in self.justification_required
        if required:
            payload["justification_required"] = True
        if edited_by is not None:
            payload["edited_by"] = edited_by
        if rule is not None:  # why the call asks: its tool's rule said so, or failed
            payload["approval_rule"] = rule
        remind_at = None if escalation is None else escalation.remind_at(expires_at)
        if remind_at is not None:  # left out when none, as the other defaults
            payload["remind_at"] = remind_at.isoformat()
        escalate_to = None
        if escalation is not None and escalation.escalate_to is not None and expires_at:
            escalate_to = payload["escalate_to"] = escalation.escalate_to.name
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
            initiated_by=initiated,
            justification_required=required,
            remind_at=remind_at,
            escalate_to=escalate_to,
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

    # -- resume -------------------------------------------------------------------------

    def resumable(self, saga_id: str, request_id: str | None) -> ResumableCall:
        """Which approved call a resume without work may run now, and with what input.

        Read from the journal: a saga that ended is refused with the reason it gives
        (`refuse_ended_resume`); otherwise the answer is the pending request named, or the
        saga's only one, verified against its AWAITING_APPROVAL entry. Its approvals and
        hash are checked when the call runs, by the hot path, as for any call.

        Raises:
            ApprovalNotFoundError: No such request is pending, or several are and none
                was named.
            ApprovalRejectedError: The request was rejected.
            ApprovalAlreadyUsedError: Its approved call ran already.
            ApprovalError: The stored request disagrees with the journal.
            SagaStateError: The saga ended otherwise, or it is a standing grant's chain.
        """
        history = self.history(saga_id)
        refuse_grant_chain(saga_id, history.entries)  # no request: say what it is instead
        refuse_ended_resume(history, request_id)
        return ResumableCall(request=self.pending_in(history, request_id))


def _resumer_of(history: SagaHistory, replaced: ApprovalRequest | None) -> str | None:
    """The resumer name journaled with the request `replaced` (an edit keeps it)."""
    if replaced is None or replaced.request_id not in history.awaiting:
        return None
    name = payload_of(history.awaiting[replaced.request_id]).get("resumer")
    return name if isinstance(name, str) else None


def checked_clock(clock: Clock) -> Clock:
    """Refuse a clock whose times cannot be compared with the stores' aware ones."""
    probe = clock()
    if not isinstance(probe, datetime.datetime) or probe.utcoffset() is None:
        raise ConfigurationError(
            f"clock returned {probe!r}; it must return a timezone-aware datetime, such as "
            "datetime.datetime.now(datetime.UTC)"
        )
    return clock
