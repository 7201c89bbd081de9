"""The walk's report: what was compensated, failed, skipped, in doubt or left waiting."""

from __future__ import annotations

from typing import Any

from sagacity._history import NOT_RUN, CallState, SagaHistory, payload_of
from sagacity.compensation._context import CallRef, CompensationReport
from sagacity.journal import JournalEntry

__all__ = ["compensation_in_doubt", "outcome_seq", "ref", "report"]


def report(
    history: SagaHistory, *, skipped: list[CallRef], waiting: list[CallRef]
) -> CompensationReport:
    """The walk's report, once it skipped `skipped` and left `waiting` to another process."""
    compensated: list[CallRef] = []
    failed: list[CallRef] = []
    waiting_seqs = {item.seq for item in waiting}
    done = [c for c in history.calls.values() if c.compensation is not None]
    for call in sorted(done, key=lambda c: c.compensation.seq if c.compensation else 0):
        assert call.outcome is not None
        assert call.compensation is not None
        if call.compensated:
            compensated.append(ref(call.outcome))
        elif not call.compensation_in_doubt:  # failed before, even if waiting now
            failed.append(ref(call.outcome, _failure_text(call.compensation)))
    not_reached = {item.seq for item in skipped} | waiting_seqs
    in_doubt: list[CallRef] = []
    for call in sorted(history.calls.values(), key=outcome_seq, reverse=True):
        if history.may_have_run(call):
            in_doubt.append(ref(call.intent, _unknown_reason(call.outcome)))
        elif call.executed and compensation_in_doubt(call):
            assert call.outcome is not None
            in_doubt.append(ref(call.outcome, _compensation_reason(call)))
        elif call.executed and call.compensating is None and call.compensation is None:
            assert call.outcome is not None
            if call.outcome.seq not in not_reached:
                in_doubt.append(ref(call.outcome, _LATE))
    return CompensationReport(
        saga_id=history.saga_id,
        compensated=compensated,
        failed=failed,
        skipped=skipped,
        in_doubt=in_doubt,
        waiting=waiting,
    )


_LATE = (
    "it executed after the compensation walk had planned its undos, and was not undone; "
    "compensate the saga again to undo it"
)
"""Why an executed call the walk never reached is listed in doubt: it is live."""


def compensation_in_doubt(call: CallState) -> bool:
    """Whether the call's compensation started or ended with its outcome unknown."""
    return not call.compensated and call.compensation_in_doubt


def outcome_seq(call: CallState) -> int:
    """The seq the walk orders a call by: its outcome's, else its intent's."""
    return call.outcome.seq if call.outcome is not None else call.intent.seq


def ref(entry: JournalEntry, error: Any = None) -> CallRef:
    """The report's reference to `entry`'s call, with why it is listed (`error`)."""
    return CallRef(
        seq=entry.seq,
        tool_name=entry.tool_name or "",
        call_id=entry.call_id or "",
        error=None if error is None else str(error),
    )


def _unknown_reason(outcome: JournalEntry | None) -> str:
    if outcome is None:
        return "INTENT with no outcome: the process may have stopped during the call"
    what = "outcome unknown"
    kind = payload_of(outcome).get("kind")
    if kind == "control_flow":
        what = "the framework left the tool mid-call, and did not run it again"
    elif kind == "retryable":
        what = "the tool raised asking for a retry after it started, and no retry succeeded"
    error = payload_of(outcome).get("error")
    if isinstance(error, dict):
        return f"{what}: {error.get('type')}: {error.get('message')}"
    return what


def _compensation_reason(call: CallState) -> str:
    """Why a compensation is in doubt, for the report."""
    if call.compensation_started:
        assert call.compensating is not None
        return (
            f"compensation started (COMPENSATING at seq {call.compensating.seq}) and its "
            "outcome is unknown: the process may have stopped during it"
        )
    assert call.compensation is not None
    return f"compensation outcome unknown: {payload_of(call.compensation).get('error')}"


def _failure_text(entry: JournalEntry) -> Any:
    payload = payload_of(entry)
    if payload.get("kind") == NOT_RUN:
        return (
            f"resolved as not compensated by {payload.get('resolved_by')!r}; "
            "the next walk runs it again"
        )
    return payload.get("error")
