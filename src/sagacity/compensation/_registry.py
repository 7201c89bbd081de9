"""A compensation bound to its tool, and the registry `Sagacity.wrap` fills."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from sagacity.compensation._context import CompensationContext

__all__ = ["Compensation", "CompensationRegistry"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Compensation:
    """A compensation bound to its tool."""

    tool_name: str
    """The tool it undoes."""
    func: Callable[..., Any]
    """The callable: no arguments, or one `CompensationContext`; sync or async."""
    takes_context: bool
    """Whether `func` takes the context."""
    idempotent: bool = False
    """Safe to run again with the same `ctx.call_id`: a walk that finds it started with
    its outcome unknown runs it again instead of leaving it in doubt."""
    timeout: float | None = None
    """Seconds the walk waits for it; None: no bound."""

    def call(self, context: CompensationContext) -> Any:
        """Call it, returning what it returns (an awaitable, for an async one)."""
        return self.func(context) if self.takes_context else self.func()

    @property
    def is_async(self) -> bool:
        """Whether calling it returns a coroutine (an `async def`, or an object's one)."""
        func = self.func
        return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
            getattr(func, "__call__", None)  # noqa: B004 - the object's own __call__
        )


class CompensationRegistry:
    """Compensations by tool name, filled by `Sagacity.wrap`."""

    def __init__(self) -> None:
        self._by_tool: dict[str, Compensation] = {}
        self._reserved: dict[str, str] = {}

    def register(self, compensation: Compensation) -> None:
        self._by_tool[compensation.tool_name] = compensation

    def reserve(self, tool_name: str, owner: str) -> None:
        """Keep `tool_name` for `owner` (a workflow's stage): `wrap` refuses the name."""
        self._reserved[tool_name] = owner

    def reserved_by(self, tool_name: str) -> str | None:
        """Who keeps `tool_name`, if anyone (see `reserve`)."""
        return self._reserved.get(tool_name)

    def get(self, tool_name: str) -> Compensation | None:
        return self._by_tool.get(tool_name)
