"""A journaled call of a PydanticAI tool: the wrapped toolset's own call, run as a `SagaTool`.

The journaled input is the validated arguments the model sent; the call hands the very
dict it was given down to the toolset it wraps, whose identity tells a `SagaToolset`
further in that this call is journaled already.
"""

from __future__ import annotations

import contextvars
from typing import Any

from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from sagacity.annotations import Reversibility
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["FrameworkCall", "handed_down", "journaled_tool", "through_framework"]

handed_down: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "sagacity_pydantic_ai_handed_down", default=None
)
"""The argument dict of the call a SagaToolset journals and hands down to the toolset it
wraps: the very object, as every call has a dict of its own."""


class FrameworkCall:
    """The wrapped toolset's own call of one tool: what a journaled call runs."""

    __slots__ = ("ctx", "name", "tool", "tool_args", "toolset")

    def __init__(
        self,
        toolset: AbstractToolset[Any],
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> None:
        self.toolset = toolset
        self.name = name
        self.tool_args = tool_args
        self.ctx = ctx
        self.tool = tool

    async def __call__(self) -> Any:
        token = handed_down.set(self.tool_args)
        try:
            return await self.toolset.call_tool(self.name, self.tool_args, self.ctx, self.tool)
        finally:
            handed_down.reset(token)


async def through_framework(call: FrameworkCall, /, **tool_args: Any) -> Any:
    """Run the call the way PydanticAI would: sync tools in a worker thread, timeouts, ctx.

    `tool_args` is what is journaled; the call passes on the dict it was given, equal to
    it, whose identity tells a SagaToolset further in that this call is journaled.
    """
    return await call()


def journaled_tool(
    sagacity: Sagacity, name: str, description: str, reversibility: Reversibility
) -> SagaTool:
    """The `SagaTool` a call of `name` is journaled through, run by `through_framework`.

    The journaled input is the validated arguments the model sent: `call` is left out,
    and so is `RunContext`, which PydanticAI adds only when it calls the function.
    """
    return SagaTool(
        sagacity,
        through_framework,
        name=name,
        description=description,
        reversibility=reversibility,
        excluded=frozenset({"call"}),
    )
