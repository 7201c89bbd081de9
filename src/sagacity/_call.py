"""One tool call on the hot path: decide, journal INTENT, then EXECUTED or FAILED."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sagacity._classify import FailureKind
from sagacity._history import CallState, payload_of
from sagacity._scope import SagaScope
from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.approval._check import check_approved
from sagacity.errors import (
    AppendConflictError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    InDoubtError,
    JournalError,
    ReplayMismatchError,
    SagaStateError,
    SerializationError,
)
from sagacity.journal import JournalEntry, JsonValue, Phase, sha256_hex, to_json

if TYPE_CHECKING:
    from sagacity.tools import SagaTool

__all__ = ["PAUSE", "REPLAY", "RUN", "Call"]

_CONFLICT_RETRIES = 8
"""How often an approved call re-checks after another writer appended to its saga first."""

REPLAY = object()
PAUSE = object()
RUN = object()

# On Python 3.11 `Phase.INTENT` goes through EnumType.__getattr__ (0.07 µs): the hot path
# uses these.
_INTENT, _EXECUTED, _IRREVERSIBLE = Phase.INTENT, Phase.EXECUTED, Reversibility.IRREVERSIBLE


class Call:
    """One call on the hot path: decide, journal INTENT, then EXECUTED or FAILED."""

    __slots__ = ("call_id", "input", "intent", "request", "scope", "tool")

    def __init__(
        self,
        tool: SagaTool,
        scope: SagaScope,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        call_id: str | None,
        *,
        peek: bool = False,
    ) -> None:
        self.tool = tool
        self.scope = scope
        self.input = tool.input_of(args, kwargs)  # SerializationError before anything runs
        if call_id:
            self.call_id = call_id
        elif peek:
            self.call_id = scope.peek_call_id(tool.name)
        else:
            self.call_id = scope.next_call_id(tool.name)
        self.intent: JournalEntry | None = None
        self.request: ApprovalRequest | None = None

    def begin(self) -> tuple[object, Any]:
        """Return (REPLAY, result), (PAUSE, request) or (RUN, None) after INTENT."""
        scope, tool = self.scope, self.tool
        with scope.lock:
            self._refuse_if_closed("the call is not run")
            prior = scope.history.latest_call.get(self.call_id)
            if prior is not None:
                try:
                    replayed = self._replay(prior)
                except (InDoubtError, ReplayMismatchError) as refusal:
                    scope.refusal = refusal  # nothing ran: the saga stays open, not failed
                    raise
                if replayed is not None:
                    return replayed
            payload: dict[str, JsonValue] = {
                "input": self.input,
                "reversibility": tool.reversibility._value_,  # not .value: a Python property
            }
            if tool.reversibility is _IRREVERSIBLE:
                if scope.failed:
                    raise SagaStateError(
                        f"saga {scope.saga_id!r}: a call has failed, so the saga will be "
                        f"compensated; IRREVERSIBLE tool {tool.name!r} is not run. Run it in a "
                        "new saga if it is still wanted"
                    )
                return self._begin_approved(payload)
            self.intent = scope.append(
                _INTENT, tool_name=tool.name, call_id=self.call_id, payload=payload
            )
        return RUN, None

    def _refuse_if_closed(self, consequence: str) -> None:
        if self.scope.closed:
            raise SagaStateError(
                f"saga {self.scope.saga_id!r}: its work returned before tool "
                f"{self.tool.name!r} was called, so {consequence}. Consume a streamed run "
                "inside the work"
            )

    def _begin_approved(self, payload: dict[str, JsonValue]) -> tuple[object, Any]:
        """Check the approval and journal INTENT as one step against other workers.

        Workers resuming the same saga at once each see the approval unused. The INTENT is
        appended only if the journal is still as the check read it; if another worker
        appended first, the check runs again on what it wrote, so the approved call runs
        once.
        """
        scope = self.scope
        for _ in range(_CONFLICT_RETRIES):
            try:
                self.request = self._approved_request()  # re-reads the journal
            except ApprovalError as refusal:
                scope.refusal = refusal
                raise
            if self.request is None:
                return PAUSE, self._request_approval()
            payload["request_id"] = self.request.request_id
            try:
                self.intent = scope.append(
                    Phase.INTENT,
                    tool_name=self.tool.name,
                    call_id=self.call_id,
                    payload=payload,
                    expected_seq=scope.history.last_seq,
                )
            except AppendConflictError:
                continue
            return RUN, None
        raise JournalError(
            f"saga {scope.saga_id!r}: the INTENT of approved call {self.call_id!r} lost "
            f"{_CONFLICT_RETRIES} races with other writers of the saga; it was not run, resume "
            "again"
        )

    def _replay(self, prior: CallState) -> tuple[object, Any] | None:
        saga, name = self.scope.saga_id, self.tool.name
        if prior.intent.tool_name != name:
            raise ReplayMismatchError(
                f"saga {saga!r}: call id {self.call_id!r} was used by tool "
                f"{prior.intent.tool_name!r} at seq {prior.intent.seq}; tool {name!r} is not "
                "run under it. Give every call its own id"
            )
        if prior.executed:
            before = payload_of(prior.intent).get("input")
            if sha256_hex(before) != sha256_hex(self.input):
                raise ReplayMismatchError(
                    f"saga {saga!r}: call {self.call_id!r} of tool {name!r} already ran at seq "
                    f"{prior.intent.seq} with other input; it is not run again. Call it under "
                    "a new call id, or undo the saga with Sagacity.compensate"
                )
            assert prior.outcome is not None
            return REPLAY, payload_of(prior.outcome).get("result")
        if prior.in_doubt:
            raise InDoubtError(
                f"saga {saga!r}: call {self.call_id!r} of tool {name!r} has an INTENT at seq "
                f"{prior.intent.seq} with no known outcome; it may have run. Resolve it with "
                "Sagacity.resolve before running it again"
            )
        return None  # it failed with a known outcome: running it again is a retry

    def _asked(self) -> tuple[JournalEntry, ApprovalRequest] | None:
        """The AWAITING_APPROVAL entry and stored request of this call, if it was asked.

        Raises:
            ApprovalRejectedError: It was asked and rejected.
            ApprovalNotFoundError: It was asked, but the request is no longer stored.
        """
        scope = self.scope
        scope.refresh()  # the approval may have been recorded by another process
        asked = [e for e in scope.history.awaiting.values() if e.call_id == self.call_id]
        if not asked:
            return None
        awaiting = asked[-1]
        request_id = str(payload_of(awaiting).get("request_id"))
        request = scope.owner.approvals.get(request_id)
        if request is None:
            rejected = scope.history.rejected(awaiting.seq)
            if rejected is not None:
                raise ApprovalRejectedError(
                    f"saga {scope.saga_id!r}: request {request_id} for tool {self.tool.name!r} "
                    f"was rejected: {payload_of(rejected).get('reason')}"
                )
            raise ApprovalNotFoundError(
                f"saga {scope.saga_id!r}: approval request {request_id} for call "
                f"{self.call_id!r} is no longer stored; the call is not run"
            )
        return awaiting, request

    def _approved_request(self) -> ApprovalRequest | None:
        """The request this call answers, checked; None when it has not been asked yet.

        Raises:
            ApprovalExpiredError: The request expired; a new one was made in its place,
                so that the saga can still be approved properly.
        """
        asked = self._asked()
        if asked is None:
            return None
        _, request = asked
        try:
            self._check(request)
        except ApprovalExpiredError as expired:
            renewed = self._request_approval(replaces=request)
            raise ApprovalExpiredError(
                f"{expired}; request {renewed.request_id} now asks for the same call: approve "
                "it, then resume the saga"
            ) from None
        return request

    def _check(self, request: ApprovalRequest) -> None:
        check_approved(
            request,
            self.scope.history,
            input_sha256=sha256_hex(self.input),
            now=self.scope.owner.now(),
        )

    def pending_request(self) -> ApprovalRequest | None:
        """Return the request this call must wait on, asking for one if there is none.

        None means the call may run now: it is not IRREVERSIBLE, it ran before (and
        will be replayed), or its approval passes every check.
        """
        if self.tool.reversibility is not Reversibility.IRREVERSIBLE:
            return None
        with self.scope.lock:
            self._refuse_if_closed("no approval is asked")  # it would journal after the end
            prior = self.scope.history.latest_call.get(self.call_id)
            if prior is not None and prior.executed:
                return None
            try:
                asked = self._asked()
                if asked is None:
                    return self._request_approval()
                _, request = asked
                self._check(request)
            except ApprovalMissingError:
                return request  # asked and not yet approved: still waiting
            except ApprovalExpiredError:
                return self._request_approval(replaces=request)  # expired: ask again
            except ApprovalError as refusal:
                self.scope.refusal = refusal
                raise
            return None

    def _request_approval(self, *, replaces: ApprovalRequest | None = None) -> ApprovalRequest:
        """Journal AWAITING_APPROVAL and store the request; `replaces` an expired one."""
        scope, tool, owner = self.scope, self.tool, self.scope.owner
        now = owner.now()
        ttl = owner.approval_ttl
        expires_at = None if ttl is None else now + ttl
        request_id = uuid.uuid4().hex
        digest = sha256_hex(self.input)
        reason = (
            f"{tool.name} is IRREVERSIBLE: {tool.description.strip().splitlines()[0]}"
            if (tool.description.strip())
            else f"{tool.name} is IRREVERSIBLE"
        )
        payload: dict[str, JsonValue] = {
            "request_id": request_id,
            "input": self.input,
            "input_sha256": digest,
            "reason": reason,
            "expires_at": None if expires_at is None else expires_at.isoformat(),
        }
        if replaces is not None:
            payload["replaces"] = replaces.request_id
        entry = scope.append(
            Phase.AWAITING_APPROVAL, tool_name=tool.name, call_id=self.call_id, payload=payload
        )
        request = ApprovalRequest(
            request_id=request_id,
            saga_id=scope.saga_id,
            seq=entry.seq,
            call_id=self.call_id,
            tool_name=tool.name,
            input=self.input,
            input_sha256=digest,
            reason=reason,
            requested_at=now,
            expires_at=expires_at,
        )
        owner.approvals.save(request)
        if replaces is not None:
            owner.approvals.delete(replaces.request_id)
        scope.awaiting.append(request)
        return request

    def executed(self, result: Any) -> None:
        """Journal EXECUTED; an approved call consumes its request."""
        try:
            payload: JsonValue = {"result": to_json(result, where=self.tool.result_where)}
        except SerializationError as error:
            # The effect has happened: record it, even if its result has no JSON form.
            payload = {"result": None, "unserializable_result": f"{error}: {result!r:.500}"}
        assert self.intent is not None
        try:
            self.scope.append(
                _EXECUTED,
                tool_name=self.tool.name,
                call_id=self.call_id,
                ref_seq=self.intent.seq,
                payload=payload,
            )
        except BaseException:
            # The INTENT stays in doubt: the saga must not end COMPLETED if the work
            # swallows the error.
            self.scope.failed = True
            raise
        self.scope.suspended.discard(self.call_id)  # ran again after a pause: not paused now
        self._consume_request()

    def failed(self, error: BaseException) -> None:
        """Journal FAILED with the error's kind; mark the saga failed when the kind says so."""
        kind = self.scope.owner.classify(error)
        if kind in (FailureKind.FAILURE, FailureKind.OUTCOME_UNKNOWN):
            self.scope.failed = True
        if kind is FailureKind.CONTROL_FLOW:
            self.scope.suspended.add(self.call_id)  # the framework paused mid-call
        else:
            self.scope.suspended.discard(self.call_id)
        assert self.intent is not None
        try:
            self.scope.append(
                Phase.FAILED,
                tool_name=self.tool.name,
                call_id=self.call_id,
                ref_seq=self.intent.seq,
                payload={
                    "kind": kind.value,
                    "error": {"type": type(error).__qualname__, "message": str(error)},
                },
            )
        except JournalError as journal_error:
            raise journal_error from error
        self._consume_request()  # the approval was used: a retry must be approved again

    def _consume_request(self) -> None:
        if self.request is not None:
            self.scope.owner.approvals.delete(self.request.request_id)
