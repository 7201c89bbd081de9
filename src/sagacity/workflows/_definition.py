"""A workflow's declarations, checked, and its stages made into journaled tools.

A run is a saga; each stage is a `SagaTool` named `<workflow>.<stage>` whose call id is
the stage's name, so a run that is resumed finds its stages in the journal and replays
the ones that ran. The run's start is journaled as a call of a tool named after the
workflow, whose input is the run's input: a run killed before its first stage finished
can be continued from the journal alone.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import re
import typing
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from sagacity._ids import WORKFLOW_START_CALL
from sagacity.annotations import Reversibility, ToolDeclaration
from sagacity.approval._escalation import gate_escalation
from sagacity.errors import ConfigurationError
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool
from sagacity.workflows._declare import (
    GateDeclaration,
    StageCheck,
    checks_of,
    gate_of,
    stage_of,
    workflow_of,
)
from sagacity.workflows._stage_tools import (
    PlannedTool,
    journaled_tool,
    nothing_to_undo,
    stage_tool,
)

__all__ = [
    "MAX_GATE_TIMEOUT_SECONDS",
    "START_CALL",
    "PlannedWorkflow",
    "StageDefinition",
    "WorkflowDefinition",
    "define",
    "plan",
    "register",
]

START_CALL = WORKFLOW_START_CALL
"""The call id of a run's start: the call of the workflow's own tool, with the input."""

_OWNERS: weakref.WeakKeyDictionary[Sagacity, dict[str, type]] = weakref.WeakKeyDictionary()
"""The class of each workflow name, per Sagacity: a Sagacity holds one compensation per
stage, so a runtime built again for a workflow must be of the same class."""

MAX_GATE_TIMEOUT_SECONDS = 3660 * 24 * 3600
"""The longest a gate may wait (ten years): its expiry must stay a date that can be
computed, journaled and shown (a timeout past year 9999 made every read of the run fail)."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,48}")
"""Workflow and stage names: `<workflow>.<stage>` must be a tool name every framework takes."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StageDefinition:
    """One stage of a workflow, its declarations checked."""

    name: str
    """Its name: in the journal (its call id), the approval page and the routes."""
    order: int
    """Its place: stages run in ascending order."""
    tool: SagaTool
    """The journaled tool that runs it."""
    parameter: str
    """The name of the parameter that receives the previous stage's output."""
    annotation: Any
    """That parameter's type hint: the journaled value is rebuilt by it."""
    gate: GateDeclaration | None
    """Its gate, when the run pauses before it; None: no gate (or one declared off)."""
    checks: tuple[StageCheck, ...]
    """Its pre-flight checks, in the order they run."""

    @property
    def call_id(self) -> str:
        """The stage's call id in the run's journal."""
        return self.name

    @property
    def waits_for_approval(self) -> bool:
        """Whether the stage waits for a human: a gate, or an IRREVERSIBLE stage."""
        return self.tool.approval_reason is not None or (
            self.tool.reversibility is Reversibility.IRREVERSIBLE
        )

    @property
    def timeout_seconds(self) -> float:
        """Seconds its gate waits for a decision; 0 for ever."""
        return 0 if self.gate is None else self.gate.timeout_seconds


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowDefinition:
    """A workflow as the runtime runs it."""

    name: str
    """The workflow's name."""
    description: str
    """Shown to approvers."""
    instance: object
    """The workflow object whose stages run."""
    stages: tuple[StageDefinition, ...]
    """Its stages, in the order they run."""
    start: SagaTool
    """The tool whose call journals a run's start and input."""

    def stage(self, name: str) -> StageDefinition:
        """The stage called `name`.

        Raises:
            ConfigurationError: The workflow has no such stage.
        """
        for declared in self.stages:
            if declared.name == name:
                return declared
        raise ConfigurationError(
            f"workflow {self.name!r} has no stage {name!r}; its stages are "
            f"{[s.name for s in self.stages]}"
        )

    @property
    def stage_names(self) -> list[str]:
        """Its stages' names, in the order they run: what a run's start records."""
        return [s.name for s in self.stages]

    @property
    def start_result(self) -> Any:
        """What a run's start returns, and its EXECUTED entry records: the stages and more."""
        return self.start.func(None)

    @property
    def is_async(self) -> bool:
        """Whether a stage or a check is async: the run is then driven by an event loop."""
        return any(
            s.tool.is_async or any(inspect.iscoroutinefunction(c.check) for c in s.checks)
            for s in self.stages
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PlannedWorkflow:
    """A workflow whose every declaration was checked, nothing of it registered yet."""

    definition: WorkflowDefinition
    """The definition the runtime runs, once registered."""
    owner: type
    """The workflow's class: the one class that workflow name stands for on the Sagacity."""
    tools: tuple[PlannedTool, ...]
    """Its start's and stages' tools, to register."""


def define(sagacity: Sagacity, source: object) -> WorkflowDefinition:
    """Check a `workflow` class (or an object of one), then register its stages' tools.

    All or nothing: a wrong declaration raises before anything is registered.

    Raises:
        ConfigurationError: A declaration is wrong: see `WorkflowRuntime`.
    """
    (definition,) = register(sagacity, [plan(sagacity, source)])
    return definition


def plan(sagacity: Sagacity, source: object) -> PlannedWorkflow:
    """Check a `workflow` class (or an object of one) and make its stages into tools.

    Registers nothing on `sagacity` (see `register`): a declaration refused leaves the
    `Sagacity` as it was, so the corrected declaration can be registered after.

    Raises:
        ConfigurationError: A declaration is wrong: see `WorkflowRuntime`.
    """
    if isinstance(source, type):
        cls = source
        if workflow_of(cls) is None:
            raise ConfigurationError(f"{cls.__qualname__} is not declared with @workflow(...)")
        try:
            instance = cls()
        except TypeError as error:
            raise ConfigurationError(
                f"workflow class {cls.__qualname__} cannot be built without arguments "
                f"({error}); pass an instance built with its services instead"
            ) from error
    else:
        cls, instance = type(source), source
    declaration = workflow_of(cls)
    if declaration is None:
        raise ConfigurationError(
            f"{cls.__qualname__} is not declared with @workflow(...); pass workflow classes "
            "or their instances"
        )
    name = declaration.name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"workflow {_shown(name)} ({cls.__qualname__}): a workflow name is 1 to 48 "
            "letters, digits, '_' or '-'"
        )
    problem = _text_problem(declaration.description)
    if problem is not None:
        raise ConfigurationError(
            f"workflow {name!r} ({cls.__qualname__}): its description {problem}; it is shown "
            "to the approvers of its gates"
        )
    where = f"workflow {name!r} ({cls.__qualname__})"
    owner = _OWNERS.get(sagacity, {}).get(name, cls)
    if owner is not cls:
        raise ConfigurationError(
            f"two workflows are named {name!r} on this Sagacity ({owner.__qualname__} "
            f"and {cls.__qualname__}); give each workflow its own name"
        )
    planned = _stages(sagacity, cls, instance, name, where)
    stages = [stage for stage, _ in planned]
    timeouts = {s.name: s.timeout_seconds for s in stages if s.timeout_seconds}
    start_call = _start_function(name, [s.name for s in stages], timeouts)
    start_call.__doc__ = declaration.description or f"A run of workflow {name!r}."
    start_call.__sagacity_tool__ = ToolDeclaration(  # type: ignore[attr-defined]
        by=nothing_to_undo,
        reversibility=Reversibility.REVERSIBLE,
        name=name,
        compensation_idempotent=True,  # an undo that does nothing is never in doubt
    )
    start = journaled_tool(sagacity, start_call, None, where, is_stage=False)
    return PlannedWorkflow(
        definition=WorkflowDefinition(
            name=name,
            description=declaration.description,
            instance=instance,
            stages=tuple(stages),
            start=start.tool,
        ),
        owner=cls,
        tools=(start, *(tool for _, tool in planned)),
    )


def register(sagacity: Sagacity, planned: Sequence[PlannedWorkflow]) -> list[WorkflowDefinition]:
    """Register checked workflows on `sagacity`: their stages' compensations, gates and names.

    The approval lifecycle checks every tool's escalation before it records any; it is
    the only step that can still refuse, and it comes first, so a refusal registers
    nothing. Everything after it was checked by `plan`.

    Raises:
        ConfigurationError: A stage's `compensable(remind_before=, escalate_to=)` cannot
            apply on this `Sagacity`.
    """
    tools = [planned_tool for workflow in planned for planned_tool in workflow.tools]
    # As `wrap` does: `approvers=N` and a stage's own escalation hold for the stage.
    sagacity.approval.declare([planned_tool.tool for planned_tool in tools])
    for planned_tool in tools:
        if planned_tool.is_stage:
            sagacity.approval.declare_gate(
                planned_tool.tool.name, planned_tool.gate, where=planned_tool.where
            )
        declared = planned_tool.declared
        if declared.compensation is not None:
            sagacity._registry.register(declared.compensation)
        sagacity._registry.reserve(declared.name, planned_tool.where)
        for reconciler in declared.reconcilers:  # asked about the stage's doubts, as for a tool
            sagacity._reconciling.registry.register(reconciler)
    owners = _OWNERS.setdefault(sagacity, {})
    for workflow in planned:
        owners[workflow.definition.name] = workflow.owner
    return [workflow.definition for workflow in planned]


def _start_function(name: str, stages: list[str], timeouts: dict[str, float]) -> Callable[..., Any]:
    # The gates' timeouts are journaled with the run's start: whoever reads the journal
    # (the CLI, an inbox without the workflow) shows the gate's real expiry.
    result: dict[str, Any] = {"workflow": name, "stages": stages}
    if timeouts:
        result["gate_timeouts"] = timeouts

    def start(input: object) -> dict[str, Any]:
        return dict(result)

    return start


def _stages(
    sagacity: Sagacity, cls: type, instance: object, name: str, where: str
) -> list[tuple[StageDefinition, PlannedTool]]:
    found: list[tuple[int, str, Callable[..., Any]]] = []
    for attribute in sorted(dir(cls)):
        func = inspect.getattr_static(cls, attribute, None)
        if isinstance(func, staticmethod | classmethod):
            func = func.__func__
        declared = stage_of(func)
        if declared is None:
            if gate_of(func) is not None or checks_of(func):
                what = "@gate" if gate_of(func) is not None else "@check"
                raise ConfigurationError(
                    f"{where}: {attribute} has {what} but is not a @stage; gates and checks "
                    "guard stages: add @stage(order=...) or move the decorator"
                )
            continue
        assert callable(func)
        order = declared.order
        if isinstance(order, bool) or not isinstance(order, int):
            raise ConfigurationError(
                f"{where}: stage {attribute}: order must be a whole number, not {_shown(order)}"
            )
        # Only None means "the method's name": an empty name given is a mistake, not a default.
        stage_name = attribute if declared.name is None else declared.name
        if not isinstance(stage_name, str) or not _NAME.fullmatch(stage_name):
            raise ConfigurationError(
                f"{where}: stage name {_shown(stage_name)} must be 1 to 48 letters, digits, "
                "'_' or '-'"
            )
        if stage_name == START_CALL:
            raise ConfigurationError(
                f"{where}: a stage cannot be named {START_CALL!r}: that is the call id of the "
                "run's start in its journal; give the stage another name"
            )
        found.append((order, stage_name, func))
    if not found:
        raise ConfigurationError(f"{where} has no @stage methods")
    found.sort(key=lambda item: item[0])
    for (first_order, first, _), (order, second, _) in itertools.pairwise(found):
        if first_order == order:
            raise ConfigurationError(
                f"{where}: stages {first!r} and {second!r} both have order {_shown(order)}; "
                "give each stage its own order"
            )
    names = [stage_name for _, stage_name, _ in found]
    for stage_name in names:
        if names.count(stage_name) > 1:
            raise ConfigurationError(f"{where}: two stages are named {stage_name!r}")
    return [
        _stage(sagacity, instance, name, order, stage_name, func, where)
        for order, stage_name, func in found
    ]


def _stage(
    sagacity: Sagacity,
    instance: object,
    workflow_name: str,
    order: int,
    name: str,
    func: Callable[..., Any],
    where: str,
) -> tuple[StageDefinition, PlannedTool]:
    here = f"{where}: stage {name!r}"
    method = getattr(instance, func.__name__)
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise ConfigurationError(
            f"{here} is a generator; a stage returns its output, which the next stage receives"
        )
    parameter = _first_parameter(method, here, first=order == _first_order(instance))
    try:
        hints = typing.get_type_hints(func)
    except Exception as error:
        raise ConfigurationError(
            f"{here}: its annotations cannot be resolved ({error}); the journaled value is "
            "rebuilt by them"
        ) from error
    gate = _gate(gate_of(func), here)
    checks = tuple(_check(c, here) for c in checks_of(func))
    tool_name = f"{workflow_name}.{name}"
    reason = None
    if gate is not None:
        reason = gate.reason or f"workflow {workflow_name!r} waits at the gate before {name!r}"
    if gate is not None:  # checked here: registering must not refuse half-way
        gate_escalation(
            tool_name,
            gate.remind_before,
            gate.escalate_to,
            timeout_seconds=gate.timeout_seconds,
            groups=sagacity.approval.policy.groups,
            where=here,
        )
    planned = stage_tool(sagacity, instance, method, tool_name, reason, here, gate)
    definition = StageDefinition(
        name=name,
        order=order,
        tool=planned.tool,
        parameter=parameter,
        annotation=hints.get(parameter, Any),
        gate=gate,
        checks=checks,
    )
    return definition, planned


def _first_order(instance: object) -> int:
    orders = []
    for attribute in dir(type(instance)):
        declared = stage_of(inspect.getattr_static(type(instance), attribute, None))
        if declared is not None:
            orders.append(declared.order)
    return min(orders)


def _first_parameter(method: Callable[..., Any], here: str, *, first: bool) -> str:
    """The parameter that receives the previous output; every other one must have a default."""
    what = "the run's input" if first else "the previous stage's output"
    try:
        parameters = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError) as error:
        raise ConfigurationError(f"{here} has no readable signature") from error
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in positional:
        raise ConfigurationError(
            f"{here} cannot take {what}: its first parameter receives it; add one, as in "
            "`def stage(self, value): ...`"
        )
    for parameter in parameters[1:]:
        if parameter.default is inspect.Parameter.empty and parameter.kind in (
            *positional,
            inspect.Parameter.KEYWORD_ONLY,
        ):
            raise ConfigurationError(
                f"{here} takes {what} in {parameters[0].name!r} and nothing else without a "
                f"default, but {parameter.name!r} has none"
            )
    return parameters[0].name


def _gate(declared: GateDeclaration | None, here: str) -> GateDeclaration | None:
    if declared is None:
        return None
    timeout: object = declared.timeout_seconds
    # `0 <= t <= most` also refuses NaN and infinities, and compares a huge int exactly.
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 <= timeout <= MAX_GATE_TIMEOUT_SECONDS
    ):
        raise ConfigurationError(
            f"{here}: gate timeout_seconds must be a number of seconds from 0 (no timeout) "
            f"to {MAX_GATE_TIMEOUT_SECONDS} (ten years), not {_shown(timeout)}"
        )
    problem = _text_problem(declared.reason)
    if problem is not None:  # else every run would fail at the gate, journaling its request
        raise ConfigurationError(f"{here}: gate reason {problem}; it is journaled with the gate")
    if not isinstance(declared.approval_required, bool):
        raise ConfigurationError(f"{here}: gate approval_required must be True or False")
    return declared if declared.approval_required else None


def _shown(value: object) -> str:
    """`value`'s repr, cut to a length an error message can carry."""
    try:
        shown = repr(value)
    except ValueError:  # an int past Python's digit limit for text
        return f"an {type(value).__name__} too long to print"
    return shown if len(shown) <= 60 else f"{shown[:57]}…"


def _text_problem(text: object) -> str | None:
    """Why `text` cannot be journaled and shown as a declaration's text; None if it can."""
    if not isinstance(text, str):
        return f"must be text, not {_shown(text)}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            f"holds {text[error.start]!r} at position {error.start}, a lone surrogate with no "
            "UTF-8 form"
        )
    return None


def _check(declared: object, here: str) -> StageCheck:
    if isinstance(declared, type):
        if not issubclass(declared, StageCheck):
            raise ConfigurationError(
                f"{here}: check {declared.__qualname__} is not a StageCheck subclass"
            )
        try:
            return declared()
        except TypeError as error:
            raise ConfigurationError(
                f"{here}: check {declared.__qualname__} cannot be built without arguments "
                f"({error}); pass an instance built with its arguments instead"
            ) from error
    if isinstance(declared, StageCheck):
        return declared
    raise ConfigurationError(
        f"{here}: check {declared!r} is neither a StageCheck subclass nor an instance of one"
    )
