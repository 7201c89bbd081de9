"""A workflow's stage (or a run's start) made into a journaled tool, not yet registered.

The stage's method becomes a new function with its own declaration (its tool name, its
compensation found on the workflow's instance), checked as `wrap` checks a tool; the
tool is registered later, with the rest of the workflow (`_definition.register`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

from sagacity._wrap import DeclaredTool, collect_tools
from sagacity.annotations import Reversibility, ToolDeclaration, declaration_of
from sagacity.approval._escalation import tool_escalation
from sagacity.errors import ConfigurationError
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool
from sagacity.workflows._declare import GateDeclaration

__all__ = ["PlannedTool", "journaled_tool", "nothing_to_undo", "stage_tool"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PlannedTool:
    """A stage's (or a start's) journaled tool, checked and not yet registered."""

    declared: DeclaredTool
    """What `collect_tools` found: its compensation and reconcilers are registered."""
    tool: SagaTool
    """The tool that runs it."""
    where: str
    """Names it in errors, and as the holder of its tool name."""
    gate: GateDeclaration | None = None
    """The stage's gate (checked); None: no gate, or a run's start."""
    is_stage: bool = True
    """Whether it is a stage: a stage's gate (or its absence) is declared on registering."""


def nothing_to_undo() -> None:
    """The compensation of a run's start and of stages that declare no effect."""


def stage_tool(
    sagacity: Sagacity,
    instance: object,
    method: Callable[..., Any],
    tool_name: str,
    reason: str | None,
    here: str,
    gate: GateDeclaration | None,
) -> PlannedTool:
    """The stage's method as a journaled tool named `tool_name`, not yet registered."""
    call = _forwarding(method)
    # No @compensable: the stage declares no effect, so there is nothing to undo. It is
    # journaled REVERSIBLE and the walk records it COMPENSATED without doing anything; a
    # walk stopped inside that nothing runs it again rather than leave it in doubt.
    declaration = declaration_of(method) or ToolDeclaration(
        by=nothing_to_undo,
        reversibility=Reversibility.REVERSIBLE,
        name=None,
        compensation_idempotent=True,
    )
    by = declaration.by
    if isinstance(by, str):
        found = getattr(instance, by, None)
        if found is None or not callable(found):
            raise ConfigurationError(
                f"{here} names compensation {by!r}, which {type(instance).__qualname__} does "
                f"not define; define {by}() or fix the name"
            )
        by = found
    elif by is not None:
        bound = getattr(instance, getattr(by, "__name__", ""), None)
        if getattr(bound, "__func__", None) is by:
            by = bound  # a function of the class body: the instance's bound method
    call.__sagacity_tool__ = dataclasses.replace(  # type: ignore[attr-defined]
        declaration,
        name=tool_name,
        by=by,
        reconcile=_bound(instance, declaration.reconcile),
        reconcile_compensation=_bound(instance, declaration.reconcile_compensation),
    )
    return journaled_tool(sagacity, call, reason, here, gate=gate)


def _bound(instance: object, given: Any) -> Any:
    """A stage's reconciler found on the workflow's instance, as `by` is (then checked)."""
    if isinstance(given, str):
        return getattr(instance, given, given)
    bound = getattr(instance, getattr(given, "__name__", ""), None)
    return bound if given is not None and getattr(bound, "__func__", None) is given else given


def journaled_tool(
    sagacity: Sagacity,
    call: Callable[..., Any],
    reason: str | None,
    here: str,
    *,
    gate: GateDeclaration | None = None,
    is_stage: bool = True,
) -> PlannedTool:
    """A journaled tool of `call`, its declaration checked as `wrap` checks it.

    Not wrapped into `sagacity`'s tools: a stage runs only inside its run, in order. Were
    it wrapped, `Sagacity.resume_saga(run_id)` without work would run an approved gated
    stage alone and end the run COMPLETED with the later stages never run; unwrapped, it
    refuses. Only its compensation is registered, for the walk (by `register`).
    """
    try:
        (declared,) = collect_tools([call])
    except ConfigurationError as error:
        raise ConfigurationError(f"{here}: {error}") from error
    # The facade's own registries: the workflows are part of the core, and `wrap` is the
    # only public way in, which would also make the stage a tool anyone could resume.
    if declared.name in sagacity._tools:
        raise ConfigurationError(
            f"{here}: a tool named {declared.name!r} is wrapped in this Sagacity already; "
            "rename the tool, the workflow or the stage"
        )
    own = declaration_of(declared.func)
    if own is not None:  # what `register` asks the approval lifecycle, checked first
        try:
            tool_escalation(
                declared.name,
                own.remind_before,
                own.escalate_to,
                ttl=sagacity.approval.ttl,
                groups=sagacity.approval.policy.groups,
            )
        except ConfigurationError as error:
            raise ConfigurationError(f"{here}: {error}") from error
    tool = SagaTool(
        sagacity,
        declared.func,
        name=declared.name,
        description=declared.description,
        reversibility=declared.reversibility,
        retry=declared.retry,
        approval_reason=reason,
    )
    return PlannedTool(declared=declared, tool=tool, where=here, gate=gate, is_stage=is_stage)


def _forwarding(method: Callable[..., Any]) -> Callable[..., Any]:
    """A new function that calls `method`, with its signature, name and docstring.

    The stage's tool needs a declaration of its own (its tool name), which cannot be set
    on a bound method without changing every instance's.
    """
    if inspect.iscoroutinefunction(method):

        async def forward_async(*args: Any, **kwargs: Any) -> Any:
            return await method(*args, **kwargs)

        forward: Callable[..., Any] = forward_async
    else:

        def forward_sync(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        forward = forward_sync
    functools.update_wrapper(forward, method)
    return forward
