"""Resuming a saga: which approved call may run now, and a resume after the saga ended.

`Sagacity.resume_saga` asks `ApprovalLifecycle.resumable` once, before it takes the
saga's lease, and acts on the answer: a `ResumableCall`, or the refusal that says from
the journal why nothing can run. Under the lease it asks `ResumableCall.refuse_if_spent`
of the journal read there (another worker may have run the call meanwhile), and the
call then passes the hot path's own check, as any call does: `ApprovalLifecycle.asked`
finds its request, `ApprovalLifecycle.check` (`_check.check_approved`) verifies its
approvals and the input's hash, and `ApprovalLifecycle.consume` spends it.

A framework's native resume (`resume_saga(saga_id, work)`) of a saga that ended after it
paused for approval, its call run or refused elsewhere (`sagacity resume`, the inbox, a
worker), replays instead of being refused (`seal_for_replay`): its work runs again
against the journal alone, each call it journaled gets its journaled result (through
the hot path's replay, with its checks of tool and input), and any other call is refused
with what the journal says of it (`replay_refusal`). Nothing is journaled: the saga
stays as its ENDED says, and the framework's run learns what happened.
"""

from __future__ import annotations

import dataclasses

from sagacity._history import CallState, SagaHistory, payload_of
from sagacity.approval._check import explain_unusable
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import ApprovalRejectedError, SagaStateError

__all__ = ["ResumableCall", "refuse_ended_resume", "replay_refusal", "seal_for_replay"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResumableCall:
    """The approved call a resume without work runs: its request, as the journal records it."""

    request: ApprovalRequest
    """The pending request, verified against its AWAITING_APPROVAL entry: the call id,
    tool and journaled input to run."""

    def refuse_if_spent(self, history: SagaHistory) -> None:
        """Refuse if `history`, read under the lease, shows the call ran or was rejected.

        The call is run, never replayed: an approval runs its call once.

        Raises:
            ApprovalRejectedError: A REJECTED entry answers the request.
            ApprovalAlreadyUsedError: The approved call ran, or may have.
        """
        explain_unusable(history, self.request.request_id)


def refuse_ended_resume(history: SagaHistory, request_id: str | None) -> None:
    """Refuse to resume a saga that ended, saying why from the journal.

    Raises:
        ApprovalRejectedError: It ended after the request (the named one, else the
            newest) was rejected.
        ApprovalAlreadyUsedError: That request's approved call ran.
        SagaStateError: It ended otherwise.
    """
    if history.ended is None:
        return
    explain_unusable(history, request_id)
    raise SagaStateError(
        f"saga {history.saga_id!r} ended {history.outcome} at seq {history.ended.seq}; there "
        "is nothing to resume"
    )


def seal_for_replay(history: SagaHistory) -> bool:
    """Seal an ended saga's history for a replay of its work; False if it never paused.

    A saga that ended after it asked for an approval may have a framework run paused in
    it, which its native resume continues: the run replays, and nothing is appended (the
    history refuses every append). A saga that never asked has nothing to resume.
    """
    ended = history.ended
    if ended is None or not history.awaiting:
        return False
    history.sealed = (
        f"saga {history.saga_id!r} ended {history.outcome} at seq {ended.seq}; a run resumed "
        "after its end replays the calls its journal holds and journals nothing"
    )
    return True


def replay_refusal(
    history: SagaHistory, call_id: str, tool_name: str, prior: CallState | None
) -> SagaStateError | ApprovalRejectedError:
    """Why a call in a replay of an ended saga (`seal_for_replay`) is not run: from the journal.

    The text is what the framework hands the model: the call failed, or never ran before
    the saga ended (`SagaStateError`). A call whose request was rejected is refused as in
    any run (`ApprovalRejectedError`, raised when the work returns): the framework's own
    "no" (LangGraph's resume value, the SDK's `state.reject`, PydanticAI's `ToolDenied`)
    never calls it.
    """
    assert history.ended is not None  # sealed histories are ended ones
    said = f"saga {history.saga_id!r} ended {history.outcome} at seq {history.ended.seq}"
    outcome = None if prior is None else prior.outcome
    if outcome is not None:
        failed = payload_of(outcome)
        error = failed.get("error")
        if isinstance(error, dict):
            how = f"failed at seq {outcome.seq} ({error.get('type')}: {error.get('message')})"
        else:
            how = f"did not run (FAILED {failed.get('kind')} at seq {outcome.seq})"
        return SagaStateError(
            f"{said}: call {call_id!r} of tool {tool_name!r} {how}; it is not run"
        )
    awaiting = history.asked.get(call_id)
    rejected = None if awaiting is None else history.rejected(awaiting.seq)
    if awaiting is not None and rejected is not None:
        decided = payload_of(rejected)
        by = decided.get("approver") or decided.get("source")
        return ApprovalRejectedError(
            f"{said}: call {call_id!r} of tool {tool_name!r} was not run: approval request "
            f"{payload_of(awaiting).get('request_id')} was rejected by {by!r}: "
            f"{decided.get('reason')}"
        )
    return SagaStateError(
        f"{said}, so call {call_id!r} of tool {tool_name!r} is not run: a run resumed after "
        "the end only replays the calls its journal holds. Start a new saga for new work"
    )
