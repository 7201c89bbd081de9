"""The sweep: reminders, escalations and denials at their time, with no human to start them.

`Escalator(sagacity).sweep()` looks at every pending request and acts on what its journal
says is due (`ApprovalLifecycle.due`): REMINDED at the warning time, ESCALATED at the
expiry of a request that names a group, and at the final expiry the denial, through the
path a worker takes for an expired request (REJECTED with `source` `expiry`, then the
saga compensated). The store only says which sagas to read; what is due, and whether it
was done already, is read from the journal.

Each saga is acted on under its lease, with the journal read again once the lease is
held, and every entry appended only if the journal is as it was read: of two sweepers
(or a sweeper and a worker) racing in two processes, one acts and the other finds it
done, so a reminder goes out once per request and expiry. A saga another process holds
is left to the next sweep.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import TYPE_CHECKING

from sagacity import _telemetry
from sagacity._decisions import WORK, DecisionOutcome
from sagacity.approval import ApprovalRequest
from sagacity.errors import AppendConflictError, ApprovalError, SagaBusyError, SagacityError

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["Escalator", "SweepAction", "sweep_due"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepAction:
    """One thing a sweep did: a request reminded, escalated or denied."""

    saga_id: str
    """The saga of the request."""
    request_id: str
    """The request acted on."""
    action: str
    """`"reminded"`, `"escalated"` or `"denied"`."""
    seq: int | None
    """The seq of the entry journaled (REMINDED, ESCALATED or REJECTED)."""


class Escalator:
    """Acts at the time points of approval requests, with no human to start it.

    Run `sweep()` from anything that runs on a schedule: the worker runs it at every
    full look (`sagacity.worker`), `sagacity serve` in the background, and an
    application with neither from its own timer.

    Args:
        sagacity: The Sagacity whose pending requests are swept; its clock says what
            is due, and its hooks (`on_approval_reminder`) are told of each reminder.
    """

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity

    def sweep(self, *, deny: bool = True) -> list[SweepAction]:
        """Remind, escalate and deny the pending requests whose time came; return what was done.

        What is due, and whether it was done, is read from the journal (REMINDED,
        ESCALATED, REJECTED), never from a table of its own; each saga is acted on under
        its lease, so sweepers racing in several processes act once. A denial rejects
        the saga and compensates it as a worker would. With `deny` False, expired
        requests are left to a worker, which tells the paused framework.
        """
        return sweep_due(self.sagacity, self.sagacity.now(), deny=deny)


def sweep_due(
    sagacity: Sagacity, now: datetime.datetime, *, deny: bool = True
) -> list[SweepAction]:
    """Remind, escalate and deny what is due at `now`; return what was done, in order.

    With `deny` False, expired requests are left to a worker (`sagacity.worker`), which
    tells the paused framework. Requests paused by a framework (not plain code) are always
    left to it. A saga whose journal cannot be read, or that another process holds, is
    logged and left to the next sweep.
    """
    done: list[SweepAction] = []
    stored: dict[str, list[ApprovalRequest]] = {}
    for request in sagacity.approvals.pending():
        # A request that never expires has no time point: its saga's journal is not read.
        if request.expires_at is not None:
            stored.setdefault(request.saga_id, []).append(request)
    for saga_id in sorted(stored):
        try:
            done.extend(_sweep_saga(sagacity, saga_id, stored[saga_id], now, deny=deny))
        except SagaBusyError:
            continue  # its holder acts on it, or the next sweep does
        except AppendConflictError:
            continue  # a decision landed meanwhile: the next sweep reads it
        except SagacityError as error:
            _telemetry.logger.warning(
                "saga %r: the sweep of its due reminders and expiries failed: %s", saga_id, error
            )
    return done


def _sweep_saga(
    sagacity: Sagacity,
    saga_id: str,
    stored: list[ApprovalRequest],
    now: datetime.datetime,
    *,
    deny: bool,
) -> list[SweepAction]:
    approval = sagacity.approval
    history = approval.history(saga_id)
    due = []
    for each in stored:
        try:
            request = approval.verified(each, history)
        except ApprovalError:
            continue  # a stored copy the journal refuses has no time points (pending says why)
        what = approval.due(request, history, now)
        if what is not None:
            due.append((request, what))
    if not deny:  # a denial is the worker's: nothing to take the lease for
        due = [(r, what) for r, what in due if what != "deny"]
    if not due:
        return []
    done: list[SweepAction] = []
    denied: set[str] = set()
    with sagacity._leased(saga_id, wait=0) as keeper:
        history = keeper.hold(approval.history(saga_id))
        for request in approval.pending(saga_id, history=history):
            if request.problem is not None:
                continue
            what = approval.due(request, history, now)
            if what == "remind":
                entry = approval.remind(history, request)
                done.append(_did(request.saga_id, request.request_id, "reminded", entry.seq))
            elif what == "escalate":
                escalated = approval.escalate(history, request, now)
                if escalated is not None:
                    done.append(
                        _did(request.saga_id, request.request_id, "escalated", escalated.seq)
                    )
            elif what == "deny":
                denied.add(request.request_id)
    if denied and deny:
        done.extend(_deny(sagacity, saga_id, denied))
    return done


def _deny(sagacity: Sagacity, saga_id: str, expired: set[str]) -> list[SweepAction]:
    """Deny the expired request the saga waits on, as a worker would, and compensate it."""
    from sagacity._resume_decision import DecisionResume  # it imports the facade

    resume = DecisionResume(sagacity)
    history = sagacity.approval.history(saga_id)
    decision = resume.waiting(history)
    if (
        decision is None
        or decision.outcome is not DecisionOutcome.EXPIRED
        or decision.request_id not in expired
        or decision.resumer != WORK  # a framework's run is told by its worker
    ):
        return []
    if resume.resume(decision, None) is None:
        return []
    rejected = sagacity.approval.history(saga_id).rejected(
        history.awaiting[decision.request_id].seq
    )
    return [
        _did(saga_id, decision.request_id, "denied", None if rejected is None else rejected.seq)
    ]


def _did(saga_id: str, request_id: str, action: str, seq: int | None) -> SweepAction:
    return SweepAction(saga_id=saga_id, request_id=request_id, action=action, seq=seq)
