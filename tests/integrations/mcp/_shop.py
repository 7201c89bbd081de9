"""Tools for the MCP tests: a shop served by `mcp_server`, and an upstream for `mcp_proxy`."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, RequestParamsMeta, TextContent, ToolAnnotations

from sagacity import (
    CompensationContext,
    JournalEntry,
    Phase,
    Reversibility,
    compensable,
    compensation,
)
from sagacity.integrations.mcp import saga_meta


class Shop:
    """Three compensable steps, the third of which fails, and an irreversible wire."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def record(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        self.record("reserve_inventory", sku, qty)
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.record("release_inventory", ctx.result)

    @compensable(by="refund_card")
    async def charge_card(self, amount: str, card: str = "4242") -> str:
        """Charge the customer's card."""
        self.record("charge_card", amount, card)
        return f"ch-{amount}"

    @compensation
    async def refund_card(self, ctx: CompensationContext) -> None:
        self.record("refund_card", ctx.result)

    @compensable(by="cancel_shipment")
    def ship_order(self, address: str) -> str:
        """Book the courier."""
        self.record("ship_order", address)
        raise RuntimeError("courier API answered 503 for depot 7")

    @compensation
    def cancel_shipment(self) -> None:
        self.record("cancel_shipment")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Wire money to a supplier's bank account."""
        self.record("send_wire_transfer", amount, to)
        return f"wire-{amount}-{to}"


def meta(saga_id: str, call_id: str | None = None) -> RequestParamsMeta:
    """Request `_meta` naming the saga (and the call), spelled out as a client would."""
    found: dict[str, Any] = {"sagacity/saga_id": saga_id}
    if call_id is not None:
        found["sagacity/call_id"] = call_id
    assert found == saga_meta(saga_id, call_id)
    return saga_meta(saga_id, call_id)


def text(result: CallToolResult) -> str:
    """The text a tool result shows the model."""
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


def phases(entries: list[JournalEntry]) -> list[tuple[str, str | None, str | None]]:
    """(phase, tool, call id) of each entry."""
    return [(e.phase.name, e.tool_name, e.call_id) for e in entries]


def check_calls(entries: list[JournalEntry]) -> dict[str, list[Phase]]:
    """Assert seqs run 1..n and each outcome refers to its own call's INTENT; phases by call."""
    assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
    by_seq = {entry.seq: entry for entry in entries}
    calls: dict[str, list[Phase]] = {}
    for entry in entries:
        if entry.phase in (Phase.EXECUTED, Phase.FAILED):
            intent = by_seq[entry.ref_seq or 0]
            assert (intent.phase, intent.call_id) == (Phase.INTENT, entry.call_id)
        if entry.call_id is not None:
            calls.setdefault(entry.call_id, []).append(entry.phase)
    return calls


async def scripted_model(
    client: Client, saga_id: str, script: list[tuple[str, dict[str, Any]]]
) -> tuple[str, list[CallToolResult]]:
    """A model that calls each tool of `script` in turn, ignores errors and says "done"."""
    results = [await client.call_tool(name, args, meta=meta(saga_id)) for name, args in script]
    return "All done! Your order is on its way.", results


class Warehouse:
    """An upstream MCP server: the tools a proxy forwards to, and a log of what ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.started = asyncio.Event()
        self.server = self._server()

    def _server(self) -> MCPServer[Any]:
        server: MCPServer[Any] = MCPServer("warehouse")
        calls = self.calls

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def check_stock(sku: str) -> int:
            """How many units are on the shelf."""
            calls.append(("check_stock", sku))
            return 7

        @server.tool(annotations=ToolAnnotations(destructive_hint=False))
        def reserve(sku: str, qty: int) -> str:
            """Reserve units of a product."""
            calls.append(("reserve", (sku, qty)))
            return f"res-{sku}-{qty}"

        @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
        def release(reservation: str) -> str:
            """Release a reservation."""
            calls.append(("release", reservation))
            return "released"

        @server.tool(name="charge-card")
        def charge_card(amount: str) -> dict[str, str]:
            """Charge the customer's card."""
            calls.append(("charge-card", amount))
            return {"charge_id": f"ch-{amount}"}

        @server.tool()
        def refund(charge_id: str) -> str:
            """Refund a charge."""
            calls.append(("refund", charge_id))
            return "refunded"

        @server.tool(annotations=ToolAnnotations(destructive_hint=False))
        def ship(address: str) -> str:
            """Book the courier."""
            calls.append(("ship", address))
            raise RuntimeError("courier API answered 503")

        @server.tool()
        def cancel_shipment(address: str) -> str:
            """Cancel a booked courier."""
            calls.append(("cancel_shipment", address))
            return "cancelled"

        @server.tool()
        def wire(amount: str, to: str) -> str:
            """Wire money to a supplier."""
            calls.append(("wire", (amount, to)))
            return f"wire-{amount}-{to}"

        @server.tool(annotations=ToolAnnotations(destructive_hint=False))
        async def slow_label(order: str) -> str:
            """Print a shipping label (slowly)."""
            calls.append(("slow_label", order))
            self.started.set()
            await asyncio.sleep(5)
            return f"label-{order}"

        return server


class Branch:
    """An upstream server called "warehouse", as every branch's is: only its answers differ."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.calls: list[tuple[str, Any]] = []
        self.server = self._server()

    def _server(self) -> MCPServer[Any]:
        server: MCPServer[Any] = MCPServer("warehouse")
        calls, who = self.calls, self.who

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def whoami() -> str:
            """Which branch answers."""
            calls.append(("whoami", None))
            return who

        @server.tool(annotations=ToolAnnotations(destructive_hint=False))
        def reserve(sku: str) -> str:
            """Reserve a unit of a product."""
            calls.append(("reserve", sku))
            return f"{who}-{sku}"

        @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
        def release(reservation: str) -> str:
            """Release a reservation."""
            calls.append(("release", reservation))
            return "released"

        @server.tool(annotations=ToolAnnotations(destructive_hint=False))
        def ship(address: str) -> str:
            """Book the courier."""
            calls.append(("ship", address))
            raise RuntimeError("courier API answered 503")

        @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
        def cancel_shipment(address: str) -> str:
            """Cancel a booked courier."""
            calls.append(("cancel_shipment", address))
            return "cancelled"

        return server
