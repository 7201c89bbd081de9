"""Streamed runs: consumed inside the saga's work they journal; left for later they run nothing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import Agent, ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from sagacity import Sagacity, SagaOutcome, SagaStateError
from sagacity.integrations.pydantic_ai import saga_toolset
from tests.integrations.pydantic_ai._agents import (
    OrderTools,
    ScriptedModel,
    agent_with,
    call,
    journal_of,
)

RESERVED = [
    ("INTENT", "reserve_inventory", "call-1"),
    ("EXECUTED", "reserve_inventory", "call-1"),
    ("ENDED", None, None),
]


async def reserve_then_answer(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """A streamed model: asks to reserve stock, then streams its answer in two chunks."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    if any(isinstance(part, ToolReturnPart) for part in last.parts):
        yield "Reserved "
        yield "SKU-1."
    else:
        args = '{"sku": "SKU-1"}'
        yield {0: DeltaToolCall(name="reserve_inventory", json_args=args, tool_call_id="call-1")}


class TestStreamedRun:
    async def test_run_stream_consumed_inside_the_work_is_journaled(
        self, sagacity: Sagacity
    ) -> None:
        """`run_stream` consumed inside the saga's work journals its tool calls as `run` does."""
        shop = OrderTools()
        agent: Agent[None, str] = Agent(
            FunctionModel(stream_function=reserve_then_answer),
            toolsets=[saga_toolset(sagacity, shop)],
        )

        async def work() -> str:
            async with agent.run_stream("Reserve SKU-1.") as streamed:
                return "".join([chunk async for chunk in streamed.stream_text(delta=True)])

        result = await sagacity.asaga("stream-1", work)

        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == "Reserved SKU-1."
        assert journal_of(sagacity, "stream-1") == RESERVED
        assert shop.calls == [("reserve_inventory", {"sku": "SKU-1", "qty": 1})]

    async def test_iter_consumed_after_the_work_returned_runs_no_tool(
        self, sagacity: Sagacity
    ) -> None:
        """A run begun in the saga's work and consumed after it calls no tool.

        The work returns after the first step of `agent.iter`; the tool call of a later step
        raises SagaStateError, and the tool does not run, journaled or not.
        """
        shop = OrderTools()
        model = ScriptedModel([call("reserve_inventory", "call-1", sku="SKU-1")], "Reserved.")
        agent = agent_with(model, saga_toolset(sagacity, shop))

        async with contextlib.AsyncExitStack() as stack:

            async def work() -> Any:
                run = await stack.enter_async_context(agent.iter("Reserve SKU-1."))
                await run.__anext__()  # the first step only
                return run

            result = await sagacity.asaga("stream-2", work)
            assert result.outcome is SagaOutcome.COMPLETED

            with pytest.raises(SagaStateError, match=r"'stream-2'.*'reserve_inventory'.*inside"):
                async for _ in result.value:
                    pass

        assert shop.calls == []
        assert journal_of(sagacity, "stream-2") == [("ENDED", None, None)]
