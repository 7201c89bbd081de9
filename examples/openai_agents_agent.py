"""An OpenAI Agents SDK agent whose tool calls run as sagas, offline with a scripted model.

Order 1: printing the label fails, the SDK tells the model, the model says "done" — and the
saga still releases the reserved stock. Order 2: a wire transfer pauses the run with the
SDK's own approval, a human approves it through sagacity, the run resumes and it runs once.

    python examples/openai_agents_agent.py
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from agents import Agent, Runner, Tool, set_tracing_disabled
from agents.items import TResponseOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    SagaResult,
    compensable,
    compensation,
)
from sagacity.integrations.openai_agents import function_tools


class OrderDesk:
    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        print(f"  compensation: released {ctx.result}")

    @compensable(by="void_label")
    def print_label(self, order_id: str) -> str:
        """Print the shipping label."""
        raise RuntimeError("label printer jammed")

    @compensation
    def void_label(self) -> None:
        print("  compensation: voided the label")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: Decimal, to: str) -> str:
        """Wire money to a supplier; once sent it cannot be recalled."""
        print(f"  wired {amount} to {to}")
        return f"wire-{amount}-{to}"


def scripted(*turns: list[TResponseOutputItem]) -> ScriptedModel:
    """A model that makes these tool calls, a list per turn, then answers "done"."""
    return ScriptedModel([*turns, [assistant_message("done")]])


def order_agent(tools: list[Tool], model: ScriptedModel) -> Agent[Any]:
    return Agent(
        name="orders",
        instructions="Handle the customer's order with the tools.",
        model=model,  # for a real model: model="gpt-4.1" (and set OPENAI_API_KEY)
        tools=tools,
    )


def show(sagacity: Sagacity, result: SagaResult) -> None:
    print(f"{result.saga_id}: {result.outcome.value}")
    for entry in sagacity.history(result.saga_id):
        tool = f"{entry.tool_name or ''} {entry.call_id or ''}".rstrip()
        print(f"  {entry.seq:>2} {entry.phase.value:<17} {tool}".rstrip())


async def main() -> None:
    set_tracing_disabled(True)  # nothing leaves this machine
    sagacity = Sagacity.from_url("memory://")  # or "sqlite:///sagacity.db"
    tools = function_tools(sagacity, OrderDesk())

    agent = order_agent(
        tools,
        scripted(
            [function_call("reserve_inventory", {"sku": "SKU-42", "qty": 2}, call_id="call_1")],
            [function_call("print_label", {"order_id": "order-1"}, call_id="call_2")],
        ),
    )
    result = await sagacity.asaga("order-1", lambda: Runner.run(agent, "Ship order 1"))
    print(f"the model said: {result.value.final_output}")
    show(sagacity, result)

    wire = {"amount": "900.00", "to": "ACME"}
    agent = order_agent(
        tools, scripted([function_call("send_wire_transfer", wire, call_id="call_3")])
    )
    paused = await sagacity.asaga("order-2", lambda: Runner.run(agent, "Pay ACME"))
    show(sagacity, paused)
    run = paused.value
    (request,) = paused.pending
    print(f"waiting for approval: {request.tool_name} {request.input}")

    state = run.to_state()  # state.to_string() stores it while the human decides
    state.approve(run.interruptions[0])
    sagacity.approve("order-2", approver="alice", expected_sha256=request.input_sha256)
    result = await sagacity.aresume_saga("order-2", lambda: Runner.run(agent, state))
    show(sagacity, result)


if __name__ == "__main__":
    asyncio.run(main())
