"""An OpenAI Agents SDK agent on Temporal with sagacity's tools, and its workflow.

The model answers from its input alone (no state of its own), as a model activity on any
worker, after any restart, must. It is handed to the plugin as its model provider.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

from agents import Agent, Model, ModelProvider, ModelResponse, Runner, Usage
from temporalio import workflow
from temporalio.openai_agents.testing import ResponseBuilders

from tests._shop import Shop

with workflow.unsafe.imports_passed_through():
    from sagacity.integrations.temporal.openai_agents import AgentSaga, saga_function_tools


def _told(input: Any) -> dict[str, str]:
    """The model was told this of each tool call, by call id."""
    if isinstance(input, str):
        return {}
    return {
        str(item["call_id"]): str(item.get("output"))
        for item in input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def _prompt(input: Any) -> str:
    if isinstance(input, str):
        return input
    first = input[0]
    return str(first["content"]) if isinstance(first, dict) else str(first)


def _call(name: str, call_id: str, **arguments: Any) -> ModelResponse:
    return ResponseBuilders.tool_call(json.dumps(arguments), name, call_id=call_id)


class ScriptedModel(Model):
    """Order: reserve, charge, ship, then "all done". Wire: wire, then say what came back."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        told, prompt = _told(input), _prompt(input)
        if prompt == "order":
            if "r1" not in told:
                return _call("reserve_inventory", "r1", sku="A-1", qty=2)
            if "c1" not in told:
                return _call("charge_card", "c1", amount="40.00", card="4242")
            if "s1" not in told:
                return _call("ship", "s1", order_id="o-1")
            return ResponseBuilders.output_message(f"all done ({told['s1']})")
        if prompt == "together":  # two calls in one response: the SDK runs them at once
            if "r1" not in told:
                calls = [
                    _call("reserve_inventory", "r1", sku="A-1", qty=2),
                    _call("ship", "s1", order_id="o-1"),
                ]
                return ModelResponse(
                    output=[item for call in calls for item in call.output],
                    usage=Usage(),
                    response_id=None,
                )
            return ResponseBuilders.output_message(f"{told['r1']} {told['s1']}")
        if "w1" not in told:
            return _call("send_wire_transfer", "w1", amount="900.00", to="ACME")
        return ResponseBuilders.output_message(f"wired: {told['w1']}")

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


class ScriptedProvider(ModelProvider):
    def get_model(self, model_name: str | None) -> Model:
        return ScriptedModel()


AGENT = Agent(name="shop", instructions="Serve the order.", tools=saga_function_tools(Shop()))


@dataclasses.dataclass
class Ask:
    prompt: str
    poll_seconds: float = 30.0


@workflow.defn
class ShopAgentWorkflow:
    """Runs the agent inside the saga of this workflow."""

    @workflow.run
    async def run(self, ask: Ask) -> str:
        async with AgentSaga(decision_poll=datetime.timedelta(seconds=ask.poll_seconds)):
            result = await Runner.run(AGENT, ask.prompt)
        return str(result.final_output)


@workflow.defn
class SagalessShopAgentWorkflow:
    """Runs the agent with no `AgentSaga` around it: its tools refuse to run."""

    @workflow.run
    async def run(self, ask: Ask) -> str:
        result = await Runner.run(AGENT, ask.prompt)
        return str(result.final_output)
