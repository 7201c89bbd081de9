"""Tutorial 4e: a Google ADK run paused on ADK's own confirmation, resumed by a worker.

Run it with `python examples/tutorials/adk_agent.py` (needs `sagacity[adk]` and
`sqlalchemy[asyncio]` for ADK's `DatabaseSessionService`). A `BaseLlm` subclass that
answers from a script plays the model, so no API key is needed. Three processes:

1. the agent's process: an order whose label printing fails (a plugin's
   `on_tool_error_callback` answers the model instead, the model says "done", the saga
   is COMPENSATED anyway), then a wire transfer that ADK pauses with an
   `adk_request_confirmation`; ADK keeps the session in its `DatabaseSessionService`
   (SQLite here), sagacity keeps the request in its journal; the process exits;
2. a human approves with `sagacity approve`;
3. a worker (`sagacity.Worker` with an `AdkResumer`) answers ADK's confirmation in the
   stored session: the call passes sagacity's check (the confirmation alone is never
   trusted) and runs once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from pydantic import Field

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    Worker,
    compensable,
    compensation,
)
from sagacity.integrations.adk import RESUMER, AdkResumer, function_tools

USER = "customer-7"


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


class ScriptedModel(BaseLlm):
    """Answers each request with the next turn: tool calls, or a text."""

    model: str = "scripted"
    turns: list[Any] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn = self.turns.pop(0) if self.turns else "Done."
        if isinstance(turn, str):
            parts = [types.Part.from_text(text=turn)]
        else:
            parts = [
                types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=args))
                for name, call_id, args in turn
            ]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


class HelpfulErrors(BasePlugin):
    """Turns a tool's exception into an answer for the model, as many applications do."""

    def __init__(self) -> None:
        super().__init__(name="helpful_errors")

    async def on_tool_error_callback(self, *, error: Exception, **_: Any) -> dict[str, str]:
        return {"error": f"the tool failed: {error}"}


def order_runner(folder: str, sagacity: Sagacity, *turns: Any) -> Runner:
    agent = LlmAgent(
        name="orders",
        instruction="Handle the customer's order with the tools.",
        model=ScriptedModel(turns=list(turns)),  # for a real model: model="gemini-2.5-flash"
        tools=function_tools(sagacity, OrderDesk()),
    )
    sessions = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{folder}/sessions.db")
    app = App(name="orders", root_agent=agent, plugins=[HelpfulErrors()])
    return Runner(app=app, session_service=sessions)


async def turn(runner: Runner, session_id: str, text: str) -> str:
    """One user turn; returns the model's last text."""
    message = types.Content(role="user", parts=[types.Part.from_text(text=text)])
    said = ""
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        for part in event.content.parts if event.content and event.content.parts else []:
            said = part.text or said
    return said


async def agent(folder: str) -> None:
    """Process 1: a failed order, then a wire transfer ADK pauses for confirmation."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    runner = order_runner(
        folder,
        sagacity,
        [("reserve_inventory", "call_1", {"sku": "SKU-42", "qty": 2})],
        [("print_label", "call_2", {"order_id": "order-1"})],
        "Done: your order ships today.",
        [("send_wire_transfer", "call_3", {"amount": "900.00", "to": "ACME"})],
    )
    # One ADK session per saga, under the saga's id: the worker finds it by that id.
    for saga_id in ("order-1", "payout-2"):
        await runner.session_service.create_session(
            app_name="orders", user_id=USER, session_id=saga_id
        )
    order = await sagacity.asaga("order-1", lambda: turn(runner, "order-1", "Ship order 1"))
    print(f"  the model said {order.value!r}")
    print(f"  order-1: {order.outcome.name}")

    paused = await sagacity.asaga("payout-2", lambda: turn(runner, "payout-2", "Pay ACME"))
    (request,) = paused.pending
    print(f"  payout-2: {paused.outcome.name}: {request.tool_name} {request.input}")
    print(f"  sha256 {request.input_sha256}")
    await runner.close()
    sagacity.close()


def work(folder: str) -> None:
    """Process 3: a worker answers ADK's confirmation in the stored session."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    runner = order_runner(folder, sagacity, "The wire transfer is sent.")
    worker = Worker(sagacity, {RESUMER: AdkResumer(runner, user_id=USER)})
    print(f"  resumed {worker.run_once()} saga")
    for entry in sagacity.history("payout-2"):
        print(f"    {entry.seq} {entry.phase.name:<17} {entry.call_id or ''}")
    asyncio.run(runner.close())
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
        run(sys.executable, __file__, "work", folder)


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        asyncio.run(agent(sys.argv[2]))
    elif sys.argv[1:2] == ["work"]:
        work(sys.argv[2])
    else:
        main()
