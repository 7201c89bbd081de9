"""One step of an ADK saga in a process of its own: `python -m tests.integrations.adk._restart`.

    pause  SAGACITY_URL SESSIONS_URL SAGA EFFECTS
    resume SAGACITY_URL SESSIONS_URL SAGA EFFECTS SESSION [crash]

Sessions live in ADK's `DatabaseSessionService` (SESSIONS_URL, SQLite); the journal at
SAGACITY_URL. Every tool effect is appended to the file EFFECTS, so the test counts them
across processes. `pause` runs the first turn up to ADK's confirmation request; `resume`
answers it. With `crash`, the process dies (exit 9, no clean-up) right after the wire ran
and its EXECUTED was journaled, before ADK recorded the tool's response in the session.
The last line printed is the step's JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from decimal import Decimal
from typing import Any

from google.adk.plugins import BasePlugin
from google.adk.sessions import DatabaseSessionService
from google.adk.tools import BaseTool
from google.adk.tools.tool_context import ToolContext

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.integrations.adk import confirmation_message, function_tools
from tests.integrations.adk._agents import Desk, scripted


class Effects:
    """Tools whose effects are lines of a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def effect(self, line: str) -> None:
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(line + "\n")

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        """Reserve stock for an order."""
        self.effect(f"reserve {sku} x{qty}")
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.effect(f"release {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: Decimal, to: str) -> str:
        """Wire money to another bank."""
        self.effect(f"wire {amount} to {to}")
        return f"wire-{amount}-{to}"


class DieAfterTheWire(BasePlugin):
    """Kills the process once the wire has run, before ADK records its response."""

    def __init__(self) -> None:
        super().__init__(name="die_after_the_wire")

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: Any
    ) -> Any:
        if tool.name == "send_wire_transfer":
            sys.stdout.flush()
            os._exit(9)
        return None


async def main(mode: str, sagacity_url: str, sessions_url: str, saga: str, effects: str) -> None:
    sagacity = Sagacity.from_url(sagacity_url)
    sessions = DatabaseSessionService(db_url=sessions_url)
    model = scripted(
        [("reserve_inventory", "call-1", {"sku": "SKU-1"})],
        [("send_wire_transfer", "call-2", {"amount": "900.00", "to": "ACME"})],
    )
    crash = sys.argv[7:] == ["crash"]
    desk = Desk(
        model,
        function_tools(sagacity, Effects(effects)),
        sessions=sessions,
        plugins=[DieAfterTheWire()] if crash else [],
    )
    try:
        if mode == "pause":
            session = await desk.new_session()
            result = await sagacity.asaga(saga, lambda: desk.turn(session, "pay ACME"))
        else:
            session = sys.argv[6]
            message = confirmation_message(await desk.session(session), "call-2")
            result = await sagacity.aresume_saga(saga, lambda: desk.turn(session, message))
        print(json.dumps({"outcome": result.outcome.value, "session": session}), flush=True)
    finally:
        await sessions.close()
        sagacity.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
