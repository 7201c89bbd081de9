"""The decorators that declare a workflow: `workflow`, `stage`, `gate`, `check`.

Each only records a declaration on the class or function it decorates, so they stack in
any order (and with `compensable`). Nothing is checked here: `WorkflowRuntime` checks
every declaration when it is built, so a typo fails at start-up, not during a refund.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from sagacity.journal import JsonValue

__all__ = [
    "CheckContext",
    "CheckResult",
    "GateDeclaration",
    "StageCheck",
    "StageDeclaration",
    "WorkflowDeclaration",
    "check",
    "checks_of",
    "gate",
    "gate_of",
    "stage",
    "stage_of",
    "workflow",
    "workflow_of",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_WORKFLOW = "__sagacity_workflow__"
_STAGE = "__sagacity_stage__"
_GATE = "__sagacity_gate__"
_CHECKS = "__sagacity_checks__"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowDeclaration:
    """What `workflow` recorded on a class."""

    name: str
    """The workflow's name: unique in a runtime; the prefix of its stages' tool names."""
    description: str
    """Shown to approvers beside its gates."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StageDeclaration:
    """What `stage` recorded on a method."""

    order: int
    """Stages run in ascending order; unique within the workflow, gaps allowed."""
    name: str | None
    """The stage's name in the journal and the approval page; None: the method's name."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GateDeclaration:
    """What `gate` recorded on a stage."""

    approval_required: bool
    """Whether the run pauses for a human before the stage; False declares the gate off."""
    timeout_seconds: float
    """Seconds the gate waits for a decision before the run fails; 0 waits forever."""
    reason: str
    """Shown to the approver and journaled with the request."""
    remind_before: datetime.timedelta | float | None = None
    """How long before the timeout a reminder goes out; None: no reminder."""
    escalate_to: str | None = None
    """The approver group the gate escalates to at its timeout; None: the run fails then."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckResult:
    """What a `StageCheck` found: the stage may run, or it may not and why."""

    passed: bool
    """Whether the stage may run."""
    reason: str | None = None
    """Why it may not; journaled with the refusal."""

    @classmethod
    def ok(cls) -> CheckResult:
        """The stage may run."""
        return cls(passed=True)

    @classmethod
    def fail(cls, reason: str) -> CheckResult:
        """The stage may not run, for `reason`: the run fails and compensates."""
        return cls(passed=False, reason=reason)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckContext:
    """What a `StageCheck` is shown before its stage runs."""

    run_id: str
    """The run (its saga id)."""
    workflow_name: str
    """The workflow."""
    stage_name: str
    """The stage about to run."""
    value: Any
    """The value the stage will receive, rebuilt as the stage's parameter is annotated."""
    input: dict[str, JsonValue]
    """The stage's journaled input: `{first parameter name: value as JSON}`."""
    outputs: Mapping[str, JsonValue]
    """The journaled outputs of the stages that ran, by stage name, in order."""
    workflow: Any
    """The workflow object: the services it was built with."""


class StageCheck(abc.ABC):
    """A pre-flight check run before a stage: subclass it and implement `check`.

    Checks are given to `check` as classes (built with no arguments when the runtime is
    built) or as instances (built with whatever services they need).
    """

    @abc.abstractmethod
    def check(self, ctx: CheckContext) -> CheckResult | Awaitable[CheckResult]:
        """Return `CheckResult.ok()`, or `CheckResult.fail(reason)` to stop the run.

        May be `async def`; raising counts as a failure (the run fails closed).
        """


def workflow(name: str, *, description: str = "") -> Callable[[type[T]], type[T]]:
    """Declare a class a workflow called `name`; its `stage` methods are its stages."""

    def declare(cls: type[T]) -> type[T]:
        setattr(cls, _WORKFLOW, WorkflowDeclaration(name=name, description=description))
        return cls

    return declare


def stage(order: int, name: str | None = None) -> Callable[[F], F]:
    """Declare a method a stage, run in ascending `order`.

    It receives the previous stage's return value as its first argument (the first
    stage: the run's input). Add `compensable` to declare its undo.
    """

    def declare(func: F) -> F:
        setattr(func, _STAGE, StageDeclaration(order=order, name=name))
        return func

    return declare


def gate(
    *,
    approval_required: bool = True,
    timeout_seconds: float = 0,
    reason: str = "",
    remind_before: datetime.timedelta | float | None = None,
    escalate_to: str | None = None,
) -> Callable[[F], F]:
    """Pause the run before this stage until a human approves the exact value it receives.

    Args:
        approval_required: Whether the gate is on.
        timeout_seconds: Past this many seconds without a decision, `expire_gates`
            fails the run and compensates it; 0 waits forever.
        reason: Shown to the approver.
        remind_before: How long before the timeout a reminder goes out, as for a tool
            (`compensable(remind_before=)`); needs a timeout.
        escalate_to: The approver group the gate escalates to at its timeout, as for a
            tool (`compensable(escalate_to=)`); the run fails only at the group's expiry.
    """

    def declare(func: F) -> F:
        setattr(
            func,
            _GATE,
            GateDeclaration(
                approval_required=approval_required,
                timeout_seconds=timeout_seconds,
                reason=reason,
                remind_before=remind_before,
                escalate_to=escalate_to,
            ),
        )
        return func

    return declare


def check(*checks: type[StageCheck] | StageCheck) -> Callable[[F], F]:
    """Run these checks, in the order written, before the stage; the first failure stops it.

    Several `check` decorators on one stage run top to bottom.
    """

    def declare(func: F) -> F:
        earlier: tuple[object, ...] = getattr(func, _CHECKS, ())
        setattr(func, _CHECKS, (*checks, *earlier))  # decorators apply bottom-up
        return func

    return declare


def workflow_of(cls: object) -> WorkflowDeclaration | None:
    """What `workflow` declared on a class."""
    found = getattr(cls, _WORKFLOW, None)
    return found if isinstance(found, WorkflowDeclaration) else None


def stage_of(func: object) -> StageDeclaration | None:
    """What `stage` declared on a function."""
    found = getattr(func, _STAGE, None)
    return found if isinstance(found, StageDeclaration) else None


def gate_of(func: object) -> GateDeclaration | None:
    """What `gate` declared on a function."""
    found = getattr(func, _GATE, None)
    return found if isinstance(found, GateDeclaration) else None


def checks_of(func: object) -> tuple[object, ...]:
    """What `check` declared on a function, in the order the checks run."""
    found = getattr(func, _CHECKS, ())
    return found if isinstance(found, tuple) else ()
