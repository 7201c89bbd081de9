"""Editing a pending request: close it, and ask again for the same call with new input.

An approver who would approve the call with other arguments (a smaller amount, another
recipient) edits it. The edit is two journaled decisions: a new AWAITING_APPROVAL for the
same call id and tool with the new input and its own hash, and a REJECTED that closes the
old request, naming the editor and the new request. The saga is not compensated: it goes
on waiting, now for the edited request, which is approved like any other (four eyes and
the number of approvers carry over; the editor, who wrote the input, cannot approve it).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sagacity._history import SagaHistory
from sagacity._ids import WORKFLOW_START_CALL
from sagacity.approval._check import check_current, check_unused
from sagacity.approval._decide import refuse_ended
from sagacity.approval._lifecycle import ApprovalLifecycle
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import AppendConflictError, ApprovalInputError, JournalError
from sagacity.journal import JournalEntry, JsonValue, Phase

__all__ = ["edit_request"]

_EDIT_RETRIES = 8
"""How often an edit re-reads the saga after another writer appended first."""


def edit_request(
    lifecycle: ApprovalLifecycle,
    saga_id: str,
    *,
    editor: str,
    request_id: str,
    new_input: dict[str, JsonValue],
) -> ApprovalRequest:
    """Replace pending request `request_id` by one for `new_input`; return the new request.

    The new AWAITING_APPROVAL is appended only if the journal still ends where the edit
    read it: an approved call that started meanwhile wins, and the edit is refused.

    Raises:
        ApprovalNotFoundError: No such pending request.
        ApprovalRejectedError: It was rejected (or edited) already.
        ApprovalAlreadyUsedError: Its call started.
        SagaStateError: The saga ended.
        ApprovalInputError: The request is a workflow's gate: its input is the stage's.
    """
    for _ in range(_EDIT_RETRIES):
        history = lifecycle.history(saga_id)
        old = lifecycle.pending_in(history, request_id)
        refuse_gate(history, old)
        refuse_ended(history)
        check_unused(old, history)
        check_current(old, history)
        try:
            new = lifecycle.ask(
                history,
                tool_name=old.tool_name,
                call_id=old.call_id,
                input=new_input,
                reason=old.reason,
                started_by=old.started_by,
                approvers=old.approvers_required,
                replaces=old,
                edited_by=editor,
                request_id=uuid.uuid4().hex,
                expected_seq=history.last_seq,
            )
        except AppendConflictError:
            continue  # another writer appended: decide again on what it wrote
        _close(lifecycle, history, old, editor=editor, new=new)
        return new
    raise JournalError(
        f"saga {saga_id!r}: the edit of request {request_id} lost {_EDIT_RETRIES} races with "
        "other writers of the saga and was not recorded; edit again"
    )


def started_workflow(entries: Sequence[JournalEntry]) -> str | None:
    """The workflow whose run the saga is, as its journal says; None for another saga.

    A run's first entry is the INTENT of its start call, the call of the workflow's own
    tool: the journal says so whether or not the workflow is defined in this process.
    """
    first = entries[0] if entries else None
    if first is None or first.seq != 1 or first.phase is not Phase.INTENT:
        return None
    return first.tool_name if first.call_id == WORKFLOW_START_CALL else None


def refuse_gate(history: SagaHistory, request: ApprovalRequest) -> None:
    """Refuse to edit a workflow's gate, whose input the run computes for its stage.

    The run would never call the stage with another input: its call would be refused as
    changed. A gate's request is for the tool `<workflow>.<stage>` under the stage's name
    as call id, in a run of that workflow (`started_workflow`).
    """
    workflow = started_workflow(history.entries)
    if workflow is not None and request.tool_name == f"{workflow}.{request.call_id}":
        raise ApprovalInputError(
            f"saga {history.saga_id!r}: request {request.request_id} is the gate of workflow "
            f"{workflow!r} before stage {request.call_id!r}; a gate's input is the stage's "
            "own, computed by the run, so it cannot be edited: approve or reject it"
        )


def _close(
    lifecycle: ApprovalLifecycle,
    history: SagaHistory,
    old: ApprovalRequest,
    *,
    editor: str,
    new: ApprovalRequest,
) -> None:
    """Journal the old request's REJECTED: it can never be approved or run now.

    Unguarded: the new request already took the call id (a call checks the newest
    request of its id), so nothing can start under the old one in between.
    """
    history.append(
        lifecycle.journal,
        Phase.REJECTED,
        tool_name=old.tool_name,
        call_id=old.call_id,
        ref_seq=old.seq,
        payload={
            "request_id": old.request_id,
            "approver": editor,
            "reason": f"edited by {editor}",
            "edited_to": new.request_id,
        },
    )
