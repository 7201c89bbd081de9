"""Finding the tools in what `Sagacity.wrap` is given, and checking their declarations."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from sagacity._owner import SagaOwner
from sagacity._reconcile import Reconciler, ReconcilerRegistry
from sagacity._reconcile import resolve_reconcilers as _resolve_reconcilers
from sagacity.annotations import (
    Retry,
    Reversibility,
    ToolDeclaration,
    check_approvers,
    declaration_of,
)
from sagacity.approval._escalation import check_escalation
from sagacity.approval._provenance import check_justification_required
from sagacity.approval._rules import approval_rule
from sagacity.compensation import Compensation, CompensationRegistry
from sagacity.errors import ConfigurationError
from sagacity.tools import SagaTool

__all__ = ["DeclaredTool", "collect_tools", "wrap_sources"]

_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""What every framework studied accepts as a tool name."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DeclaredTool:
    """A tool found by `collect_tools`, its declaration checked."""

    name: str
    func: Callable[..., Any]
    description: str
    reversibility: Reversibility
    compensation: Compensation | None
    retry: Retry | None
    reconcilers: tuple[Reconciler, ...] = ()
    """Its reconcilers: of the call, of the compensation, or both."""


def wrap_sources(
    owner: SagaOwner,
    sources: Iterable[object],
    *,
    known: dict[str, SagaTool],
    registry: CompensationRegistry,
    reconcilers: ReconcilerRegistry | None = None,
    declare: Callable[[list[SagaTool]], None] | None = None,
) -> list[SagaTool]:
    """Wrap what `Sagacity.wrap` is given; record the new tools in `known` and `registry`.

    Their reconcilers go in `reconcilers`. `declare` is given every tool before any is
    recorded (the approval lifecycle checks each one's escalation against this
    Sagacity's TTL and groups): when it raises, nothing is recorded, and the tools
    wrapped before stay as they were.

    A `SagaTool` that `owner` already made is returned as it is, in its place.
    """
    groups: list[SagaTool | list[DeclaredTool]] = []
    for source in sources:
        if not isinstance(source, SagaTool):
            groups.append(collect_tools([source]))
        elif source.owner is owner:
            groups.append(source)
        else:
            raise ConfigurationError(
                f"tool {source.name!r} was wrapped by another Sagacity; pass the object "
                "or function it came from, or a tool wrapped by this Sagacity"
            )
    found = [declared for group in groups if isinstance(group, list) for declared in group]
    names = [g.name for g in groups if isinstance(g, SagaTool)] + [d.name for d in found]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigurationError(
            f"two tools are named {repeated[0]!r}; give each tool once, or give one another "
            "name with compensable(name=...)"
        )
    for declared in found:
        holder = registry.reserved_by(declared.name)
        if holder is not None:  # its compensation would replace the holder's undo
            raise ConfigurationError(
                f"the tool name {declared.name!r} belongs to {holder}; give the tool "
                "another name with compensable(name=...)"
            )
        existing = known.get(declared.name)
        # Wrapping another instance of the same class replaces the tool (and its
        # compensation): objects built per request are a common pattern.
        if existing is not None and _function_of(existing.func) is not _function_of(declared.func):
            raise ConfigurationError(
                f"two tools are named {declared.name!r} ({existing.func.__qualname__} and "
                f"{declared.func.__qualname__}); give one another name with "
                "compensable(name=...)"
            )
    tools: list[SagaTool] = []
    made: list[tuple[DeclaredTool, SagaTool]] = []
    for group in groups:
        if isinstance(group, SagaTool):
            tools.append(group)
            continue
        for declared in group:
            tool = SagaTool(
                owner,
                declared.func,
                name=declared.name,
                description=declared.description,
                reversibility=declared.reversibility,
                retry=declared.retry,
            )
            made.append((declared, tool))
            tools.append(tool)
    if declare is not None:
        declare(tools)  # may refuse: nothing below has run yet
    for declared, tool in made:
        if declared.compensation is not None:
            registry.register(declared.compensation)
        if reconcilers is not None:
            reconcilers.drop(declared.name)
            for reconciler in declared.reconcilers:
                reconcilers.register(reconciler)
        known[declared.name] = tool
    return tools


def _function_of(func: Callable[..., Any]) -> Any:
    """The function under a bound method, so two instances' methods compare equal."""
    return getattr(func, "__func__", func)


def collect_tools(sources: Iterable[object]) -> list[DeclaredTool]:
    """Return the tools of `sources`: the `compensable` methods of objects, and functions.

    Raises:
        ConfigurationError: A declaration is wrong or missing, or two tools share a name.
    """
    tools: list[DeclaredTool] = []
    for source in sources:
        if isinstance(source, type):
            raise ConfigurationError(
                f"wrap() was given the class {source.__qualname__}; pass an instance of it"
            )
        if inspect.isfunction(source) or inspect.ismethod(source):
            tools.append(_function_tool(source))
        else:
            tools.extend(_object_tools(source))
    seen: dict[str, DeclaredTool] = {}
    for tool in tools:
        if tool.name in seen:
            raise ConfigurationError(
                f"two tools are named {tool.name!r} ({seen[tool.name].func.__qualname__} and "
                f"{tool.func.__qualname__}); give one another name with compensable(name=...)"
            )
        seen[tool.name] = tool
    return tools


def _object_tools(source: object) -> list[DeclaredTool]:
    owner = type(source).__qualname__
    found = []
    for attribute in sorted(dir(type(source))):
        declaration = declaration_of(getattr(type(source), attribute, None))
        if declaration is None:
            continue
        method = getattr(source, attribute)
        compensation = _resolve_compensation(
            declaration,
            method,
            lookup=lambda name: getattr(source, name, None),
            where=f"class {owner}",
        )
        reconcilers = _resolve_reconcilers(
            declaration,
            method,
            lookup=lambda name: getattr(source, name, None),
            where=f"class {owner}",
        )
        found.append(
            _declared(
                declaration, method, compensation, where=f"class {owner}", reconcilers=reconcilers
            )
        )
    if not found:
        raise ConfigurationError(
            f"{owner} has no @compensable methods; decorate its tools, or pass functions"
        )
    return found


def _function_tool(func: Callable[..., Any]) -> DeclaredTool:
    declaration = declaration_of(func)
    module_name = getattr(func, "__module__", "")
    if declaration is None:
        raise ConfigurationError(
            f"function {func.__qualname__} is not declared: decorate it with "
            "@compensable(by=...) or @compensable(reversibility=Reversibility.IRREVERSIBLE)"
        )
    owner: object = sys.modules.get(module_name)
    where = f"module {module_name}"
    if inspect.ismethod(func):
        # A bound method given alone: `by` names a method of its class, as it would if
        # the whole object were wrapped.
        owner = func.__self__
        where = f"class {type(owner).__qualname__}"
    compensation = _resolve_compensation(
        declaration,
        func,
        lookup=lambda name: getattr(owner, name, None),
        where=where,
    )
    reconcilers = _resolve_reconcilers(
        declaration, func, lookup=lambda name: getattr(owner, name, None), where=where
    )
    return _declared(declaration, func, compensation, where=where, reconcilers=reconcilers)


def _declared(
    declaration: ToolDeclaration,
    func: Callable[..., Any],
    compensation: Compensation | None,
    *,
    where: str,
    reconcilers: tuple[Reconciler, ...] = (),
) -> DeclaredTool:
    name = declaration.name or func.__name__
    if not _TOOL_NAME.fullmatch(name):
        raise ConfigurationError(
            f"{where}: tool name {name!r} must be 1 to 64 letters, digits, '_', '-' or '.'"
        )
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        # Its effect happens as the stream is read, after the call returned: journaled
        # EXECUTED on return, it would claim an effect that has not happened yet.
        raise ConfigurationError(
            f"{where}: tool {name!r} is a generator; a tool must return its result. Collect "
            "the stream inside the tool and return it as a list"
        )
    _check_retry(declaration, name, where)
    check_approvers(declaration.approvers, declaration.reversibility, name, where)
    approval_rule(declaration.approval, func, declaration.reversibility, name, where)
    check_justification_required(
        declaration.justification_required, declaration.reversibility, name, where
    )
    check_escalation(
        declaration.remind_before, declaration.escalate_to, declaration.reversibility, name, where
    )
    _check_compensation_options(declaration, name, where)
    if compensation is not None:
        timeout = declaration.compensation_timeout
        compensation = dataclasses.replace(
            compensation,
            tool_name=name,
            idempotent=declaration.compensation_idempotent,
            timeout=None if timeout is None else float(timeout),
        )
    return DeclaredTool(
        name=name,
        func=func,
        description=inspect.getdoc(func) or "",
        reversibility=declaration.reversibility,
        compensation=compensation,
        retry=declaration.retry,
        reconcilers=tuple(dataclasses.replace(r, tool_name=name) for r in reconcilers),
    )


def _check_retry(declaration: ToolDeclaration, name: str, where: str) -> None:
    retry = declaration.retry
    if retry is None:
        return
    if declaration.reversibility is Reversibility.IRREVERSIBLE:
        raise ConfigurationError(
            f"{where}: tool {name!r} is IRREVERSIBLE and declares retries; its approval runs "
            "it once, so it is not retried"
        )
    if not isinstance(retry.retries, int) or retry.retries < 0:
        raise ConfigurationError(
            f"{where}: tool {name!r}: retries must be a whole number ≥ 0, not {retry.retries!r}"
        )
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in retry.retry_on):
        raise ConfigurationError(
            f"{where}: tool {name!r}: retry_on must be exception types, not {retry.retry_on!r}"
        )
    if not 0 <= retry.backoff <= retry.max_backoff:
        raise ConfigurationError(
            f"{where}: tool {name!r}: backoff ({retry.backoff}) must be ≥ 0 and at most "
            f"max_backoff ({retry.max_backoff})"
        )


def _check_compensation_options(declaration: ToolDeclaration, name: str, where: str) -> None:
    idempotent = declaration.compensation_idempotent
    timeout: object = declaration.compensation_timeout
    if declaration.reversibility is Reversibility.IRREVERSIBLE and (
        idempotent is not False or timeout is not None
    ):
        raise ConfigurationError(
            f"{where}: tool {name!r} is IRREVERSIBLE and declares compensation_idempotent or "
            "compensation_timeout; it has no compensation for them to apply to"
        )
    if not isinstance(idempotent, bool):
        raise ConfigurationError(
            f"{where}: tool {name!r}: compensation_idempotent must be True or False, not "
            f"{idempotent!r}"
        )
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigurationError(
            f"{where}: tool {name!r}: compensation_timeout must be a number of seconds above "
            f"0, or None for no bound, not {timeout!r}"
        )


def _resolve_compensation(
    declaration: ToolDeclaration,
    tool: Callable[..., Any],
    *,
    lookup: Callable[[str], Any],
    where: str,
) -> Compensation | None:
    tool_name = declaration.name or tool.__name__
    by = declaration.by
    if declaration.reversibility is Reversibility.IRREVERSIBLE:
        if by is not None:
            raise ConfigurationError(
                f"{where}: tool {tool_name!r} is IRREVERSIBLE and also names a compensation "
                f"({by!r}); an effect with an undo is COMPENSATABLE"
            )
        return None
    if by is None:
        raise ConfigurationError(
            f"{where}: tool {tool_name!r} is {declaration.reversibility.name} but declares no "
            "compensation: add by=... or mark it Reversibility.IRREVERSIBLE"
        )
    if isinstance(by, str):
        func = lookup(by)
        if func is None or not callable(func):
            raise ConfigurationError(
                f"{where}: tool {tool_name!r} names compensation {by!r}, which does not exist; "
                f"define {by}() or fix the name"
            )
    else:
        func = by
        bound = lookup(getattr(by, "__name__", ""))
        if getattr(bound, "__func__", None) is by:
            func = bound  # a function of the class body: use the instance's bound method
        if not callable(func):
            raise ConfigurationError(f"{where}: tool {tool_name!r}: by={by!r} is not callable")
    return Compensation(
        tool_name=tool_name, func=func, takes_context=_takes_context(func, tool_name, where)
    )


def _takes_context(func: Callable[..., Any], tool_name: str, where: str) -> bool:
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError) as error:
        raise ConfigurationError(
            f"{where}: the compensation of tool {tool_name!r} has no readable signature"
        ) from error
    required = [
        p
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) > 1 or any(p.kind is inspect.Parameter.KEYWORD_ONLY for p in required):
        names = ", ".join(p.name for p in required)
        raise ConfigurationError(
            f"{where}: compensation {getattr(func, '__qualname__', func)!r} of tool "
            f"{tool_name!r} must take no arguments or one CompensationContext, not ({names})"
        )
    return bool(required) or bool(positional)
