"""Scenario 1: the framework swallows a failure, the model says "done", the saga compensates."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import ToolException

from sagacity import FailureKind, Phase, Sagacity, SagaOutcome
from sagacity.audit import verify
from sagacity.integrations.langchain import langchain_tools
from sagacity.testing import FailOn
from tests.integrations.langchain._agents import (
    AsyncOrderTools,
    OrderTools,
    calls,
    prebuilt_agent,
    scripted,
    tool_call,
    tool_messages,
    tool_node_graph,
)

ORDER = [
    calls(tool_call("reserve_inventory", "call-1", sku="SKU-1", qty=2)),
    calls(tool_call("charge_card", "call-2", amount_cents=1999)),
    calls(tool_call("ship_order", "call-3", address="1 Main St")),
    "Done: your order is on its way.",
]
"""The scripted model: three tools, the third fails, then it claims success."""

JOURNAL = [
    ("INTENT", "reserve_inventory", "call-1"),
    ("EXECUTED", "reserve_inventory", "call-1"),
    ("INTENT", "charge_card", "call-2"),
    ("EXECUTED", "charge_card", "call-2"),
    ("INTENT", "ship_order", "call-3"),
    ("FAILED", "ship_order", "call-3"),
    ("COMPENSATING", "charge_card", "call-2"),
    ("COMPENSATED", "charge_card", "call-2"),
    ("COMPENSATING", "reserve_inventory", "call-1"),
    ("COMPENSATED", "reserve_inventory", "call-1"),
    ("ENDED", None, None),
]
UNDONE = [("refund_card", "ch-1999"), ("release_inventory", "res-SKU-1-2")]
REQUEST = {"messages": [HumanMessage("Order two of SKU-1 to 1 Main St.")]}


def journal_of(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None, str | None]]:
    return [(e.phase.name, e.tool_name, e.call_id) for e in sagacity.history(saga_id)]


def assert_compensated(sagacity: Sagacity, saga_id: str, state: dict[str, Any]) -> None:
    """The model was told of the failure and said done; the journal says COMPENSATED."""
    assert state["messages"][-1].content == "Done: your order is on its way."
    assert [status for _, status, _ in tool_messages(state)] == ["success", "success", "error"]
    assert journal_of(sagacity, saga_id) == JOURNAL
    assert verify(sagacity.journal, saga_id).ok


class TestToolNodeHandleToolErrors:
    def test_sync_failure_in_a_tool_node_compensates(self, sagacity: Sagacity) -> None:
        """A ToolNode that hands the error to the model still ends the saga COMPENSATED.

        The model is told of the failure and says done; the charge, then the
        reservation, are undone.
        """
        shop = OrderTools()
        graph = tool_node_graph(scripted(*ORDER), langchain_tools(sagacity, shop))

        result = sagacity.saga("order-1", lambda: graph.invoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPENSATED
        # The framework swallowed it; the result still holds it.
        assert repr(result.error) == "RuntimeError('carrier rejected the address')"
        assert_compensated(sagacity, "order-1", result.value)
        assert shop.undone == UNDONE
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.compensated] == ["call-2", "call-1"]

    async def test_async_failure_in_a_tool_node_compensates(self, sagacity: Sagacity) -> None:
        """The same with async tools under `ainvoke`: compensations run in reverse order."""
        shop = AsyncOrderTools()
        graph = tool_node_graph(scripted(*ORDER), langchain_tools(sagacity, shop))

        result = await sagacity.asaga("order-1", lambda: graph.ainvoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert_compensated(sagacity, "order-1", result.value)
        assert shop.undone == UNDONE

    def test_failed_entry_holds_the_raw_exception(self) -> None:
        """FAILED records the tool's own exception, not the framework's error message."""
        sagacity = Sagacity.from_url("memory://")
        graph = tool_node_graph(scripted(*ORDER), langchain_tools(sagacity, OrderTools()))

        sagacity.saga("order-1", lambda: graph.invoke(REQUEST))

        (failed,) = [e for e in sagacity.history("order-1") if e.phase is Phase.FAILED]
        assert failed.payload == {
            "kind": "failure",
            "error": {"type": "RuntimeError", "message": "carrier rejected the address"},
        }


class TestCreateAgent:
    def test_error_middleware_swallows_and_the_saga_compensates(self) -> None:
        """create_agent with ToolErrorMiddleware: the model says done, the saga compensates."""
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        agent = prebuilt_agent(scripted(*ORDER), langchain_tools(sagacity, shop))

        result = sagacity.saga("order-1", lambda: agent.invoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert tool_messages(result.value)[-1] == (
            "call-3",
            "error",
            "failed: carrier rejected the address",
        )
        assert_compensated(sagacity, "order-1", result.value)
        assert shop.undone == UNDONE

    async def test_async_error_middleware_swallows_and_the_saga_compensates(self) -> None:
        """The same with async tools under `ainvoke`."""
        sagacity = Sagacity.from_url("memory://")
        shop = AsyncOrderTools()
        agent = prebuilt_agent(scripted(*ORDER), langchain_tools(sagacity, shop))

        result = await sagacity.asaga("order-1", lambda: agent.ainvoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert_compensated(sagacity, "order-1", result.value)
        assert shop.undone == UNDONE

    def test_handle_tool_error_swallows_a_tool_exception_and_the_saga_compensates(
        self,
    ) -> None:
        """A ToolException swallowed by handle_tool_error=True still compensates the saga.

        `BaseTool.run` turns it into a message above the wrap point: the journal saw it
        first.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools(ship_error=ToolException("no carrier serves 1 Main St"))
        tools = langchain_tools(sagacity, shop, handle_tool_error=True)
        agent = prebuilt_agent(scripted(*ORDER), tools, swallow=False)

        result = sagacity.saga("order-1", lambda: agent.invoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert tool_messages(result.value)[-1] == ("call-3", "error", "no carrier serves 1 Main St")
        assert_compensated(sagacity, "order-1", result.value)
        assert shop.undone == UNDONE

    def test_an_unhandled_failure_escapes_and_the_saga_compensates(self) -> None:
        """Without a swallowing setting the tool's own exception escapes; the saga compensates."""
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        agent = prebuilt_agent(scripted(*ORDER), langchain_tools(sagacity, shop), swallow=False)

        result = sagacity.saga("order-1", lambda: agent.invoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, RuntimeError)
        assert str(result.error) == "carrier rejected the address"
        assert journal_of(sagacity, "order-1") == JOURNAL
        assert shop.undone == UNDONE


class TransientError(Exception):
    """A failure the user knows left nothing behind."""


class TestRetryMiddleware:
    def agent_with_retries(self, sagacity: Sagacity, shop: OrderTools) -> Any:
        model = scripted(calls(tool_call("reserve_inventory", "call-1", sku="SKU-1", qty=2)), "ok")
        return create_agent(
            model,
            langchain_tools(sagacity, shop),
            middleware=[ToolRetryMiddleware(max_retries=1, initial_delay=0, jitter=False)],
        )

    def test_a_failed_attempt_fails_the_saga_even_when_the_retry_succeeds(self) -> None:
        """A retried call journals both attempts, and the failed one fails the saga.

        ToolRetryMiddleware calls the tool again with the same tool_call_id. The failed
        attempt may have had an effect, so the saga compensates: the reservation the
        retry made is released.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools(reserve_fails=FailOn(1, error=lambda n: TransientError("busy")))

        result = sagacity.saga(
            "order-1", lambda: self.agent_with_retries(sagacity, shop).invoke(REQUEST)
        )

        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "order-1") == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("FAILED", "reserve_inventory", "call-1"),
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("COMPENSATING", "reserve_inventory", "call-1"),
            ("COMPENSATED", "reserve_inventory", "call-1"),
            ("ENDED", None, None),
        ]
        assert shop.undone == [("release_inventory", "res-SKU-1-2")]

    def test_a_classifier_can_mark_a_failure_retryable(self) -> None:
        """A classifier that calls a transient error RETRYABLE lets the retried saga complete."""
        sagacity = Sagacity.from_url("memory://")
        sagacity.add_classifier(
            lambda error: FailureKind.RETRYABLE if isinstance(error, TransientError) else None
        )
        shop = OrderTools(reserve_fails=FailOn(1, error=lambda n: TransientError("busy")))

        result = sagacity.saga(
            "order-1", lambda: self.agent_with_retries(sagacity, shop).invoke(REQUEST)
        )

        assert result.outcome is SagaOutcome.COMPLETED
        failed = [e for e in sagacity.history("order-1") if e.phase is Phase.FAILED]
        assert [e.payload for e in failed] == [
            {"kind": "retryable", "error": {"type": "TransientError", "message": "busy"}}
        ]
        assert shop.ran == [("reserve_inventory", ("SKU-1", 2))]
