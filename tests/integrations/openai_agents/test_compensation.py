"""A tool fails and the SDK tells the model; the model says "done"; the saga compensates.

This is the SDK's default configuration: `default_tool_error_function` swallows the error.
"""

from __future__ import annotations

from agents import Runner, RunResultStreaming

from sagacity import Sagacity, SagaOutcome, verify
from sagacity.integrations.openai_agents import function_tools
from tests.integrations.openai_agents._orders import (
    Orders,
    agent_with,
    call,
    phases,
    scripted,
    tool_outputs,
)

SDK_ERROR_MESSAGE = "An error occurred while running the tool. Please try again."


class TestSwallowedFailure:
    async def test_third_tool_fails_and_the_first_two_are_undone_in_reverse(
        self, sagacity: Sagacity
    ) -> None:
        """The third tool fails; the model says "done"; the first two are undone in reverse.

        Reserve (sync) and charge (async) succeed, ship raises: refund, then release.
        """
        orders = Orders(ship_fails=True)
        model = scripted(
            [call("reserve_inventory", "call-1", sku="SKU-1", qty=2)],
            [call("charge_card", "call-2", amount="25.00", card="4242")],
            [call("ship", "call-3", order_id="o-1")],
        )
        agent = agent_with(model, function_tools(sagacity, orders))

        result = await sagacity.asaga("order-1", lambda: Runner.run(agent, "ship order o-1"))

        assert result.value.final_output == "done"
        assert tool_outputs(model) == {
            "call-1": "res-SKU-1-2",
            "call-2": "ch-25.00",
            "call-3": SDK_ERROR_MESSAGE,
        }
        assert result.outcome is SagaOutcome.COMPENSATED
        assert orders.log == [
            "reserve SKU-1 x2",
            "charge 25.00",
            "refund ch-25.00",
            "release res-SKU-1-2",
        ]
        assert phases(sagacity.history("order-1")) == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("INTENT", "charge_card", "call-2"),
            ("EXECUTED", "charge_card", "call-2"),
            ("INTENT", "ship", "call-3"),
            ("FAILED", "ship", "call-3"),
            ("COMPENSATING", "charge_card", "call-2"),
            ("COMPENSATED", "charge_card", "call-2"),
            ("COMPENSATING", "reserve_inventory", "call-1"),
            ("COMPENSATED", "reserve_inventory", "call-1"),
            ("ENDED", None, None),
        ]
        assert verify(sagacity.journal, "order-1").ok

    async def test_streamed_run_compensates_too(self, sagacity: Sagacity) -> None:
        """`Runner.run_streamed`, its events consumed inside the saga, journals the same."""
        orders = Orders(ship_fails=True)
        model = scripted(
            [call("reserve_inventory", "call-1", sku="SKU-1")],
            [call("ship", "call-2", order_id="o-1")],
        )
        agent = agent_with(model, function_tools(sagacity, orders))

        async def work() -> RunResultStreaming:
            streamed = Runner.run_streamed(agent, "ship order o-1")
            async for _ in streamed.stream_events():
                pass
            return streamed

        result = await sagacity.asaga("order-4", work)

        assert result.value.final_output == "done"
        assert result.outcome is SagaOutcome.COMPENSATED
        assert orders.log == ["reserve SKU-1 x1", "release res-SKU-1-1"]
        assert [phase for phase, *_ in phases(sagacity.history("order-4"))] == [
            "INTENT",
            "EXECUTED",
            "INTENT",
            "FAILED",
            "COMPENSATING",
            "COMPENSATED",
            "ENDED",
        ]

    async def test_failed_entry_holds_the_tools_own_error(self, sagacity: Sagacity) -> None:
        """The FAILED entry records the tool's exception, not the SDK's message."""
        orders = Orders(ship_fails=True)
        model = scripted([call("ship", "call-1", order_id="o-1")])
        agent = agent_with(model, function_tools(sagacity, orders))

        await sagacity.asaga("order-2", lambda: Runner.run(agent, "ship"))

        failed = [e for e in sagacity.history("order-2") if e.phase.value == "FAILED"]
        assert [e.payload for e in failed] == [
            {"kind": "failure", "error": {"type": "RuntimeError", "message": "courier down"}}
        ]

    async def test_without_a_failure_the_saga_completes(self, sagacity: Sagacity) -> None:
        """The same three calls, all succeeding, end COMPLETED with nothing undone."""
        orders = Orders()
        model = scripted(
            [call("reserve_inventory", "call-1", sku="SKU-1", qty=2)],
            [call("charge_card", "call-2", amount="25.00", card="4242")],
            [call("ship", "call-3", order_id="o-1")],
        )
        agent = agent_with(model, function_tools(sagacity, orders))

        result = await sagacity.asaga("order-3", lambda: Runner.run(agent, "ship order o-1"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["reserve SKU-1 x2", "charge 25.00", "ship o-1"]
