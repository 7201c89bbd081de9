"""The MCP proxy: an upstream tool's reconciler is another upstream tool (`get_charge`).

The doubt is the one a proxy killed mid-call leaves: the charge's INTENT with no outcome,
the upstream having charged or not. A proxy built again asks `get_charge` as it
compensates, and refunds through the upstream the charge it finds.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra: pip install 'sagacity[mcp]'")

from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from sagacity import ConfigurationError, Phase, Reconciled, Sagacity, SagaOutcome
from sagacity.integrations.mcp import Compensate, Reconcile, mcp_proxy


class Payments:
    """The upstream server: charges by key, refunds, and a read-only lookup."""

    def __init__(self) -> None:
        self.charges: dict[str, str] = {}
        self.refunds: list[str] = []
        self.lookups: list[str] = []
        self.server: MCPServer[Any] = MCPServer("payments")

        @self.server.tool()
        def charge(amount: str, key: str) -> dict[str, str]:
            self.charges[key] = f"ch-{key}"
            return {"charge_id": self.charges[key]}

        @self.server.tool()
        def refund(charge_id: str) -> str:
            self.refunds.append(charge_id)
            return "refunded"

        @self.server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def get_charge(key: str) -> dict[str, Any]:
            self.lookups.append(key)
            found = self.charges.get(key)
            return {"found": found is not None, "charge_id": found or ""}


UNDO = {
    "charge": Compensate(
        tool="refund",
        args=lambda call_input, result: {"charge_id": result.structured_content["charge_id"]},
        reconcile=Reconcile(
            tool="get_charge",
            args=lambda call_input, ctx: {"key": call_input["key"]},
            verdict=lambda answer: (
                Reconciled.landed(answer)
                if answer.structured_content and answer.structured_content["found"]
                else Reconciled.did_not_land()
            ),
        ),
    )
}


def killed_mid_charge(sagacity: Sagacity) -> None:
    """What a proxy killed between the charge's INTENT and its EXECUTED leaves."""
    sagacity.journal.append(
        "s-1",
        Phase.INTENT,
        tool_name="charge",
        call_id="call-7",
        payload={"input": {"amount": "9.99", "key": "k-7"}, "reversibility": "COMPENSATABLE"},
    )


class TestProxyReconciler:
    @pytest.mark.parametrize("charged", [True, False])
    async def test_the_lookup_settles_the_doubt(self, charged: bool) -> None:
        """Found: refunded once through the upstream, COMPENSATED. Not found: nothing refunded."""
        upstream = Payments()
        if charged:
            upstream.charges["k-7"] = "ch-k-7"
        sagacity = Sagacity.from_url("memory://")
        killed_mid_charge(sagacity)
        async with Client(upstream.server) as client:
            await mcp_proxy(sagacity, client, UNDO)
            result = await sagacity.acompensate("s-1")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert upstream.lookups == ["k-7"]
        assert upstream.refunds == (["ch-k-7"] if charged else [])
        (verdict,) = [e for e in sagacity.history("s-1") if e.phase is Phase.RECONCILED]
        assert verdict.payload["verdict"] == ("landed" if charged else "did_not_land")
        assert verdict.payload["decided_by"] == "reconciler:charge"
        assert verdict.payload["evidence"]["reference"] == "get_charge"

    async def test_a_lookup_the_upstream_lacks_is_refused_when_the_proxy_is_built(self) -> None:
        """Its name is checked against the upstream's tools, as a Compensate's is."""
        undo = {"charge": Compensate(tool="refund", reconcile=Reconcile(tool="no_such_tool"))}
        async with Client(Payments().server) as client:
            with pytest.raises(
                ConfigurationError, match=r"a Reconcile\(tool=\.\.\.\) names 'no_such"
            ):
                await mcp_proxy(Sagacity.from_url("memory://"), client, undo)

    async def test_a_lookup_that_errs_leaves_the_doubt(self) -> None:
        """An `isError` answer: unknown, journaled, NEEDS_ATTENTION, nothing refunded."""
        upstream = Payments()
        lookup = Reconcile(tool="get_charge", args=lambda call_input, ctx: {})  # no key: an error
        undo = {"charge": Compensate(tool="refund", reconcile=lookup)}
        sagacity = Sagacity.from_url("memory://")
        killed_mid_charge(sagacity)
        async with Client(upstream.server) as client:
            await mcp_proxy(sagacity, client, undo)
            result = await sagacity.acompensate("s-1")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert upstream.refunds == []
        (verdict,) = [e for e in sagacity.history("s-1") if e.phase is Phase.RECONCILED]
        assert verdict.payload["verdict"] == "unknown"
