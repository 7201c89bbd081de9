"""What a saga's journal entries say, derived in one pass: calls, approvals, the end."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable
from typing import Any

from sagacity.errors import LeaseLostError, SagaStateError
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal
from sagacity.journal._group import CommittedThenCancelled
from sagacity.journal._lease import SagaLease
from sagacity.journal._protocol import append_async

__all__ = ["NOT_RUN", "NOT_STARTED", "CallState", "SagaHistory", "payload_of"]

OUTCOME_UNKNOWN = "outcome_unknown"
NOT_STARTED = "not_started"
"""The FAILED kind of an approved call whose task was cancelled as its INTENT was
journaled, before the tool started: it did not run, and its approval still stands."""
NOT_RUN = "not_run"
"""The FAILED kind `Sagacity.resolve(..., executed=False)` journals: a human found that
the call in doubt did not run. An approved call's approval still stands."""
_DID_NOT_RUN = (NOT_STARTED, NOT_RUN)
"""FAILED kinds that say the call's INTENT had no effect: it did not spend an approval."""
CONTROL_FLOW = "control_flow"
RETRYABLE = "retryable"
_MAY_HAVE_RUN = (OUTCOME_UNKNOWN, CONTROL_FLOW)
"""FAILED kinds after which the effect may exist: the call is in doubt."""

# On Python 3.11 `Phase.INTENT` goes through EnumType.__getattr__ (0.07 µs); `add` is on
# the hot path of every call.
_INTENT, _EXECUTED, _FAILED = Phase.INTENT, Phase.EXECUTED, Phase.FAILED


@dataclasses.dataclass(slots=True)
class CallState:
    """One INTENT and what became of it."""

    intent: JournalEntry
    outcome: JournalEntry | None = None
    compensation: JournalEntry | None = None
    """The latest COMPENSATED or COMPENSATION_FAILED of the call's EXECUTED."""
    compensating: JournalEntry | None = None
    """The latest COMPENSATING: the intent of the compensation's latest attempt."""
    compensation_attempts: int = 0
    """How many COMPENSATING entries the call has: attempts of its compensation."""

    @property
    def executed(self) -> bool:
        return self.outcome is not None and self.outcome.phase is Phase.EXECUTED

    @property
    def kind(self) -> str | None:
        """The FAILED outcome's kind; None for no outcome or EXECUTED."""
        if self.outcome is None or self.outcome.phase is not Phase.FAILED:
            return None
        kind = payload_of(self.outcome).get("kind")
        return kind if isinstance(kind, str) else None

    @property
    def did_not_run(self) -> bool:
        """Known not to have run: FAILED `not_started` (cancelled first), or `not_run`.

        `not_run` is a human's finding on a call in doubt (`Sagacity.resolve`).
        """
        return self.kind in _DID_NOT_RUN

    @property
    def in_doubt(self) -> bool:
        """The effect may exist and nobody knows its result.

        An INTENT with no outcome, an unknown outcome, or a control-flow exit (the
        framework left the tool mid-call).
        """
        return self.outcome is None or self.kind in _MAY_HAVE_RUN

    @property
    def compensated(self) -> bool:
        return self.compensation is not None and self.compensation.phase is Phase.COMPENSATED

    @property
    def compensation_started(self) -> bool:
        """Its compensation's latest attempt started and has no outcome journaled."""
        return self.compensating is not None and (
            self.compensation is None or self.compensation.seq < self.compensating.seq
        )

    @property
    def compensation_in_doubt(self) -> bool:
        """Its compensation may have taken effect and nobody knows: not compensated, not failed.

        A COMPENSATING with no outcome after it (the process stopped during the
        compensation), or a COMPENSATION_FAILED whose outcome is unknown (it timed out).
        """
        if self.compensation_started:
            return True
        return (
            self.compensation is not None
            and self.compensation.phase is Phase.COMPENSATION_FAILED
            and payload_of(self.compensation).get("kind") == OUTCOME_UNKNOWN
        )


@dataclasses.dataclass(slots=True)
class SagaHistory:
    """A saga's journal, indexed; `add` keeps it current as entries are appended."""

    saga_id: str
    entries: list[JournalEntry] = dataclasses.field(default_factory=list)
    calls: dict[int, CallState] = dataclasses.field(default_factory=dict)
    """By INTENT seq."""
    latest_call: dict[str, CallState] = dataclasses.field(default_factory=dict)
    """By call id: the call's latest INTENT."""
    awaiting: dict[str, JournalEntry] = dataclasses.field(default_factory=dict)
    """AWAITING_APPROVAL entries by request id."""
    asked: dict[str, JournalEntry] = dataclasses.field(default_factory=dict)
    """By call id: the call's newest AWAITING_APPROVAL entry."""
    decisions: dict[int, list[JournalEntry]] = dataclasses.field(default_factory=dict)
    """APPROVED and REJECTED entries by the seq of the AWAITING_APPROVAL they answer."""
    ended: JournalEntry | None = None
    fence: SagaLease | None = None
    """The lease this history's appends are made under; None for an unleased decision."""
    lease_lost: bool = False
    """The lease was taken over: this worker must stop and leave the saga alone."""
    sealed: str | None = None
    """Why nothing may be appended (a replay of a saga that ended); None when open."""

    @classmethod
    def of(cls, saga_id: str, entries: Iterable[JournalEntry]) -> SagaHistory:
        history = cls(saga_id)
        for entry in entries:
            history.add(entry)
        return history

    def add(self, entry: JournalEntry) -> None:
        entries = self.entries
        if entries and entry.seq < entries[-1].seq:
            # Concurrent async appends of one saga may land here out of seq order.
            bisect.insort(entries, entry, key=lambda e: e.seq)
        else:
            entries.append(entry)
        phase = entry.phase
        if phase is _INTENT:
            started = CallState(entry)
            self.calls[entry.seq] = started
            if entry.call_id is not None:
                self.latest_call[entry.call_id] = started
        elif phase is _EXECUTED or phase is _FAILED:
            answered = self.calls.get(entry.ref_seq or 0)
            if answered is not None:
                answered.outcome = entry
        elif phase in (Phase.COMPENSATING, Phase.COMPENSATED, Phase.COMPENSATION_FAILED):
            executed = self.entry(entry.ref_seq or 0)
            call = self.calls.get(executed.ref_seq or 0) if executed else None
            if call is None:
                pass
            elif phase is Phase.COMPENSATING:
                call.compensating = entry
                call.compensation_attempts += 1
            else:
                call.compensation = entry
        elif phase is Phase.AWAITING_APPROVAL:
            request_id = payload_of(entry).get("request_id")
            if isinstance(request_id, str):
                self.awaiting[request_id] = entry
            if entry.call_id is not None:
                self.asked[entry.call_id] = entry
        elif phase in (Phase.APPROVED, Phase.REJECTED):
            self.decisions.setdefault(entry.ref_seq or 0, []).append(entry)
        elif phase is Phase.ENDED:
            self.ended = entry

    def reload(self, journal: SideEffectJournal) -> None:
        """Read the saga's journal again, in place: another writer may have appended."""
        fresh = SagaHistory.of(self.saga_id, journal.entries(self.saga_id))
        for field in dataclasses.fields(self):
            if field.name not in ("fence", "lease_lost", "sealed"):
                setattr(self, field.name, getattr(fresh, field.name))

    def append(
        self,
        journal: SideEffectJournal,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
    ) -> JournalEntry:
        """Append to the saga's journal, under this history's lease, and add the entry here."""
        if self.sealed is not None:
            raise SagaStateError(self.sealed)
        try:
            entry = journal.append(
                self.saga_id,
                phase,
                tool_name=tool_name,
                call_id=call_id,
                ref_seq=ref_seq,
                payload=payload,
                expected_seq=expected_seq,
                fence=self.fence,
            )
        except LeaseLostError:
            self.lease_lost = True
            raise
        self.add(entry)
        return entry

    async def aappend(
        self,
        journal: SideEffectJournal,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
    ) -> JournalEntry:
        """`append` from async code: the loop awaits the journal (see `append_async`).

        A task cancelled while its entry was committed adds the entry here all the same
        (`CommittedThenCancelled`): the history stays the journal's, though the caller,
        cancelled, never receives it.
        """
        if self.sealed is not None:
            raise SagaStateError(self.sealed)
        try:
            entry = await append_async(
                journal,
                self.saga_id,
                phase,
                tool_name=tool_name,
                call_id=call_id,
                ref_seq=ref_seq,
                payload=payload,
                expected_seq=expected_seq,
                fence=self.fence,
            )
        except LeaseLostError:
            self.lease_lost = True
            raise
        except CommittedThenCancelled as cancelled:
            self.add(cancelled.entry)
            raise
        self.add(entry)
        return entry

    def entry(self, seq: int) -> JournalEntry | None:
        """Return the entry at `seq`, if it exists where seq says it should."""
        if 1 <= seq <= len(self.entries) and self.entries[seq - 1].seq == seq:
            return self.entries[seq - 1]
        return next((e for e in self.entries if e.seq == seq), None)

    @property
    def last_seq(self) -> int:
        """The seq of the saga's last entry; 0 when it has none."""
        return self.entries[-1].seq if self.entries else 0

    @property
    def outcome(self) -> str | None:
        """The outcome of the latest ENDED entry, or None while the saga is open."""
        if self.ended is None:
            return None
        value = payload_of(self.ended).get("outcome")
        return value if isinstance(value, str) else None

    def has_failed_call(self) -> bool:
        """True when any attempt of any call failed the saga (a failure or an unknown outcome).

        Every attempt counts, as it does while the saga runs: a call that failed and then
        succeeded on a retry still failed the saga.
        """
        return any(
            call.outcome is not None
            and call.outcome.phase is Phase.FAILED
            and payload_of(call.outcome).get("kind") in ("failure", OUTCOME_UNKNOWN)
            for call in self.calls.values()
        )

    def superseded(self, call: CallState) -> bool:
        """True when the same call id started again later (a re-run under one idempotency key)."""
        return (
            call.intent.call_id is not None
            and self.latest_call.get(call.intent.call_id) is not call
        )

    def unanswered_retries(self) -> list[CallState]:
        """Calls that failed asking to be retried, with no later success of their tool.

        Frameworks retry under a new call id (PydanticAI's ModelRetry), so the answer is
        any later EXECUTED call of the same tool. When the work returns with a retry
        unanswered, the framework gave up: the saga failed. And the tool raised after
        it started: the unanswered call may have acted, so it is in doubt.
        """
        unanswered: dict[str, list[CallState]] = {}
        for call in sorted(self.calls.values(), key=lambda c: c.intent.seq):
            tool = call.intent.tool_name or ""
            if call.kind == RETRYABLE:
                unanswered.setdefault(tool, []).append(call)
            elif call.executed:
                unanswered.pop(tool, None)
        return [call for calls in unanswered.values() for call in calls]

    def may_have_run(self, call: CallState) -> bool:
        """True when the call's effect may exist with no result known: it is in doubt."""
        if call.kind == RETRYABLE:
            return any(c is call for c in self.unanswered_retries())
        return call.in_doubt and not self.superseded(call)

    def rejected(self, awaiting_seq: int) -> JournalEntry | None:
        return next(
            (d for d in self.decisions.get(awaiting_seq, ()) if d.phase is Phase.REJECTED), None
        )

    def approvals(self, awaiting_seq: int) -> list[JournalEntry]:
        return [d for d in self.decisions.get(awaiting_seq, ()) if d.phase is Phase.APPROVED]

    def approval_spent(self, call_id: str | None, asked_seq: int) -> CallState | None:
        """The attempt of call `call_id` that spent the approval asked at `asked_seq`, if any.

        That is its first INTENT after the request whose call may have run: it ran, it
        failed, or its outcome is unknown (in doubt, or resolved as executed). An INTENT
        known not to have run (FAILED `not_started`, or resolved `not_run`) spends
        nothing: the approval stands, and the next run runs the call.
        """
        if call_id is None or call_id not in self.latest_call:
            return None  # the call never started: the common case, answered at once
        return min(
            (
                call
                for call in self.calls.values()
                if call.intent.call_id == call_id
                and call.intent.seq > asked_seq
                and not call.did_not_run
            ),
            key=lambda call: call.intent.seq,
            default=None,
        )

    def open_requests(self) -> list[JournalEntry]:
        """AWAITING_APPROVAL entries neither rejected nor spent by a run of their call."""
        return [
            entry
            for entry in self.awaiting.values()
            if self.rejected(entry.seq) is None
            and self.approval_spent(entry.call_id, entry.seq) is None
        ]


def payload_of(entry: JournalEntry) -> dict[str, Any]:
    """The entry's payload when it is an object, else an empty dict."""
    return entry.payload if isinstance(entry.payload, dict) else {}
