"""A PydanticAI agent on Temporal with sagacity's tools, and the workflow that runs it.

The model is a `FunctionModel` that answers from the messages alone (no state of its
own), as a model activity on any worker, after any restart, must.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
from typing import Any

from pydantic_ai import (
    Agent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow

from sagacity import CompensationContext, Reversibility, compensable, compensation

with workflow.unsafe.imports_passed_through():
    from sagacity.integrations.temporal.pydantic_ai import AgentSaga, temporal_saga_toolset


class Depot:
    """Reserve stock, ship (fails with `ToolFailed` on cue), wire money (IRREVERSIBLE)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, *, ship_error: Exception | None = None) -> None:
        self.ship_error = ship_error
        self.log: list[str] = []
        self.calls: collections.Counter[str] = collections.Counter()

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        """Reserve stock for an order."""
        self.calls["reserve_inventory"] += 1
        self.log.append(f"reserve {sku} x{qty}")
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship(self, order_id: str) -> str:
        """Hand the parcel to the courier."""
        self.calls["ship"] += 1
        if self.ship_error is not None:
            raise self.ship_error
        self.log.append(f"ship {order_id}")
        return f"sh-{order_id}"

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.log.append(f"cancel {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Wire money to another bank."""
        self.calls["send_wire_transfer"] += 1
        self.log.append(f"wire {amount} to {to}")
        return f"wire-{amount}-{to}"


DEPOT = Depot()
TOOLS = temporal_saga_toolset(DEPOT, id="depot")


def _answered(messages: list[ModelMessage]) -> dict[str, Any]:
    """tool-call id -> what the model was told of the call (a result, or an error)."""
    told: dict[str, Any] = {}
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart | RetryPromptPart):
                    told[str(part.tool_call_id)] = part.content
    return told


def _prompt(messages: list[ModelMessage]) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    return str(first.parts[-1].content)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Order: reserve, then ship, then "all done". Wire: wire, then say what came back."""
    told, prompt = _answered(messages), _prompt(messages)
    if prompt == "order":
        if "r1" not in told:
            return ModelResponse(
                parts=[
                    ToolCallPart("reserve_inventory", {"sku": "A-1", "qty": 2}, tool_call_id="r1")
                ]
            )
        if "s1" not in told:
            return ModelResponse(
                parts=[ToolCallPart("ship", {"order_id": "o-1"}, tool_call_id="s1")]
            )
        return ModelResponse(parts=[TextPart("all done")])
    if prompt == "together":  # both calls in one response: PydanticAI runs them in parallel
        if "r1" not in told:
            return ModelResponse(
                parts=[
                    ToolCallPart("reserve_inventory", {"sku": "A-1", "qty": 2}, tool_call_id="r1"),
                    ToolCallPart("ship", {"order_id": "o-1"}, tool_call_id="s1"),
                ]
            )
        return ModelResponse(parts=[TextPart(f"{told['r1']} {told['s1']}")])
    if "w1" not in told:
        return ModelResponse(
            parts=[
                ToolCallPart(
                    "send_wire_transfer", {"amount": "900.00", "to": "ACME"}, tool_call_id="w1"
                )
            ]
        )
    return ModelResponse(parts=[TextPart(f"wired: {told['w1']}")])


AGENT = Agent(
    FunctionModel(respond),
    name="depot_agent",
    toolsets=[TOOLS],
    capabilities=[TemporalDurability()],
)


@dataclasses.dataclass
class Ask:
    prompt: str
    poll_seconds: float = 30.0


@workflow.defn
class DepotAgentWorkflow:
    """Runs the agent inside the saga of this workflow."""

    __pydantic_ai_agents__ = (AGENT,)

    @workflow.run
    async def run(self, ask: Ask) -> str:
        async with AgentSaga(decision_poll=datetime.timedelta(seconds=ask.poll_seconds)):
            result = await AGENT.run(ask.prompt)
        return result.output


@workflow.defn
class SagalessAgentWorkflow:
    """Runs the agent with no `AgentSaga` around it: the toolset refuses its calls."""

    __pydantic_ai_agents__ = (AGENT,)

    @workflow.run
    async def run(self, ask: Ask) -> str:
        result = await AGENT.run(ask.prompt)
        return result.output
