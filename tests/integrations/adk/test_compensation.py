"""A failing tool fails the saga, even when an ADK error callback answers the model instead.

ADK hands a raising tool's exception to the `on_tool_error_callback`s of its plugins and
agent; one that returns a response swallows it, and the model goes on and says "done".
"""

from __future__ import annotations

from typing import Any

import pytest

from sagacity import Sagacity, SagaOutcome, verify
from sagacity.integrations.adk import function_tools
from tests.integrations.adk._agents import (
    Desk,
    Orders,
    SwallowErrors,
    final_text,
    phases,
    scripted,
)

THREE_CALLS = (
    [("reserve_inventory", "call-1", {"sku": "SKU-1", "qty": 2})],
    [("charge_card", "call-2", {"amount": "40.00", "card": "4242"})],
    [("ship", "call-3", {"order_id": "o-1"})],
)


def answer_errors(tool: Any, args: dict[str, Any], tool_context: Any, error: Exception) -> Any:
    """An agent's own `on_tool_error_callback`: the model gets the error as a result."""
    return {"error": str(error)}


class TestSwallowedFailure:
    @pytest.mark.parametrize("where", ["plugin", "agent"])
    async def test_third_tool_fails_and_the_first_two_are_undone_in_reverse(
        self, sagacity: Sagacity, where: str
    ) -> None:
        """The callback answers the model, which says "done": the saga ends COMPENSATED.

        The journal holds the failure; the charge is refunded, then the stock released.
        """
        orders = Orders(ship_fails=True)
        model = scripted(*THREE_CALLS, "All done, your order ships today.")
        plugin = SwallowErrors()
        desk = Desk(
            model, function_tools(sagacity, orders), plugins=[plugin] if where == "plugin" else []
        )
        if where == "agent":
            desk.agent.on_tool_error_callback = answer_errors
        session = await desk.new_session()

        result = await sagacity.asaga("order-1", lambda: desk.turn(session, "ship order 1"))

        assert final_text(result.value) == "All done, your order ships today."
        told = "RuntimeError: courier down" if where == "plugin" else "courier down"
        assert model.tool_responses()["call-3"] == {"error": told}
        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, RuntimeError)
        assert orders.log == [
            "reserve SKU-1 x2",
            "charge 40.00",
            "refund ch-40.00",
            "release res-SKU-1-2",
        ]
        entries = sagacity.history("order-1")
        assert phases(entries) == [
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
        assert entries[5].payload["error"]["message"] == "courier down"
        assert entries[-1].payload["outcome"] == "COMPENSATED"
        assert verify(sagacity.journal, "order-1").ok

    async def test_a_failure_adk_raises_compensates_too(self, sagacity: Sagacity) -> None:
        """Without a callback ADK raises the tool's own exception out of the run."""
        orders = Orders(ship_fails=True)
        desk = Desk(scripted(*THREE_CALLS), function_tools(sagacity, orders))
        session = await desk.new_session()

        result = await sagacity.asaga("order-2", lambda: desk.turn(session, "ship order 2"))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, RuntimeError)
        assert str(result.error) == "courier down"
        assert orders.log[-2:] == ["refund ch-40.00", "release res-SKU-1-2"]

    async def test_without_a_failure_the_saga_completes(self, sagacity: Sagacity) -> None:
        """Three calls that succeed: COMPLETED, nothing undone, idempotency keys are ADK's ids."""
        orders = Orders()
        desk = Desk(scripted(*THREE_CALLS), function_tools(sagacity, orders))
        session = await desk.new_session()

        result = await sagacity.asaga("order-3", lambda: desk.turn(session, "ship order 3"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert final_text(result.value) == "done"
        assert orders.log == ["reserve SKU-1 x2", "charge 40.00", "ship o-1"]
        seen = orders.seen["ship o-1"]
        assert seen is not None
        assert (seen.saga_id, seen.call_id, seen.tool_name) == ("order-3", "call-3", "ship")
        assert orders.seen["charge_card 40.00"] is not None
        assert orders.seen["charge_card 40.00"].call_id == "call-2"  # type: ignore[union-attr]
