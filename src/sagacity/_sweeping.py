"""The sweep: reminders, escalations and denials at their time, with no human to start them.

`Escalator(sagacity).sweep()` looks at every pending request and acts on what its journal
says is due (`ApprovalLifecycle.due`): REMINDED at the warning time, ESCALATED at the
expiry of a request that names a group, and at the final expiry the denial, through the
path a worker takes for an expired request (REJECTED with `source` `expiry`, then the
saga compensated). The store only says which sagas to read; what is due, and whether it
was done already, is read from the journal.

A pass costs what is due, not what is pending: each request's journal is read once, and
what it says (`ApprovalLifecycle.next_check`, when something may next be due) is kept in
this process with the stored row it was read for. The journal is read again only at that
time, or when the row changes; nothing kept says anything the journal does not, and a
new process reads each journal once. So with thousands of requests waiting, a pass reads
the store's rows and the journals of the requests whose time came.

Each saga is acted on under its lease, with the journal read again once the lease is
held, and every entry appended only if the journal is as it was read: of two sweepers
(or a sweeper and a worker) racing in two processes, one acts and the other finds it
done, so a reminder goes out once per request and expiry. A saga another process holds
is left to the next sweep.

`on_approval_reminder` is told after the saga's lease is released, on a thread of the
sweep's own: the sweep waits for it a bounded time (`hook_timeout`), and a hook that
raises is logged, one that hangs is logged and no longer waited for, so neither holds
the saga nor stops the sweep.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING

from sagacity import _telemetry
from sagacity._decisions import WORK, DecisionOutcome
from sagacity.approval import ApprovalRequest
from sagacity.approval._policy import ApprovalHook, notify
from sagacity.errors import (
    AppendConflictError,
    ApprovalError,
    ConfigurationError,
    SagaBusyError,
    SagacityError,
)

if TYPE_CHECKING:
    from sagacity.approval._lifecycle import ApprovalLifecycle
    from sagacity.saga import Sagacity

__all__ = ["HOOK_TIMEOUT", "Escalator", "SweepAction", "sweep_due"]

HOOK_TIMEOUT = 10.0
"""Seconds a sweep waits for `on_approval_reminder` to return before going on without it."""

_IDLE = 30.0
"""Seconds the reminder hook's thread waits for work before it ends (it starts again)."""

_QUEUED = 10_000
"""The most reminders waiting for a hook; past it, one is logged and not told."""


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
        hook_timeout: Seconds a sweep waits for `on_approval_reminder` to return; a hook
            still running then is logged and left to finish on its own thread.

    Raises:
        ConfigurationError: `hook_timeout` is not a positive, finite number of seconds.
    """

    def __init__(self, sagacity: Sagacity, *, hook_timeout: float = HOOK_TIMEOUT) -> None:
        if (
            not isinstance(hook_timeout, int | float)
            or isinstance(hook_timeout, bool)
            or not math.isfinite(hook_timeout)
            or hook_timeout <= 0
        ):
            raise ConfigurationError(
                "Escalator: hook_timeout must be a positive number of seconds, not "
                f"{hook_timeout!r}"
            )
        self.sagacity = sagacity
        self.hook_timeout = float(hook_timeout)

    def sweep(self, *, deny: bool = True) -> list[SweepAction]:
        """Remind, escalate and deny the pending requests whose time came; return what was done.

        What is due, and whether it was done, is read from the journal (REMINDED,
        ESCALATED, REJECTED), never from a table of its own; each saga is acted on under
        its lease, so sweepers racing in several processes act once. A denial rejects
        the saga and compensates it as a worker would. With `deny` False, expired
        requests are left to a worker, which tells the paused framework.
        """
        return sweep_due(
            self.sagacity, self.sagacity.now(), deny=deny, hook_timeout=self.hook_timeout
        )


class _ReminderHooks:
    """Tells `on_approval_reminder` of reminders on a thread of its own, one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[ApprovalHook, ApprovalRequest, threading.Event]] = (
            queue.Queue(_QUEUED)
        )
        self._thread: threading.Thread | None = None
        self._since: float | None = None
        """When the call under way began (`time.monotonic()`); None between calls."""

    def tell(
        self, hook: ApprovalHook | None, requests: list[ApprovalRequest], timeout: float
    ) -> None:
        """Queue a call of `hook` per request; wait for them up to `timeout` seconds."""
        if hook is None or not requests:
            return
        told: list[threading.Event] = []
        with self._lock:
            for request in requests:
                done = threading.Event()
                try:
                    self._queue.put_nowait((hook, request, done))
                except queue.Full:
                    _telemetry.logger.error(
                        "saga %r: request %s was reminded (REMINDED is journaled), but "
                        "%d reminders already wait for the on_approval_reminder hook; "
                        "this one is not told",
                        request.saga_id,
                        request.request_id,
                        _QUEUED,
                    )
                    continue
                told.append(done)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sagacity-reminder-hook", daemon=True
                )
                self._thread.start()
        since = self._since
        if since is not None and time.monotonic() - since > timeout:
            _telemetry.logger.warning(
                "the on_approval_reminder hook has been running for %.0f s; %d reminders "
                "wait for it, and the sweep goes on without waiting",
                time.monotonic() - since,
                self._queue.qsize(),
            )
            return
        deadline = time.monotonic() + timeout
        for done in told:
            if not done.wait(max(0.0, deadline - time.monotonic())):
                _telemetry.logger.warning(
                    "the on_approval_reminder hook did not return within %.1f s; the sweep "
                    "goes on, and the hook is told of the rest when it returns",
                    timeout,
                )
                return

    def _run(self) -> None:
        while True:
            try:
                hook, request, done = self._queue.get(timeout=_IDLE)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            self._since = time.monotonic()
            try:
                notify(hook, request, what="on_approval_reminder")
            finally:
                self._since = None
                done.set()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Read:
    """What a request's journal said when last read: when to read it again."""

    stored: ApprovalRequest
    """The store's row it was read for: a changed row is read again."""
    next_check: datetime.datetime | None
    """When something may be due; None for never (while the row stands)."""


class _Sweeps:
    """What the sweeps of one Sagacity in this process keep between passes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read: dict[tuple[bool, str], _Read] = {}
        """By (`deny`, request id): what its journal said at the last read."""
        self.declared: object = None
        """The declarations that reading depended on (see `_declared`)."""
        self.hooks = _ReminderHooks()


_SWEEPS: weakref.WeakKeyDictionary[ApprovalLifecycle, _Sweeps] = weakref.WeakKeyDictionary()
_SWEEPS_LOCK = threading.Lock()


def _sweeps_of(approval: ApprovalLifecycle) -> _Sweeps:
    with _SWEEPS_LOCK:
        found = _SWEEPS.get(approval)
        if found is None:
            found = _SWEEPS[approval] = _Sweeps()
        return found


def _declared(approval: ApprovalLifecycle) -> object:
    """What a reading depends on besides the journal: wrapped tools' declarations, groups."""
    return (
        frozenset(approval.declared_approvers.items()),
        frozenset(approval.escalations.items()),
        frozenset(approval.policy.groups.items()),
        id(approval.policy),
    )


def sweep_due(
    sagacity: Sagacity,
    now: datetime.datetime,
    *,
    deny: bool = True,
    hook_timeout: float = HOOK_TIMEOUT,
) -> list[SweepAction]:
    """Remind, escalate and deny what is due at `now`; return what was done, in order.

    With `deny` False, expired requests are left to a worker (`sagacity.worker`), which
    tells the paused framework. Requests paused by a framework (not plain code) are always
    left to it. A saga whose journal cannot be read, or that another process holds, is
    logged and left to the next sweep. Only the journals of requests whose next check
    came (or that this process has not read yet) are read.
    """
    if now.utcoffset() is None:
        # The clock passed its check when the Sagacity was built, then changed: comparing
        # its time with the journal's would raise a TypeError for every saga.
        raise ConfigurationError(
            f"clock returned {now!r}; it must return a timezone-aware datetime, such as "
            "datetime.datetime.now(datetime.UTC)"
        )
    sweeps = _sweeps_of(sagacity.approval)
    rows = sagacity.approvals.pending()
    stored: dict[str, list[ApprovalRequest]] = {}
    with sweeps.lock:
        declared = _declared(sagacity.approval)
        if declared != sweeps.declared:  # a tool wrapped since: read everything again
            sweeps.read.clear()
            sweeps.declared = declared
        seen = set()
        for request in rows:
            # A request that never expires has no time point: its saga's journal is not read.
            if request.expires_at is None:
                continue
            key = (deny, request.request_id)
            seen.add(key)
            known = sweeps.read.get(key)
            if (
                known is not None
                and known.stored == request
                and (known.next_check is None or now < known.next_check)
            ):
                continue
            stored.setdefault(request.saga_id, []).append(request)
        for key in [k for k in sweeps.read if k[0] == deny and k not in seen]:
            del sweeps.read[key]  # consumed: its row is gone
    done: list[SweepAction] = []
    for saga_id in sorted(stored):
        try:
            done.extend(
                _sweep_saga(
                    sagacity, sweeps, saga_id, stored[saga_id], now, deny=deny, timeout=hook_timeout
                )
            )
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
    sweeps: _Sweeps,
    saga_id: str,
    stored: list[ApprovalRequest],
    now: datetime.datetime,
    *,
    deny: bool,
    timeout: float,
) -> list[SweepAction]:
    approval = sagacity.approval
    history = approval.history(saga_id)
    due = []
    later: dict[str, _Read] = {}
    for each in stored:
        try:
            request = approval.verified(each, history)
        except ApprovalError:
            # A stored copy the journal refuses has no time points (pending says why).
            later[each.request_id] = _Read(stored=each, next_check=None)
            continue
        what = approval.due(request, history, now)
        if what is None or (what == "deny" and not deny):
            # Nothing for this sweep now: read again when something may be (an expired
            # request left to a worker: when its row changes, or goes).
            check = approval.next_check(request, history, now)
            later[each.request_id] = _Read(
                stored=each, next_check=None if check is not None and check <= now else check
            )
        else:
            due.append((request, what))
    with sweeps.lock:
        for request_id, read in later.items():
            sweeps.read[(deny, request_id)] = read
    if not due:
        return []
    done: list[SweepAction] = []
    denied: set[str] = set()
    reminded: list[ApprovalRequest] = []
    try:
        with sagacity._leased(saga_id, wait=0) as keeper:
            history = keeper.hold(approval.history(saga_id))
            for request in approval.pending(saga_id, history=history):
                if request.problem is not None:
                    continue
                what = approval.due(request, history, now)
                if what == "remind":
                    entry = approval.remind(history, request)
                    reminded.append(request)
                    done.append(_did(request.saga_id, request.request_id, "reminded", entry.seq))
                elif what == "escalate":
                    escalated = approval.escalate(history, request, now)
                    if escalated is not None:
                        done.append(
                            _did(request.saga_id, request.request_id, "escalated", escalated.seq)
                        )
                elif what == "deny":
                    denied.add(request.request_id)
    finally:
        # Told once the lease is released: each of these REMINDED entries is committed,
        # even when a later append of this saga lost a race.
        sweeps.hooks.tell(approval.on_reminder, reminded, timeout)
    if denied and deny:
        actions, framework = _deny(sagacity, saga_id, denied)
        done.extend(actions)
        if framework is not None:
            # A framework's paused run is denied by its worker: nothing to read again
            # until its row changes or goes.
            stored_row = next((r for r in stored if r.request_id == framework), None)
            if stored_row is not None:
                with sweeps.lock:
                    sweeps.read[(deny, framework)] = _Read(stored=stored_row, next_check=None)
    return done


def _deny(
    sagacity: Sagacity, saga_id: str, expired: set[str]
) -> tuple[list[SweepAction], str | None]:
    """Deny the expired request the saga waits on, as a worker would, and compensate it.

    Returns what was done, and the id of an expired request left to its framework's
    worker (None when there is none).
    """
    from sagacity._resume_decision import DecisionResume  # it imports the facade

    resume = DecisionResume(sagacity)
    history = sagacity.approval.history(saga_id)
    decision = resume.waiting(history)
    if (
        decision is None
        or decision.outcome is not DecisionOutcome.EXPIRED
        or decision.request_id not in expired
    ):
        return [], None
    if decision.resumer != WORK:  # a framework's run is told by its worker
        return [], decision.request_id
    if resume.resume(decision, None) is None:
        return [], None
    rejected = sagacity.approval.history(saga_id).rejected(
        history.awaiting[decision.request_id].seq
    )
    return [
        _did(saga_id, decision.request_id, "denied", None if rejected is None else rejected.seq)
    ], None


def _did(saga_id: str, request_id: str, action: str, seq: int | None) -> SweepAction:
    return SweepAction(saga_id=saga_id, request_id=request_id, action=action, seq=seq)
