"""Settling doubts: a reconciler's verdict, or a human's finding, journaled with its evidence.

`Reconciling.settle` asks each declared reconciler about the calls and compensations in
doubt in a saga's history and journals the answer as a RECONCILED entry (the verdict, its
evidence, who decided), then the entry the verdict implies, exactly as a human's finding
would be journaled (`settle_call`, `settle_compensation`):

| subject      | landed                          | did not land                          |
|--------------|---------------------------------|---------------------------------------|
| call         | EXECUTED with the result        | FAILED `not_run` (approval stands)    |
| compensation | COMPENSATED                     | COMPENSATION_FAILED `not_run` (rerun) |

An *unknown* verdict, a reconciler that raises, hangs past its timeout or answers
something else journals RECONCILED `unknown` (with the failure) and nothing more: the doubt
stays for a human. A verdict that contradicts the journal read after asking (the call's
EXECUTED, or its COMPENSATED, is there) is journaled with `ignored` and logged, never applied.

It is called wherever a doubt is met before a human is asked: the end of a failed run
(`SagaEnding`), `compensate`, `reject` and before `resume_saga` (`Sagacity`).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

from sagacity import _telemetry
from sagacity._classify import error_json
from sagacity._history import CONTROL_FLOW, NOT_RUN, CallState, SagaHistory, payload_of
from sagacity._reconcile import (
    Evidence,
    ReconcileContext,
    Reconciled,
    ReconcilerFailure,
    ReconcilerRegistry,
    ReconcileSubject,
    Verdict,
    aask,
    ask,
)
from sagacity.errors import SagaStateError, SerializationError
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal, to_json

__all__ = ["Doubt", "Reconciling", "settle_call", "settle_compensation"]

_CALL, _COMPENSATION = ReconcileSubject.CALL, ReconcileSubject.COMPENSATION

Doubt = tuple[ReconcileSubject, CallState]
"""A call in doubt (its latest attempt), or a call whose compensation is in doubt."""


def settle_call(
    journal: SideEffectJournal,
    history: SagaHistory,
    call_id: str,
    *,
    executed: bool,
    result: Any,
    by: str,
    reason: str | None = None,
    evidence: Evidence | None = None,
    verdict_seq: int | None = None,
) -> JournalEntry:
    """Journal a finding on a call in doubt: it ran (with `result`) or not.

    The finding is about the call, not one attempt: a call the framework retried under
    one id, several attempts in doubt, is settled whole. It ran: its latest attempt is
    EXECUTED (which answers the earlier ones). It did not: each attempt in doubt is FAILED
    `not_run`. `by` is who found out (a principal, or `reconciler:<tool>`), `verdict_seq`
    the RECONCILED entry it follows. Returns the last entry journaled.

    Raises:
        SagaStateError: The call is not in doubt.
    """
    saga_id = history.saga_id
    call = history.latest_call.get(call_id)
    if call is None or not history.may_have_run(call):
        raise SagaStateError(
            f"saga {saga_id!r}: call {call_id!r} is not in doubt; only a call whose outcome "
            "is unknown can be resolved"
        )
    extra = _finding(by, reason, evidence, verdict_seq)
    if executed:
        payload: dict[str, JsonValue] = {
            "result": to_json(result, where=f"saga {saga_id!r} call {call_id!r} result"),
            **extra,
        }
        return history.append(
            journal,
            Phase.EXECUTED,
            tool_name=call.intent.tool_name,
            call_id=call_id,
            ref_seq=call.intent.seq,
            payload=payload,
        )
    attempts = sorted(
        (c for c in history.calls.values() if c.intent.call_id == call_id),
        key=lambda c: c.intent.seq,
    )
    not_run: dict[str, JsonValue] = {"kind": NOT_RUN, "error": None, **extra}
    entry = None
    for attempt in [c for c in attempts if history.may_have_run(c)]:
        entry = history.append(
            journal,
            Phase.FAILED,
            tool_name=attempt.intent.tool_name,
            call_id=call_id,
            ref_seq=attempt.intent.seq,
            payload=not_run,
        )
    assert entry is not None  # the latest attempt is in doubt
    return entry


def settle_compensation(
    journal: SideEffectJournal,
    history: SagaHistory,
    call_id: str,
    *,
    compensated: bool,
    by: str,
    reason: str | None = None,
    evidence: Evidence | None = None,
    verdict_seq: int | None = None,
) -> JournalEntry:
    """Journal a finding on a compensation in doubt: it took effect or not.

    COMPENSATED with `resolved_by`, or COMPENSATION_FAILED of kind `not_run`, which the
    next walk runs again.

    Raises:
        SagaStateError: No compensation of the call is in doubt.
    """
    call = next(
        (c for c in history.calls.values() if c.intent.call_id == call_id and _undo_in_doubt(c)),
        None,
    )
    if call is None or call.outcome is None:
        raise SagaStateError(
            f"saga {history.saga_id!r}: no compensation of call {call_id!r} is in doubt; "
            "only a compensation that started with its outcome unknown can be resolved"
        )
    executed = call.outcome
    payload = _finding(by, reason, evidence, verdict_seq)
    phase = Phase.COMPENSATED
    if not compensated:
        phase = Phase.COMPENSATION_FAILED
        payload = {"kind": NOT_RUN, "error": None, **payload}
    return history.append(
        journal,
        phase,
        tool_name=executed.tool_name,
        call_id=executed.call_id,
        ref_seq=executed.seq,
        payload=payload,
    )


def _finding(
    by: str, reason: str | None, evidence: Evidence | None, verdict_seq: int | None
) -> dict[str, JsonValue]:
    payload: dict[str, JsonValue] = {"resolved_by": by}
    if reason is not None:
        payload["reason"] = reason
    if evidence is not None:
        payload["evidence"] = evidence.to_json()
    if verdict_seq is not None:
        payload["verdict_seq"] = verdict_seq
    return payload


def _undo_in_doubt(call: CallState) -> bool:
    return call.executed and not call.compensated and call.compensation_in_doubt


def doubts(history: SagaHistory, *, walking: bool) -> Iterator[Doubt]:
    """The doubts of `history` a reconciler may settle, in journal order.

    A call left mid-call by its framework (control flow) or an unanswered retry is asked
    about only by a compensation walk (`walking`): a resumed framework runs it again.
    """
    for call in sorted(history.latest_call.values(), key=lambda c: c.intent.seq):
        if history.may_have_run(call):
            if walking or call.kind not in (CONTROL_FLOW, "retryable"):
                yield _CALL, call
        elif _undo_in_doubt(call):
            yield _COMPENSATION, call


class Reconciling:
    """Asks reconcilers about a saga's doubts and journals their verdicts."""

    def __init__(self, journal: SideEffectJournal, registry: ReconcilerRegistry) -> None:
        self._journal = journal
        self.registry = registry

    def settle(self, history: SagaHistory, *, walking: bool, asked: set[int] | None = None) -> int:
        """Ask about each doubt whose tool has a reconciler; return how many were settled.

        `asked` holds the seqs of the doubts already asked about in this operation (each is
        asked once); the history must be held under the saga's lease.
        """
        if not self.registry:
            return 0
        settled = 0
        for subject, reconciler, context, key in self._questions(history, walking, asked):
            try:
                answer: Reconciled | ReconcilerFailure = ask(reconciler, context)
            except ReconcilerFailure as failure:
                answer = failure
            history.reload(self._journal)  # the journal as it is now, not as it was asked
            settled += self._journal_verdict(history, subject, key, reconciler.decided_by, answer)
        return settled

    async def asettle(
        self, history: SagaHistory, *, walking: bool, asked: set[int] | None = None
    ) -> int:
        """`settle` from async code: async reconcilers on this loop, the journal on a thread."""
        if not self.registry:
            return 0
        settled = 0
        for subject, reconciler, context, key in self._questions(history, walking, asked):
            try:
                answer: Reconciled | ReconcilerFailure = await aask(reconciler, context)
            except ReconcilerFailure as failure:
                answer = failure
            await asyncio.to_thread(history.reload, self._journal)
            settled += await asyncio.to_thread(
                self._journal_verdict, history, subject, key, reconciler.decided_by, answer
            )
        return settled

    def _questions(
        self, history: SagaHistory, walking: bool, asked: set[int] | None
    ) -> Iterator[tuple[ReconcileSubject, Any, ReconcileContext, int]]:
        for subject, call in list(doubts(history, walking=walking)):
            intent = call.intent
            reconciler = self.registry.get(intent.tool_name or "", subject)
            key = intent.seq if subject is _CALL else -(call.outcome.seq if call.outcome else 0)
            if reconciler is None or (asked is not None and key in asked):
                continue
            if asked is not None:
                asked.add(key)
            yield subject, reconciler, _context(history.saga_id, subject, call), key

    def _journal_verdict(
        self,
        history: SagaHistory,
        subject: ReconcileSubject,
        key: int,
        decided_by: str,
        answer: Reconciled | ReconcilerFailure,
    ) -> int:
        """Journal RECONCILED, then what the verdict implies; 1 if it settled the doubt."""
        call = _call_of(history, subject, key)
        if call is None:
            return 0  # gone from the history: another writer rewrote it
        payload: dict[str, JsonValue] = {"subject": subject.value, "decided_by": decided_by}
        result: JsonValue = None
        if isinstance(answer, Reconciled):
            try:
                if answer.verdict is Verdict.LANDED and subject is _CALL:
                    result = to_json(answer.result, where=f"{decided_by} result")
            except SerializationError as error:
                answer = ReconcilerFailure("invalid_answer", str(error))
        if isinstance(answer, ReconcilerFailure):
            payload |= {
                "verdict": Verdict.UNKNOWN.value,
                "failure": answer.failure,
                "error": error_json(answer),
            }
            verdict = Verdict.UNKNOWN
        else:
            verdict = answer.verdict
            payload["verdict"] = verdict.value
            payload["evidence"] = None if answer.evidence is None else answer.evidence.to_json()
            if answer.reason is not None:
                payload["reason"] = answer.reason
            if verdict is Verdict.LANDED and subject is _CALL:
                payload["result"] = result
        ignored = _contradicted(history, subject, call, verdict)
        if ignored is not None:
            payload["ignored"] = ignored
        entry = self._append_verdict(history, subject, call, payload)
        _log(history, subject, call, payload, entry)
        if ignored is not None or verdict is Verdict.UNKNOWN:
            return 0
        evidence = None if isinstance(answer, ReconcilerFailure) else answer.evidence
        call_id = call.intent.call_id or ""
        if subject is _CALL:
            settle_call(
                self._journal,
                history,
                call_id,
                executed=verdict is Verdict.LANDED,
                result=result,
                by=decided_by,
                evidence=evidence,
                verdict_seq=entry.seq,
            )
        else:
            settle_compensation(
                self._journal,
                history,
                call_id,
                compensated=verdict is Verdict.LANDED,
                by=decided_by,
                evidence=evidence,
                verdict_seq=entry.seq,
            )
        return 1

    def _append_verdict(
        self,
        history: SagaHistory,
        subject: ReconcileSubject,
        call: CallState,
        payload: dict[str, JsonValue],
    ) -> JournalEntry:
        about = call.intent if subject is _CALL or call.outcome is None else call.outcome
        return history.append(
            self._journal,
            Phase.RECONCILED,
            tool_name=about.tool_name,
            call_id=about.call_id,
            ref_seq=about.seq,
            payload=payload,
        )


def _call_of(history: SagaHistory, subject: ReconcileSubject, key: int) -> CallState | None:
    if subject is _CALL:
        return history.calls.get(key)
    executed = history.entry(-key)
    return history.calls.get(executed.ref_seq or 0) if executed is not None else None


def _contradicted(
    history: SagaHistory, subject: ReconcileSubject, call: CallState, verdict: Verdict
) -> str | None:
    """Why the verdict is not applied, when the journal read after asking says otherwise."""
    call_id = call.intent.call_id
    if subject is _CALL:
        executed = next(
            (
                c.outcome
                for c in history.calls.values()
                if c.intent.call_id == call_id and c.executed
            ),
            None,
        )
        if executed is not None:
            if verdict is Verdict.DID_NOT_LAND:
                return (
                    f"the call's EXECUTED is in the journal (seq {executed.seq}); a verdict is "
                    "never trusted over it"
                )
            return f"the call's EXECUTED is in the journal already (seq {executed.seq})"
        if verdict is not Verdict.UNKNOWN and not history.may_have_run(call):
            return "the call was settled meanwhile; it is no longer in doubt"
        return None
    if call.compensated:
        assert call.compensation is not None
        return (
            f"the compensation's COMPENSATED is in the journal (seq {call.compensation.seq}); "
            "a verdict is never trusted over it"
        )
    if verdict is not Verdict.UNKNOWN and not _undo_in_doubt(call):
        return "the compensation was settled meanwhile; it is no longer in doubt"
    return None


def _context(saga_id: str, subject: ReconcileSubject, call: CallState) -> ReconcileContext:
    intent = call.intent
    raw_input = payload_of(intent).get("input")
    attempt = payload_of(intent).get("attempt", 1)
    result: JsonValue = None
    if subject is _COMPENSATION:
        attempt = call.compensation_attempts
        result = copy.deepcopy(payload_of(call.outcome).get("result")) if call.outcome else None
    return ReconcileContext(
        saga_id=saga_id,
        tool_name=intent.tool_name or "",
        call_id=intent.call_id or "",
        input=copy.deepcopy(raw_input) if isinstance(raw_input, dict) else {},
        attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 1,
        subject=subject,
        result=result,
    )


def _log(
    history: SagaHistory,
    subject: ReconcileSubject,
    call: CallState,
    payload: dict[str, JsonValue],
    entry: JournalEntry,
) -> None:
    what = (
        f"saga {history.saga_id!r}: {payload['decided_by']} on the {subject.value} "
        f"{call.intent.call_id!r}"
    )
    if "ignored" in payload:
        _telemetry.logger.warning(
            "%s answered %s; ignored (seq %d): %s",
            what,
            payload["verdict"],
            entry.seq,
            payload["ignored"],
        )
    elif "failure" in payload:
        _telemetry.logger.warning(
            "%s failed (%s, seq %d): %s; the doubt is left to a human",
            what,
            payload["failure"],
            entry.seq,
            payload["error"],
        )
    elif payload["verdict"] == Verdict.UNKNOWN.value:
        _telemetry.logger.warning(
            "%s answered unknown (seq %d); the doubt is left to a human", what, entry.seq
        )
    else:
        _telemetry.logger.info("%s answered %s (seq %d)", what, payload["verdict"], entry.seq)
