"""A PydanticAI agent under sagacity: a swallowed failure is undone, a wire waits for a human.

Runs offline with a scripted model, no API key: `python examples/pydantic_ai_agent.py`.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.models.function import AgentInfo, FunctionModel

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    compensable,
    compensation,
    verify,
)
from sagacity.integrations.pydantic_ai import saga_toolset


class OrderTools:
    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        print(f"  undo: release reservation {ctx.result}")

    @compensable(by="refund_card")
    async def charge_card(self, amount_cents: int) -> str:
        """Charge the customer's card."""
        return f"ch-{amount_cents}"

    @compensation
    async def refund_card(self, ctx: CompensationContext) -> None:
        print(f"  undo: refund charge {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship_order(self, address: str) -> str:
        """Ship the order."""
        # PydanticAI hands ToolFailed to the model as a failed result and carries on.
        raise ToolFailed("the carrier is not answering")

    @compensation
    def cancel_shipment(self) -> None:
        print("  undo: cancel shipment")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, amount: str, to: str) -> str:
        """Send a wire transfer."""
        print(f"  send_wire ran: {amount} to {to}")
        return "wire-1"


SCRIPT: list[list[ToolCallPart] | str] = [
    [ToolCallPart("reserve_inventory", {"sku": "SKU-1", "qty": 2}, tool_call_id="call-1")],
    [ToolCallPart("charge_card", {"amount_cents": 1999}, tool_call_id="call-2")],
    [ToolCallPart("ship_order", {"address": "1 Main St"}, tool_call_id="call-3")],
    "Done: your order is on its way.",  # the model claims success anyway
    [ToolCallPart("send_wire", {"amount": "2500.00", "to": "ACME"}, tool_call_id="call-4")],
    "The wire is sent.",
]


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = SCRIPT.pop(0)
    return ModelResponse(parts=[TextPart(turn)] if isinstance(turn, str) else turn)


def print_journal(sagacity: Sagacity, saga_id: str) -> None:
    for entry in sagacity.history(saga_id):
        tool, call_id = entry.tool_name or "", entry.call_id or ""
        print(f"  {entry.seq:>2} {entry.phase.name:<18} {tool:<18} {call_id}".rstrip())


async def main(database: Path) -> None:
    sagacity = Sagacity.from_url(f"sqlite:///{database}")
    tools = saga_toolset(sagacity, OrderTools())
    model = FunctionModel(scripted_model)
    # With a real model, change only this line: Agent("openai:gpt-5", toolsets=[tools], ...)
    agent = Agent(model, toolsets=[tools], output_type=[str, DeferredToolRequests])

    order = await sagacity.asaga("order-1", lambda: agent.run("Ship two SKU-1 to 1 Main St."))
    print(f"order-1: the model said {order.value.output!r}")
    print(f"order-1: saga {order.outcome.name}")
    print_journal(sagacity, "order-1")

    paused = await sagacity.asaga("payout-1", lambda: agent.run("Pay ACME 2500.00."))
    [call] = paused.value.output.approvals
    shown = paused.value.output.metadata[call.tool_call_id]["sagacity"]
    print(f"payout-1: saga {paused.outcome.name}: {shown['reason']}")
    print(f"payout-1: input {shown['input']} sha256 {shown['input_sha256'][:16]}...")

    sagacity.approve(
        "payout-1", approver="alice@example.com", expected_sha256=shown["input_sha256"]
    )
    resumed = await sagacity.aresume_saga(
        "payout-1",
        lambda: agent.run(
            message_history=paused.value.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
        ),
    )
    print(f"payout-1: the model said {resumed.value.output!r}")
    print(f"payout-1: saga {resumed.outcome.name}")
    print_journal(sagacity, "payout-1")
    print(f"journal verified: {verify(sagacity.journal).ok}")
    sagacity.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(Path(folder) / "sagacity.db"))
