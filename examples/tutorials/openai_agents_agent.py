"""Tutorial 4b: an OpenAI Agents SDK run paused for approval, resumed by another process.

Run it with `python examples/tutorials/openai_agents_agent.py` (needs
`sagacity[openai-agents]`). The SDK's own `agents.testing.ScriptedModel` plays the model,
so no API key is needed. Three processes:

1. the agent's process: an order whose label printing fails (the SDK tells the model,
   the model says "done", the saga is COMPENSATED anyway), then a wire transfer that the
   SDK interrupts for approval; the process saves the SDK's `RunState` as a string (the
   SDK's own persistence: sagacity cannot keep it for you) and exits;
2. a human approves with `sagacity approve`;
3. a worker loads the `RunState`, marks the call approved in the SDK, and resumes: the
   call passes sagacity's check (the SDK's flag alone is never trusted) and runs once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, Tool, set_tracing_disabled
from agents.items import TResponseOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.integrations.openai_agents import function_tools


class OrderDesk:
    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        print(f"  undo: released {ctx.result}")

    @compensable(by="void_label")
    def print_label(self, order_id: str) -> str:
        """Print the shipping label."""
        raise RuntimeError("label printer jammed")

    @compensation
    def void_label(self) -> None:
        print("  undo: voided the label")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Wire money to a supplier; once sent it cannot be recalled."""
        print(f"  WIRE SENT: {amount} to {to}")
        return f"wire-{amount}-{to}"


def order_agent(tools: list[Tool], *turns: list[TResponseOutputItem]) -> Agent[Any]:
    return Agent(
        name="orders",
        instructions="Handle the customer's order with the tools.",
        model=ScriptedModel(list(turns)),  # for a real model: model="gpt-4.1" (OPENAI_API_KEY)
        tools=tools,
    )


async def agent(folder: str) -> None:
    """Process 1: a failed order, then a wire transfer the SDK interrupts for approval."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    tools = function_tools(sagacity, OrderDesk())
    shop = order_agent(
        tools,
        [function_call("reserve_inventory", {"sku": "SKU-42", "qty": 2}, call_id="call_1")],
        [function_call("print_label", {"order_id": "order-1"}, call_id="call_2")],
        [assistant_message("Done: your order ships today.")],
    )
    order = await sagacity.asaga("order-1", lambda: Runner.run(shop, "Ship order 1"))
    print(f"  the model said {order.value.final_output!r}")
    print(f"  order-1: {order.outcome.name}")

    wire = {"amount": "900.00", "to": "ACME"}
    payer = order_agent(tools, [function_call("send_wire_transfer", wire, call_id="call_3")])
    paused = await sagacity.asaga("payout-2", lambda: Runner.run(payer, "Pay ACME"))
    (request,) = paused.pending
    print(f"  payout-2: {paused.outcome.name}: {request.tool_name} {request.input}")
    print(f"  sha256 {request.input_sha256}")
    # The SDK's paused run, kept where the worker finds it (a file here, a database row
    # in a service).
    Path(folder, "run-state.json").write_text(paused.value.to_state().to_string())
    sagacity.close()


async def resume(folder: str) -> None:
    """Process 3: load the SDK's state, approve the call in the SDK too, and resume."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    tools = function_tools(sagacity, OrderDesk())
    payer = order_agent(tools, [assistant_message("The wire transfer is sent.")])
    state = await RunState.from_string(payer, Path(folder, "run-state.json").read_text())
    state.approve(state.get_interruptions()[0])
    result = await sagacity.aresume_saga("payout-2", lambda: Runner.run(payer, state))
    print(f"  the model said {result.value.final_output!r}")
    print(f"  payout-2: {result.outcome.name}")
    for entry in sagacity.history("payout-2"):
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
            sys.executable, "-m", "sagacity.cli", "approve", "payout-2",
            "--approver", "alice@treasury", "--sha256", sha256, "--database", database,
        )  # fmt: skip
        print("process 3, a worker resumes the run:")
        run(sys.executable, __file__, "resume", folder)


if __name__ == "__main__":
    set_tracing_disabled(True)  # nothing leaves this machine
    if sys.argv[1:2] == ["agent"]:
        asyncio.run(agent(sys.argv[2]))
    elif sys.argv[1:2] == ["resume"]:
        asyncio.run(resume(sys.argv[2]))
    else:
        main()
