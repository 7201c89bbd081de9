"""The decorators that declare a tool's undo: `compensable`, `compensation`, `Reversibility`."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Callable
from typing import Any, TypeVar, overload

from sagacity.errors import ConfigurationError

__all__ = [
    "Retry",
    "Reversibility",
    "ToolDeclaration",
    "check_approvers",
    "compensable",
    "compensation",
    "declaration_of",
]

F = TypeVar("F", bound=Callable[..., Any])

_DECLARATION = "__sagacity_tool__"
_COMPENSATION = "__sagacity_compensation__"


class Reversibility(enum.Enum):
    """How far a tool's effect can be undone."""

    REVERSIBLE = "REVERSIBLE"
    """A perfect undo exists: the effect can be erased."""
    COMPENSATABLE = "COMPENSATABLE"
    """A correction exists (a refund, a follow-up mail); the default."""
    IRREVERSIBLE = "IRREVERSIBLE"
    """No undo exists: the call waits for a human's approval of its exact input."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Retry:
    """How often a failing call is tried again, and how long it waits in between."""

    retries: int
    """Attempts after the first."""
    retry_on: tuple[type[BaseException], ...]
    """The exceptions that are retried; any other fails the call at once."""
    backoff: float
    """Seconds before the first retry; doubled before each next one."""
    max_backoff: float
    """The longest wait between two attempts, in seconds."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt `attempt` (1 for the first)."""
        return float(min(self.backoff * 2 ** (attempt - 1), self.max_backoff))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolDeclaration:
    """What `compensable` recorded on a tool."""

    by: str | Callable[..., Any] | None
    """The compensation: a method or function name, or the callable itself."""
    reversibility: Reversibility
    """How far the effect can be undone."""
    name: str | None
    """The tool's name, if not its function's name."""
    retry: Retry | None = None
    """Its retry policy; None: a failure fails the call at once."""
    compensation_idempotent: bool = False
    """Whether its compensation is safe to run again with the same `ctx.call_id`: a
    compensation whose outcome is unknown (a crash, a timeout) is then run again by the
    next walk instead of being left in doubt for a human."""
    compensation_timeout: float | None = None
    """Seconds the walk waits for its compensation; None: no bound."""
    approvers: int = 1
    """How many different principals must approve an IRREVERSIBLE call before it runs."""
    reconcile: str | Callable[..., Any] | None = None
    """Asks the world whether a call in doubt took effect: a method or function name, or
    the callable itself (see `sagacity.Reconciled`); None: a human settles its doubts."""
    reconcile_compensation: str | Callable[..., Any] | None = None
    """The same for the tool's compensation in doubt."""
    reconcile_timeout: float = 30.0
    """Seconds a reconciler may take before its doubt is left to a human."""
    justification_required: bool = False
    """Whether each approval of an IRREVERSIBLE call must say why (`justification=`)."""
    approval: str | Callable[..., Any] | None = None
    """When an IRREVERSIBLE call needs a human: a rule such as `"amount > 1000"`, or a sync
    callable taking the call's input and returning True to ask; None: every call asks."""
    remind_before: datetime.timedelta | float | None = None
    """How long before a request expires a reminder goes out (a timedelta or seconds);
    None: no reminder."""
    escalate_to: str | None = None
    """The approver group a request that expires undecided escalates to; None: it is
    denied at expiry (the default)."""


@overload
def compensable(func: F, /) -> F: ...


@overload
def compensable(
    *,
    by: str | Callable[..., Any] | None = None,
    reversibility: Reversibility = Reversibility.COMPENSATABLE,
    name: str | None = None,
    retries: int = 0,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    backoff: float = 0.5,
    max_backoff: float = 30.0,
    compensation_idempotent: bool = False,
    compensation_timeout: float | None = None,
    approvers: int = 1,
    reconcile: str | Callable[..., Any] | None = None,
    reconcile_compensation: str | Callable[..., Any] | None = None,
    reconcile_timeout: float = 30.0,
    approval: str | Callable[..., Any] | None = None,
    justification_required: bool = False,
    remind_before: datetime.timedelta | float | None = None,
    escalate_to: str | None = None,
) -> Callable[[F], F]: ...


def compensable(
    func: F | None = None,
    /,
    *,
    by: str | Callable[..., Any] | None = None,
    reversibility: Reversibility = Reversibility.COMPENSATABLE,
    name: str | None = None,
    retries: int = 0,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    backoff: float = 0.5,
    max_backoff: float = 30.0,
    compensation_idempotent: bool = False,
    compensation_timeout: float | None = None,
    approvers: int = 1,
    reconcile: str | Callable[..., Any] | None = None,
    reconcile_compensation: str | Callable[..., Any] | None = None,
    reconcile_timeout: float = 30.0,
    approval: str | Callable[..., Any] | None = None,
    justification_required: bool = False,
    remind_before: datetime.timedelta | float | None = None,
    escalate_to: str | None = None,
) -> F | Callable[[F], F]:
    """Declare a function or method a tool with side effects, and how to undo them.

    Args:
        func: The tool, when used as a bare decorator.
        by: Its compensation: the name of a method of the same class (or, for a plain
            function, a function of the same module), or the callable itself. Required
            unless `reversibility` is IRREVERSIBLE; `Sagacity.wrap` checks it.
        reversibility: How far the effect can be undone.
        name: The tool's name as agents see it; defaults to the function's name.
        retries: How often a failed call is tried again before it fails the saga. Every
            attempt is journaled under the one call id with its attempt number.
        retry_on: The exception types that are retried (cancellations and timeouts never
            are: their outcome is unknown).
        backoff: Seconds before the first retry, doubled before each next one.
        max_backoff: The cap on the wait between two attempts, in seconds.
        compensation_idempotent: The compensation may run twice with the same
            `ctx.call_id` without harm (it hands that key to the API it calls). When a
            walk finds it started with no outcome journaled (the process died during it,
            or it timed out), the walk runs it again; otherwise it is left in doubt for
            a human (`Sagacity.resolve_compensation`).
        compensation_timeout: Seconds the walk waits for the compensation. Past them an
            async compensation is cancelled and a sync one is left running in its worker
            thread; either way it is journaled COMPENSATION_FAILED with its outcome
            unknown, listed in doubt, and the walk goes on. None: no bound.
        approvers: For an IRREVERSIBLE tool, how many different principals must approve
            a call's exact input before it runs (none of them the saga's starter). A
            whole number from 1; more than 1 on a tool that is not IRREVERSIBLE is a
            `ConfigurationError` at wrap time (it never waits for approval).
        reconcile: How to find out whether a call in doubt took effect: the name of a
            method of the same class (or a function of the same module), or the callable
            itself, taking one `ReconcileContext` and returning a `Reconciled` (sync or
            async). Asked before a human is, wherever a doubt is found (the end of a failed
            run, `compensate`, `resume_saga`); it must only read, never act. Checked at
            wrap time like `by`.
        reconcile_compensation: The same for the tool's compensation in doubt (it may be
            the same reconciler as `reconcile`: `ctx.subject` says which is asked about).
        reconcile_timeout: Seconds a reconciler may take; past them its doubt is left to a
            human, with the timeout journaled.
        approval: For an IRREVERSIBLE tool, when a call needs a human: a rule over its
            arguments such as `"amount > 1000 or payee != 'ACME'"` (see
            docs/approval.md#policy for the grammar), or a sync callable taking the call's
            input (a read-only mapping) and returning True to ask. Evaluated once, at the
            call; a call the rule lets through runs without a request, its INTENT recording
            the rule and a hash of the arguments it read. An error asks the human. None:
            every call asks. Checked at wrap time.
        justification_required: For an IRREVERSIBLE tool, every approval must give a
            justification (`Sagacity.approve(..., justification=)`); one without is refused
            and nothing is journaled. Recorded in each request, so another process's
            approval is held to it too.
        remind_before: For an IRREVERSIBLE tool, how long before a request expires a
            reminder goes out (`Sagacity(on_approval_reminder=)`, the webhook's
            `approval.reminder`), journaled as REMINDED: a timedelta or seconds, shorter
            than the request's time to live. None: no reminder. Checked at wrap time.
        escalate_to: For an IRREVERSIBLE tool, the approver group
            (`Sagacity(approver_groups=)`) a request that expires undecided escalates to,
            journaled as ESCALATED: from then on only that group's approvals count, until
            the group's own expiry. None: the request is denied at expiry and the saga
            compensated (the default). Checked at wrap time.

    The function is returned unchanged: the declaration only takes effect through
    `Sagacity.wrap`, so deleting that call removes sagacity.
    """
    retry = None
    if retries:
        retry = Retry(
            retries=retries,
            retry_on=retry_on if isinstance(retry_on, tuple) else (retry_on,),
            backoff=backoff,
            max_backoff=max_backoff,
        )
    declaration = ToolDeclaration(
        by=by,
        reversibility=reversibility,
        name=name,
        retry=retry,
        compensation_idempotent=compensation_idempotent,
        compensation_timeout=compensation_timeout,
        approvers=approvers,
        reconcile=reconcile,
        reconcile_compensation=reconcile_compensation,
        reconcile_timeout=reconcile_timeout,
        approval=approval,
        justification_required=justification_required,
        remind_before=remind_before,
        escalate_to=escalate_to,
    )

    def declare(target: F) -> F:
        setattr(target, _DECLARATION, declaration)
        return target

    return declare(func) if func is not None else declare


MAX_APPROVERS = 100
"""The most approvers a tool may require: more is a mistake, not a policy."""


def check_approvers(approvers: object, reversibility: Reversibility, name: str, where: str) -> None:
    """Refuse an `approvers` count that is not a whole number from 1, or that could not apply.

    Raises:
        ConfigurationError: It is not an int from 1 to 100, or it is above 1 on a tool
            that is not IRREVERSIBLE (such a tool never waits for approval).
    """
    if isinstance(approvers, bool) or not isinstance(approvers, int):
        raise ConfigurationError(
            f"{where}: tool {name!r}: approvers must be a whole number ≥ 1, not {approvers!r}"
        )
    if not 1 <= approvers <= MAX_APPROVERS:
        raise ConfigurationError(
            f"{where}: tool {name!r}: approvers must be from 1 to {MAX_APPROVERS}, not {approvers}"
        )
    if approvers > 1 and reversibility is not Reversibility.IRREVERSIBLE:
        raise ConfigurationError(
            f"{where}: tool {name!r} declares approvers={approvers} but is "
            f"{reversibility.name}; only IRREVERSIBLE calls wait for approval, so declare it "
            "IRREVERSIBLE or drop approvers"
        )


def compensation(func: F) -> F:
    """Mark a function as a compensation. A marker for readers: binding is by `by=`."""
    setattr(func, _COMPENSATION, True)
    return func


def declaration_of(func: Any) -> ToolDeclaration | None:
    """Return what `compensable` declared on `func` (or on a bound method's function)."""
    found = getattr(func, _DECLARATION, None)
    return found if isinstance(found, ToolDeclaration) else None
