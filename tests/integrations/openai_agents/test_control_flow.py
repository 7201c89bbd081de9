"""A tool that acted, then was stopped by the SDK: its effect may exist, and the journal says so.

The SDK has no exception a function tool raises to pause or retry (it turns every
exception into a message for the model). What stops a tool after it acted is the SDK
itself: its `timeout=` cancels the call, a nested run times out or is cancelled, or a tool
output guardrail trips after the tool returned.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import (
    Runner,
    ToolGuardrailFunctionOutput,
    ToolOutputGuardrailData,
    ToolOutputGuardrailTripwireTriggered,
    tool_output_guardrail,
)
from agents.exceptions import MCPToolCancellationError, ToolTimeoutError

from sagacity import (
    CompensationContext,
    Phase,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
)
from sagacity.integrations.openai_agents import as_function_tool
from tests.integrations.openai_agents._orders import (
    Orders,
    agent_with,
    call,
    phases,
    scripted,
    tool_outputs,
)
from tests.integrations.openai_agents.test_approval import SDK_ERROR_MESSAGE


class Printer:
    """A label printer that prints, then is stopped: `then` is raised, or it never returns.

    Every label printed and every undo is logged.
    """

    def __init__(self, then: BaseException | None = None) -> None:
        self.then = then
        self.log: list[str] = []

    @compensable(by="void_label")
    async def print_label(self, order_id: str) -> str:
        """Print a shipping label."""
        self.log.append(f"print {order_id}")
        if self.then is not None:
            raise self.then
        await asyncio.Event().wait()  # the printer never answers
        return f"label-{order_id}"

    @compensation
    def void_label(self, ctx: CompensationContext) -> None:
        self.log.append(f"void {ctx.result}")


def tools_of(sagacity: Sagacity, printer: Printer, orders: Orders, **options: Any) -> list[Any]:
    """Reserve stock, and print labels with `options` (such as `timeout=`)."""
    wrapped = {tool.name: tool for tool in sagacity.wrap(printer, orders)}
    return [
        as_function_tool(wrapped["reserve_inventory"]),
        as_function_tool(wrapped["print_label"], **options),
    ]


PRINT_AFTER_RESERVING = (
    [call("reserve_inventory", "call-1", sku="SKU-1")],
    [call("print_label", "call-2", order_id="o-1")],
)


class TestStoppedAfterItActed:
    async def test_a_call_cut_off_by_the_sdks_timeout_after_it_acted_is_in_doubt(
        self, sagacity: Sagacity
    ) -> None:
        """The SDK's `timeout=` cancels a tool that already printed: in doubt, never voided.

        The model is told of the timeout and says "done"; the saga fails with the call
        journaled `outcome_unknown`, the reservation is released, and the label is listed in
        doubt for a human to settle.
        """
        printer, orders = Printer(), Orders()
        model = scripted(*PRINT_AFTER_RESERVING)
        # Long enough for INTENT's commit under load; the printer never returns after printing.
        agent = agent_with(model, tools_of(sagacity, printer, orders, timeout=1.0))

        result = await sagacity.asaga("label-1", lambda: Runner.run(agent, "ship o-1"))

        assert tool_outputs(model)["call-2"] == "Tool 'print_label' timed out after 1 seconds."
        assert printer.log == ["print o-1"]
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert phases(sagacity.history("label-1")) == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("INTENT", "print_label", "call-2"),
            ("FAILED", "print_label", "call-2"),
            ("COMPENSATING", "reserve_inventory", "call-1"),
            ("COMPENSATED", "reserve_inventory", "call-1"),
            ("ENDED", None, None),
        ]
        assert sagacity.history("label-1")[3].payload["kind"] == "outcome_unknown"
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-2"]
        assert orders.log == ["reserve SKU-1 x1", "release res-SKU-1-1"]

    @pytest.mark.parametrize(
        "error",
        [
            ToolTimeoutError(tool_name="lookup_rates", timeout_seconds=2.0),
            MCPToolCancellationError("the MCP server cancelled the call"),
        ],
        ids=["nested-timeout", "mcp-cancelled"],
    )
    async def test_a_nested_run_stopped_after_the_tool_acted_leaves_it_in_doubt(
        self, sagacity: Sagacity, error: Exception
    ) -> None:
        """A tool that acted, then saw its nested run time out or be cancelled: in doubt.

        The SDK gives the model its usual failure message; sagacity journals the call
        `outcome_unknown`, not a failure that had no effect.
        """
        printer, orders = Printer(then=error), Orders()
        model = scripted(*PRINT_AFTER_RESERVING)
        agent = agent_with(model, tools_of(sagacity, printer, orders))

        result = await sagacity.asaga("label-2", lambda: Runner.run(agent, "ship o-1"))

        assert tool_outputs(model)["call-2"] == SDK_ERROR_MESSAGE
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        (failed,) = [e for e in sagacity.history("label-2") if e.phase is Phase.FAILED]
        assert failed.payload["kind"] == "outcome_unknown"
        assert failed.payload["error"]["type"] == type(error).__name__
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-2"]
        assert printer.log == ["print o-1"]

    async def test_an_output_guardrail_that_trips_after_the_effect_compensates_it(
        self, sagacity: Sagacity
    ) -> None:
        """A tool output guardrail that halts the run after the tool returned: compensated.

        The call is journaled EXECUTED before the SDK runs the guardrail, so the run's
        error compensates it with the rest.
        """

        @tool_output_guardrail
        def no_labels_today(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
            return ToolGuardrailFunctionOutput.raise_exception(output_info="labels are paused")

        printer, orders = Printer(then=None), Orders()

        @compensable(by=printer.void_label)
        def print_label(order_id: str) -> str:
            """Print a shipping label."""
            printer.log.append(f"print {order_id}")
            return f"label-{order_id}"

        wrapped = {tool.name: tool for tool in sagacity.wrap(print_label, orders)}
        agent = agent_with(
            scripted(*PRINT_AFTER_RESERVING),
            [
                as_function_tool(wrapped["reserve_inventory"]),
                as_function_tool(wrapped["print_label"], tool_output_guardrails=[no_labels_today]),
            ],
        )

        result = await sagacity.asaga("label-3", lambda: Runner.run(agent, "ship o-1"))

        assert isinstance(result.error, ToolOutputGuardrailTripwireTriggered)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert printer.log == ["print o-1", "void label-o-1"]
        assert phases(sagacity.history("label-3"))[2:] == [
            ("INTENT", "print_label", "call-2"),
            ("EXECUTED", "print_label", "call-2"),
            ("COMPENSATING", "print_label", "call-2"),
            ("COMPENSATED", "print_label", "call-2"),
            ("COMPENSATING", "reserve_inventory", "call-1"),
            ("COMPENSATED", "reserve_inventory", "call-1"),
            ("ENDED", None, None),
        ]
