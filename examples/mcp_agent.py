"""An MCP server whose tool calls are a saga: a failure MCP hides is still undone.

The "model" is a scripted MCP client: it calls three tools, ignores the error the third
one returns, and says it is done. Sagacity ends the saga COMPENSATED anyway. Then an
IRREVERSIBLE wire transfer waits for a named human's approval, and runs once.

Run: .venv/bin/python examples/mcp_agent.py     (no API key, no network)
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.types import CallToolResult, TextContent

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.integrations.mcp import mcp_server, request_end_saga, saga_meta


class OrderTools:
    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        print(f"  undo: released {ctx.result}")

    @compensable(by="refund_card")
    def charge_card(self, amount: str) -> str:
        """Charge the customer's card."""
        return f"ch-{amount}"

    @compensation
    def refund_card(self, ctx: CompensationContext) -> None:
        print(f"  undo: refunded {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship_order(self, address: str) -> str:
        """Book the courier."""
        raise RuntimeError("courier API answered 503")

    @compensation
    def cancel_shipment(self) -> None:
        print("  undo: cancelled the shipment")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Wire money to a supplier."""
        return f"wire-{amount}-{to}"


def text_of(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def scripted_model(client: Client, saga_id: str) -> str:
    """Stands in for the LLM host: calls tools, never looks at is_error."""
    script: list[tuple[str, dict[str, Any]]] = [
        ("reserve_inventory", {"sku": "A-1", "qty": 2}),
        ("charge_card", {"amount": "25.00"}),
        ("ship_order", {"address": "1 Main St"}),
    ]
    for number, (name, args) in enumerate(script, start=1):
        # The model's own tool-call id, as a host passes it: the call's id in the journal.
        result = await client.call_tool(name, args, meta=saga_meta(saga_id, f"toolu_0{number}"))
        print(f"  model called {name}: {text_of(result)}")
    return "All done! Your order is on its way."


async def main(database: Path) -> None:
    sagacity = Sagacity.from_url(f"sqlite:///{database}")
    server = mcp_server(sagacity, OrderTools(), name="shop")
    # With a real model, serve the tools to your MCP host instead: server.run("stdio").
    # A host sends no _meta["sagacity/saga_id"] and no sagacity/end: pick the saga on the
    # server with mcp_server(..., saga_of=lambda ctx, params: conversation_id) and end it
    # there when the conversation is over: await end_saga(sagacity, conversation_id).
    async with Client(server) as client:
        print("order-1:")
        said = await scripted_model(client, "order-1")
        print(f"  model said: {said}")
        ended = await request_end_saga(client, "order-1")
        print(f"order-1 outcome: {ended.outcome}, undone: {', '.join(ended.compensated)}")

        wire = {"amount": "900.00", "to": "ACME"}
        waiting = await client.call_tool(
            "send_wire_transfer", wire, meta=saga_meta("pay-1", "toolu_04")
        )
        print(f"pay-1 first call: {text_of(waiting)[:60]}…")
        sagacity.approve("pay-1", approver="alice@example.com")
        ran = await client.call_tool(
            "send_wire_transfer", wire, meta=saga_meta("pay-1", "toolu_04")
        )
        print(f"pay-1 after approval: {text_of(ran)}")
        print(f"pay-1 outcome: {(await request_end_saga(client, 'pay-1')).outcome}")

    for saga_id in ("order-1", "pay-1"):
        print(f"journal of {saga_id}:")
        for entry in sagacity.history(saga_id):
            print(f"  {entry.seq:2} {entry.phase.name:<18} {entry.call_id or ''}".rstrip())
    sagacity.close()


if __name__ == "__main__":
    # MCPServer logs every tool exception with its traceback; the journal keeps it anyway.
    logging.getLogger("mcp").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(Path(folder) / "sagacity.db"))
