"""One tool call on the hot path: decide, journal INTENT, then EXECUTED or FAILED.

The outcome, the retries and their journaling are `CallOutcome`'s (`_call_outcome`).
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from sagacity._call_outcome import CallOutcome, JournaledTool
from sagacity._history import CONTROL_FLOW, CallState, payload_of
from sagacity._ids import require_id
from sagacity._offloop import FinishedThenCancelled
from sagacity._scope import SagaScope
from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.approval._grants import grants_of
from sagacity.approval._lifecycle import explain_unusable
from sagacity.approval._resume import replay_refusal
from sagacity.errors import (
    AppendConflictError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalMissingError,
    InDoubtError,
    InvalidIdError,
    JournalError,
    ReplayMismatchError,
    SagacityError,
    SagaStateError,
    SerializationError,
)
from sagacity.journal import JournalEntry, JsonValue, Phase, sha256_hex
from sagacity.journal._canonical import copy_json
from sagacity.journal._group import AppendWithdrawn, CommittedThenCancelled

__all__ = ["PAUSE", "REPLAY", "RUN", "Call", "read_under_lease"]

_CONFLICT_RETRIES = 8
"""How often an approved call re-checks after another writer appended to its saga first."""

REPLAY = object()
PAUSE = object()
RUN = object()

# On Python 3.11 `Phase.INTENT` goes through EnumType.__getattr__ (0.07 µs): the hot path
# uses these.
_INTENT, _IRREVERSIBLE = Phase.INTENT, Reversibility.IRREVERSIBLE


class Call(CallOutcome):
    """One call on the hot path: decide, journal INTENT, then EXECUTED or FAILED."""

    __slots__ = ("refused", "rule")  # and `CallOutcome`'s: one object per call

    def __init__(
        self,
        tool: JournaledTool,
        scope: SagaScope,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        call_id: str | None,
        *,
        peek: bool = False,
        deferred: bool = False,
    ) -> None:
        """Take the call's id and convert its input; an invalid one is refused.

        Refused, the call raises, after journaling REFUSED; `deferred`, it leaves both to
        `refused` instead, for async code to run off the loop.
        """
        self.tool = tool
        self.scope = scope
        self.span = None
        self.attempt = 1
        self.intent: JournalEntry | None = None
        self.request: ApprovalRequest | None = None
        self.refused: Callable[[], None] | None = None
        """Set when the call was refused: journals REFUSED and raises the refusal."""
        self.rule: dict[str, JsonValue] | None = None
        """Why the tool's approval rule asks a human, journaled with the request."""
        if call_id is not None:
            try:
                self.call_id = require_id(
                    call_id, f"saga {scope.saga_id!r}: tool {tool.name!r} call id"
                )
            except InvalidIdError as error:
                self._refused(None, "invalid_call_id", error, deferred)
                return
        elif peek:
            self.call_id = scope.peek_call_id(tool.name)
        else:
            self.call_id = scope.next_call_id(tool.name)
        try:
            self.input = tool.input_of(args, kwargs)
        except SerializationError as error:
            self._refused(self.call_id, "unserializable_input", error, deferred)

    def _refused(
        self, call_id: str | None, reason: str, error: SagacityError, deferred: bool
    ) -> None:
        self.refused = functools.partial(self._refuse, call_id, reason, error)
        if not deferred:
            self.refused()

    def _refuse(self, call_id: str | None, reason: str, error: SagacityError) -> NoReturn:
        """Journal a call refused before it ran (its id or arguments), fail the saga, raise.

        Nothing ran; but a framework that turns the error into a message lets the model
        go on as if the step had been taken, so the saga must not end COMPLETED.
        """
        scope = self.scope
        with scope.lock:
            # Once the work returned, the call is refused for that when it begins.
            if scope.refuse(error, tool_name=self.tool.name, call_id=call_id, reason=reason):
                scope.fail(error)
        raise error

    def begin(self) -> tuple[object, Any]:
        """Return (REPLAY, result), (PAUSE, request) or (RUN, None) after INTENT."""
        scope = self.scope
        with scope.lock:
            decided = self._decide()
            if isinstance(decided, tuple):
                return decided
            self.intent = scope.append(
                _INTENT, tool_name=self.tool.name, call_id=self.call_id, payload=decided
            )
        return RUN, None

    async def abegin(self) -> tuple[object, Any]:
        """`begin` from async code: the loop awaits the INTENT's commit, never waits on it.

        The tool runs only once its INTENT is committed. A task cancelled meanwhile
        does not start the call. Its INTENT was withdrawn (nothing written), or was
        committed (`CommittedThenCancelled`): FAILED `not_started` then says the call
        did not run, journaled through any further cancel, as a gated call's is. Else
        (the commit failed, or said nothing) the INTENT may exist, in doubt, and the
        saga is marked failed, so that it does not end COMPLETED with a call in doubt.
        """
        scope, tool = self.scope, self.tool
        if scope.gating:
            await scope.settled()
        if (
            tool.reversibility is _IRREVERSIBLE
            or tool.approval_reason is not None
            or self.call_id in scope.history.asked
        ):
            return await self._agated()
        with scope.lock:
            decided = self._decide()
        if isinstance(decided, tuple):
            return decided
        try:
            self.intent = await scope.aappend(
                _INTENT, tool_name=tool.name, call_id=self.call_id, payload=decided
            )
        except CommittedThenCancelled as cancelled:
            self.intent = cancelled.entry
            await self._anot_started(cancelled)
            raise
        except asyncio.CancelledError as cancelled:
            if not isinstance(cancelled, AppendWithdrawn):
                scope.fail(cancelled)  # its INTENT may be in the journal, in doubt
            raise
        return RUN, None

    async def _agated(self) -> tuple[object, Any]:
        """`begin` through the approval gate, on a worker thread (see `SagaScope.gate`).

        Cancelled meanwhile, the task waits for the gate to finish. If the gate journaled
        the approved call's INTENT, the call is not started: FAILED `not_started` says
        so, journaled through any further cancel, so the call is not in doubt and its
        approval still stands for the next run; then the cancel is raised. A request the
        gate asked for stays stored, and a new run finds it.
        """
        try:
            return await self.scope.gate(self.begin)
        except FinishedThenCancelled as cancelled:
            decision, _ = cancelled.result
            if decision is RUN:
                await self._anot_started(cancelled)
            raise

    def _decide(self) -> tuple[object, Any] | dict[str, JsonValue]:
        """Under the scope's lock: the replay or pause to return, or the INTENT's payload."""
        scope, tool = self.scope, self.tool
        self._refuse_if_closed("the call is not run")
        history = scope.history
        prior = history.latest_call.get(self.call_id)
        if prior is not None:
            try:
                replayed = self._replay(prior)
            except (ApprovalError, InDoubtError, ReplayMismatchError) as refusal:
                scope.refusal = refusal  # nothing ran: the saga stays open, not failed
                raise
            if replayed is not None:
                return replayed
        if history.sealed is not None:  # a replay of a saga that ended: nothing new runs
            ended = replay_refusal(history, self.call_id, tool.name, prior)
            if isinstance(ended, ApprovalError):
                scope.refusal = ended  # rejected: raised when the work returns
            raise ended
        payload: dict[str, JsonValue] = {
            "input": self.input,
            "reversibility": tool.reversibility._value_,  # not .value: a Python property
        }
        if tool.reversibility is _IRREVERSIBLE or tool.approval_reason is not None:
            if scope.failed:
                raise SagaStateError(
                    f"saga {scope.saga_id!r}: a call has failed, so the saga will be "
                    f"compensated; {_gated(tool)} {tool.name!r} is not run. Run it in a "
                    "new saga if it is still wanted"
                )
            if not self._ruled_out(payload):
                return self._begin_approved(payload)
        if scope.failed_before:
            # Its effect would be undone as soon as the work returns: do not start it.
            raise SagaStateError(
                f"saga {scope.saga_id!r}: a call failed in an earlier run, so the saga "
                f"will be compensated; tool {tool.name!r} is not run under the new call id "
                f"{self.call_id!r} (calls that ran before replay). Run it in a new saga "
                "if it is still wanted"
            )
        if self.call_id in history.asked:
            try:
                self._asked_request()  # asked for another tool: refused, with evidence
            except ApprovalError as refusal:
                scope.refusal = refusal
                raise
        return payload

    def _ruled_out(self, payload: dict[str, JsonValue]) -> bool:
        """Whether the tool's approval rule, or a standing grant, lets this call run unasked.

        Decided once per call: only for a call never asked before (once a request exists,
        its decision stands, whatever the rule or a grant would say now), and a decision an
        adapter took when it asked ahead (`pending_request`) is the call's, not taken
        again. Let through, the rule's record (`approval_rule`) or the grant's consumption
        (`approval_grant`, its GRANT_USED already committed) goes in the INTENT's
        `payload`; asking, the rule's record is kept for the request.
        """
        self.rule = None
        tool, scope = self.tool, self.scope
        if tool.approval_reason is not None:
            return False
        if self.call_id in scope.history.asked:
            return False  # asked before: entries stay, so a read now would say the same
        approval = scope.owner.approval
        rule = approval.rules.get(tool.name)
        scope.refresh()  # a request another process journaled for this call decides it
        if self.call_id in scope.history.asked:
            return False
        taken = _taken_ahead(scope).pop(self.call_id, None)
        if taken is not None and taken[0] == sha256_hex(self.input):
            payload.update(taken[1])
            return True
        # Asked ahead with other input: that decision (and any grant it consumed) is not
        # this call's; it is decided on its own input.
        if rule is not None:
            decision = rule.decide(self.input)
            if not decision.asked:
                payload["approval_rule"] = decision.record
                return True
            self.rule = decision.record
        covered = grants_of(approval).cover(
            tool.name,
            self.input,
            saga_id=scope.saga_id,
            call_id=self.call_id,
            started_by=scope.started_by,
        )
        if covered is None:
            return False
        payload["approval_grant"] = covered
        return True

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

        The first check reads the journal again, unless the saga was opened to resume
        this very call from a journal read under the lease, and nothing was appended since
        (`read_under_lease`): the approval was seen there, and the INTENT's `expected_seq`
        refuses it if anything was appended since that read (a rejection, another
        worker's INTENT, a takeover), which sends the check round again on a fresh read.
        """
        scope = self.scope
        fresh = _READ_UNDER_LEASE.pop(scope, None) == (self.call_id, scope.history.last_seq)
        for _ in range(_CONFLICT_RETRIES):
            if not fresh:
                scope.refresh()  # the approval may have been recorded by another process
            fresh = False
            scope.refuse_if_ended(f"IRREVERSIBLE tool {self.tool.name!r} is not run")
            try:
                self.request = self._asked_request()
                if self.request is None:
                    return PAUSE, self._ask()
                scope.owner.approval.check(
                    scope.history, self.request, input_sha256=sha256_hex(self.input)
                )
            except ApprovalError as refusal:
                scope.refusal = refusal
                raise
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
            return REPLAY, copy_json(payload_of(prior.outcome).get("result"))
        if prior.in_doubt and prior.kind != CONTROL_FLOW:
            asked = self.scope.history.asked.get(self.call_id)
            if asked is not None and prior.intent.seq > asked.seq:
                # An approved call another worker is running (or was, when it stopped):
                # ApprovalAlreadyUsedError says so.
                explain_unusable(self.scope.history, payload_of(asked).get("request_id"))
            raise InDoubtError(
                f"saga {saga!r}: call {self.call_id!r} of tool {name!r} has an INTENT at seq "
                f"{prior.intent.seq} with no known outcome; it may have run. Resolve it with "
                "Sagacity.resolve before running it again"
            )
        # It failed with a known outcome (running it again is a retry), or the framework
        # left it mid-call and now runs it again under the same id, as LangGraph does.
        return None

    def _asked_request(self) -> ApprovalRequest | None:
        scope = self.scope
        return scope.owner.approval.asked(
            scope.history, call_id=self.call_id, tool_name=self.tool.name
        )

    def _ask(self) -> ApprovalRequest:
        tool = self.tool
        if tool.approval_reason is not None:  # a workflow gate says why it waits
            return self.scope.owner.approval.ask(
                self.scope.history,
                tool_name=tool.name,
                call_id=self.call_id,
                input=self.input,
                reason=tool.approval_reason,
                started_by=self.scope.started_by,
            )
        summary = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        return self.scope.owner.approval.ask(
            self.scope.history,
            tool_name=tool.name,
            call_id=self.call_id,
            input=self.input,
            reason=f"{tool.name} is IRREVERSIBLE: {summary}"
            if summary
            else f"{tool.name} is IRREVERSIBLE",
            started_by=self.scope.started_by,
            rule=self.rule,
        )

    def pending_request(self) -> ApprovalRequest | None:
        """Return the request this call must wait on, asking for one if there is none.

        None means the call may run now: it is not IRREVERSIBLE, it ran before (and
        will be replayed), or its approval passes every check.
        """
        if (
            self.tool.reversibility is not Reversibility.IRREVERSIBLE
            and self.tool.approval_reason is None
        ):
            return None
        scope = self.scope
        with scope.lock:
            self._refuse_if_closed("no approval is asked")  # it would journal after the end
            scope.refresh()
            prior = scope.history.latest_call.get(self.call_id)
            request: ApprovalRequest | None = None
            try:
                if prior is not None and self._replay(prior) is not None:
                    return None
                if scope.history.sealed is not None:
                    raise replay_refusal(scope.history, self.call_id, self.tool.name, prior)
                request = self._asked_request()
                if request is None:
                    # Let through, the decision is kept for the call itself, which
                    # journals it with its INTENT instead of deciding again.
                    decided: dict[str, JsonValue] = {}
                    if not self._ruled_out(decided):
                        return self._ask()
                    _taken_ahead(scope)[self.call_id] = (sha256_hex(self.input), decided)
                    return None
                scope.owner.approval.check(
                    scope.history, request, input_sha256=sha256_hex(self.input)
                )
            except ApprovalMissingError:
                return request  # asked and not yet approved: still waiting
            except ApprovalExpiredError:
                return self._asked_request()  # expired, and asked again
            except (ApprovalError, InDoubtError, ReplayMismatchError) as refusal:
                scope.refusal = refusal
                raise
            return None

    def decline(self, *, source: str, reason: str) -> JournalEntry | None:
        """Journal a framework's own rejection of this call; None if it was never asked.

        The call is not run, whatever sagacity holds, and the saga goes on.
        """
        scope = self.scope
        with scope.lock:
            self._refuse_if_closed("its rejection is not journaled")  # no entry after the end
            scope.refresh()
            request = self._asked_request()
            if request is None:
                return None
            return scope.owner.approval.decline(
                scope.history, request, source=source, reason=reason
            )


_TAKEN_AHEAD: weakref.WeakKeyDictionary[SagaScope, dict[str, tuple[str, dict[str, JsonValue]]]]
_TAKEN_AHEAD = weakref.WeakKeyDictionary()


_READ_UNDER_LEASE: weakref.WeakKeyDictionary[SagaScope, tuple[str, int]]
_READ_UNDER_LEASE = weakref.WeakKeyDictionary()


def read_under_lease(scope: SagaScope, call_id: str) -> None:
    """Note that `scope` was opened, from the journal read under its lease, to run `call_id`.

    The call's approval check then uses that read instead of reading again, once, if
    nothing was appended to `scope.history` since (see `Call._begin_approved`).
    """
    with scope.lock:
        _READ_UNDER_LEASE[scope] = (call_id, scope.history.last_seq)


def _taken_ahead(scope: SagaScope) -> dict[str, tuple[str, dict[str, JsonValue]]]:
    """The decisions taken when an adapter asked ahead, by call id: (input hash, record).

    Read and written under the scope's lock.
    """
    taken = _TAKEN_AHEAD.get(scope)
    if taken is None:
        taken = _TAKEN_AHEAD[scope] = {}
    return taken


def _gated(tool: JournaledTool) -> str:
    """What stops a call that needs approval, for messages: its reversibility or its gate."""
    return "IRREVERSIBLE tool" if tool.reversibility is _IRREVERSIBLE else "gated tool"
