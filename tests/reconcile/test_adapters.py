"""A reconciler declared on the wrapped tool works the same under a framework's agent loop.

PydanticAI runs its real loop on a scripted model: the charge reaches the provider, then
times out; the model is told it failed and says "done". The saga's end asks the tool's
reconciler before any human: the charge it finds is refunded, the saga COMPENSATED.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra")

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from sagacity import (
    CompensationContext,
    Phase,
    ReconcileContext,
    Reconciled,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    current_call,
)
from sagacity.integrations.pydantic_ai import saga_toolset


class Shop:
    def __init__(self, *, charged: bool) -> None:
        self.charged = charged
        self.provider: dict[str, str] = {}
        self.refunds: list[Any] = []

    @compensable(by="refund", reconcile="find_charge")
    async def charge_card(self, amount_cents: int) -> str:
        """Charge the customer's card."""
        call = current_call()
        assert call is not None
        if self.charged:
            self.provider[call.call_id] = f"ch-{amount_cents}"
        raise TimeoutError("the provider did not answer")

    @compensation
    async def refund(self, ctx: CompensationContext) -> None:
        self.refunds.append(ctx.result)

    async def find_charge(self, ctx: ReconcileContext) -> Reconciled:
        found = self.provider.get(ctx.call_id)  # the framework's own tool-call id
        return Reconciled.did_not_land() if found is None else Reconciled.landed(found)


def scripted() -> FunctionModel:
    turns: list[Any] = [[ToolCallPart("charge_card", {"amount_cents": 500}, tool_call_id="c-1")]]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if turns:
            return ModelResponse(parts=turns.pop(0))
        return ModelResponse(parts=[TextPart("Done: charged.")])

    return FunctionModel(respond)


class TestPydanticAI:
    @pytest.mark.parametrize("charged", [True, False])
    async def test_the_framework_call_id_is_reconciled(self, charged: bool) -> None:
        """The reconciler gets the framework's call id; a charge it finds is refunded once."""
        sagacity = Sagacity.from_url("memory://")
        shop = Shop(charged=charged)
        agent = Agent(scripted(), toolsets=[saga_toolset(sagacity, shop)])

        async def work() -> Any:
            try:
                return await agent.run("Charge 5 euros.")
            except TimeoutError:
                return None  # the framework let the tool's error through

        result = await sagacity.asaga("order-1", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.refunds == (["ch-500"] if charged else [])
        (verdict,) = [e for e in sagacity.history("order-1") if e.phase is Phase.RECONCILED]
        assert verdict.call_id == "c-1"
        assert verdict.payload["verdict"] == ("landed" if charged else "did_not_land")


class TestLangGraph:
    @pytest.mark.parametrize("charged", [True, False])
    def test_a_tool_node_swallows_the_timeout_and_the_reconciler_settles_it(
        self, charged: bool
    ) -> None:
        """LangGraph's ToolNode turns the timeout into a message; the saga's end asks."""
        pytest.importorskip("langgraph", reason="the langchain extra")
        from sagacity.integrations.langchain import langchain_tools
        from tests.integrations.langchain._agents import calls, scripted, tool_call, tool_node_graph

        sagacity = Sagacity.from_url("memory://")
        shop = SyncShop(charged=charged)
        model = scripted(calls(tool_call("charge_card", "lc-1", amount_cents=700)), "Done.")
        graph = tool_node_graph(model, langchain_tools(sagacity, shop))
        result = sagacity.saga("order-2", lambda: graph.invoke({"messages": [("user", "Pay.")]}))
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.refunds == (["ch-700"] if charged else [])
        (verdict,) = [e for e in sagacity.history("order-2") if e.phase is Phase.RECONCILED]
        assert verdict.call_id == "lc-1"


class SyncShop:
    """The shop's charge, sync, for LangGraph's ToolNode."""

    def __init__(self, *, charged: bool) -> None:
        self.charged = charged
        self.provider: dict[str, str] = {}
        self.refunds: list[Any] = []

    @compensable(by="refund", reconcile="find_charge")
    def charge_card(self, amount_cents: int) -> str:
        """Charge the customer's card."""
        call = current_call()
        assert call is not None
        if self.charged:
            self.provider[call.call_id] = f"ch-{amount_cents}"
        raise TimeoutError("the provider did not answer")

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.refunds.append(ctx.result)

    def find_charge(self, ctx: ReconcileContext) -> Reconciled:
        found = self.provider.get(ctx.call_id)
        return Reconciled.did_not_land() if found is None else Reconciled.landed(found)
