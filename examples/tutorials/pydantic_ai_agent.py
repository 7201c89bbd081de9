"""Tutorial 4c: a PydanticAI run deferred for approval, resumed by another process.

Run it with `python examples/tutorials/pydantic_ai_agent.py` (needs `sagacity[pydantic-ai]`).
PydanticAI's own `FunctionModel` plays the model from a script, so no API key is needed.
Three processes:

1. the agent's process: an order whose shipping fails (PydanticAI hands `ToolFailed` to
   the model, which says "done"; the saga is COMPENSATED anyway), then a wire transfer
   that PydanticAI defers (`DeferredToolRequests`); the process saves the run's message
   history as JSON (PydanticAI's own persistence: sagacity cannot keep it for you);
2. a human approves with `sagacity approve`;
3. a worker loads the history and resumes with `DeferredToolResults`: the call passes
   sagacity's check (PydanticAI's "approved" alone is never trusted) and runs once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.models.function import AgentInfo, FunctionModel

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.integrations.pydantic_ai import saga_toolset


class OrderTools:
    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        print(f"  undo: released {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship_order(self, address: str) -> str:
        """Ship the order."""
        raise ToolFailed("the carrier is not answering")  # told to the model, which goes on

    @compensation
    def cancel_shipment(self) -> None:
        print("  undo: cancelled the shipment")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, amount: str, to: str) -> str:
        """Send a wire transfer."""
        print(f"  WIRE SENT: {amount} to {to}")
        return "wire-1"


def build_agent(sagacity: Sagacity, *script: list[ToolCallPart] | str) -> Agent[None, Any]:
    turns = list(script)

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = turns.pop(0)
        return ModelResponse(parts=[TextPart(turn)] if isinstance(turn, str) else turn)

    # With a real model, change only the model: Agent("openai:gpt-5", toolsets=..., ...)
    return Agent(
        FunctionModel(scripted),
        toolsets=[saga_toolset(sagacity, OrderTools())],
        output_type=[str, DeferredToolRequests],
    )


async def agent(folder: str) -> None:
    """Process 1: a failed order, then a wire transfer PydanticAI defers for approval."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    shop = build_agent(
        sagacity,
        [ToolCallPart("reserve_inventory", {"sku": "SKU-1", "qty": 2}, tool_call_id="call-1")],
        [ToolCallPart("ship_order", {"address": "1 Main St"}, tool_call_id="call-2")],
        "Done: your order is on its way.",
        [ToolCallPart("send_wire", {"amount": "2500.00", "to": "ACME"}, tool_call_id="call-3")],
    )
    order = await sagacity.asaga("order-1", lambda: shop.run("Ship two SKU-1 to 1 Main St."))
    print(f"  the model said {order.value.output!r}")
    print(f"  order-1: {order.outcome.name}")

    paused = await sagacity.asaga("payout-1", lambda: shop.run("Pay ACME 2500.00."))
    [call] = paused.value.output.approvals
    shown = paused.value.output.metadata[call.tool_call_id]["sagacity"]
    print(f"  payout-1: {paused.outcome.name}: {shown['tool_name']} {shown['input']}")
    print(f"  sha256 {shown['input_sha256']}")
    history = ModelMessagesTypeAdapter.dump_json(paused.value.all_messages())
    Path(folder, "history.json").write_bytes(history)
    sagacity.close()


async def resume(folder: str) -> None:
    """Process 3: load the message history and answer the deferred call."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    payer = build_agent(sagacity, "The wire is sent.")
    history = ModelMessagesTypeAdapter.validate_json(Path(folder, "history.json").read_bytes())
    result = await sagacity.aresume_saga(
        "payout-1",
        lambda: payer.run(
            message_history=history,
            deferred_tool_results=DeferredToolResults(approvals={"call-3": True}),
        ),
    )
    print(f"  the model said {result.value.output!r}")
    print(f"  payout-1: {result.outcome.name}")
    for entry in sagacity.history("payout-1"):
        print(f"    {entry.seq} {entry.phase.name:<17} {entry.call_id or ''}")
    sagacity.close()


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    print(done.stdout, end="")
    return done.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print("process 1, the agent:")
        sha256 = run(sys.executable, __file__, "agent", folder).split("sha256 ")[1].split()[0]
        print("a human approves what they reviewed:")
        database = f"sqlite:///{Path(folder, 'sagacity.db')}"
        run(
            sys.executable, "-m", "sagacity.cli", "approve", "payout-1",
            "--approver", "alice@treasury", "--sha256", sha256, "--database", database,
        )  # fmt: skip
        print("process 3, a worker resumes the run:")
        run(sys.executable, __file__, "resume", folder)


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        asyncio.run(agent(sys.argv[2]))
    elif sys.argv[1:2] == ["resume"]:
        asyncio.run(resume(sys.argv[2]))
    else:
        main()
