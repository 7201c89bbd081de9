"""A client's `sagacity/call_id` names one call: swapped tools and shared ids are refused.

A client chooses the call id. Under the id of an approved call of one tool, another tool
is refused before it runs, by the server and by the proxy alike; two requests under one id
at once, or a second call of other input under a used id, never share its request.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from sagacity import Reversibility, Sagacity, compensable, verify
from sagacity.integrations.mcp import APPROVAL_META, Compensate, mcp_proxy, mcp_server
from sagacity.integrations.mcp import PROCESS_TOKEN as TOKEN
from tests.integrations.mcp._shop import Shop, Warehouse, meta, phases, text

WIRE = {"amount": "100.00", "to": "ACME-IBAN"}


class Accounts:
    """A second IRREVERSIBLE tool, to swap in under an approved wire's call id."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def close_account(self, account: str) -> str:
        """Close a customer's account for good."""
        self.closed.append(account)
        return f"closed-{account}"


class Packing:
    """A packing step that waits until the test lets it finish."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.packed: list[int] = []

    @compensable(by="unpack")
    async def pack(self, box: int) -> str:
        """Pack a box."""
        self.started.set()
        await self.finish.wait()
        self.packed.append(box)
        return f"packed-{box}"

    def unpack(self) -> None:
        """Unpack it."""


def refused(sagacity: Sagacity, saga_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in sagacity.history(saga_id) if e.phase.name == "REFUSED"]


SWAPS = {
    "compensable": ("reserve_inventory", {"sku": "A", "qty": 1}),
    "irreversible": ("close_account", {"account": "ACME-1"}),
}


class TestToolSwapOnTheServer:
    @pytest.mark.parametrize("swap", sorted(SWAPS))
    async def test_another_tool_under_an_approved_call_id_is_refused(self, swap: str) -> None:
        """Tool B sent under the `sagacity/call_id` of an approved call of tool A: refused.

        Nothing runs, REFUSED (tool_mismatch) names the request, and the approval still
        belongs to A: sent with its id, A runs once. B under that id afterwards is refused
        again: the journal holds A there.
        """
        sagacity, shop, accounts = Sagacity.from_url("memory://"), Shop(), Accounts()
        name, args = SWAPS[swap]
        async with Client(mcp_server(sagacity, shop, accounts)) as client:
            waiting = await client.call_tool("send_wire_transfer", WIRE, meta=meta("s1", "toolu_1"))
            request_id = (waiting.meta or {})[APPROVAL_META]["request_id"]
            sagacity.approve("s1", approver="alice@ops")
            swapped = await client.call_tool(name, args, meta=meta("s1", "toolu_1"))
            states = [(r.tool_name, r.state) for r in sagacity.pending("s1")]
            ran = await client.call_tool("send_wire_transfer", WIRE, meta=meta("s1", "toolu_1"))
            again = await client.call_tool(name, args, meta=meta("s1", "toolu_1"))

        assert swapped.is_error
        assert text(swapped) == (
            f"Error executing tool {name}: saga 's1': call id 'toolu_1' was asked for tool "
            f"'send_wire_transfer' (request {request_id}, seq 1); tool {name!r} is not run "
            "under it. Give every call its own id"
        )
        assert states == [("send_wire_transfer", "approved")]
        assert text(ran) == "wire-100.00-ACME-IBAN"
        assert again.is_error
        assert "call id 'toolu_1' was used by tool 'send_wire_transfer'" in text(again)
        assert shop.events == [("send_wire_transfer", "100.00", "ACME-IBAN")]
        assert accounts.closed == []
        assert phases(sagacity.history("s1")) == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "toolu_1"),
            ("APPROVED", "send_wire_transfer", "toolu_1"),
            ("REFUSED", name, "toolu_1"),
            ("INTENT", "send_wire_transfer", "toolu_1"),
            ("EXECUTED", "send_wire_transfer", "toolu_1"),
        ]
        ((reason, named),) = [(p["reason"], p["request_id"]) for p in refused(sagacity, "s1")]
        assert (reason, named) == ("tool_mismatch", request_id)
        assert verify(sagacity.journal, "s1").ok


class TestToolSwapThroughTheProxy:
    @pytest.mark.parametrize(
        ("name", "args"),
        [("reserve", {"sku": "A", "qty": 1}), ("refund", {"charge_id": "ch-1"})],
        ids=["compensable", "irreversible"],
    )
    async def test_another_upstream_tool_under_an_approved_call_id_is_refused(
        self, name: str, args: dict[str, Any]
    ) -> None:
        """Through the proxy: nothing reaches the upstream under another tool's approval.

        The refused call is journaled REFUSED on the proxy; the approved wire is forwarded
        once when it is sent under its id.
        """
        upstream, sagacity = Warehouse(), Sagacity.from_url("memory://")
        undo = {"reserve": Compensate(tool="release", args=lambda i, r: {"reservation": ""})}
        async with Client(upstream.server) as client_of_upstream:
            proxy = await mcp_proxy(sagacity, client_of_upstream, undo)
            async with Client(proxy) as client:
                waiting = await client.call_tool(
                    "wire", {"amount": "9", "to": "X"}, meta=meta("p1", "tc-9")
                )
                request_id = (waiting.meta or {})[APPROVAL_META]["request_id"]
                sagacity.approve("p1", approver="alice@ops")
                swapped = await client.call_tool(name, args, meta=meta("p1", "tc-9"))
                reached = list(upstream.calls)
                ran = await client.call_tool(
                    "wire", {"amount": "9", "to": "X"}, meta=meta("p1", "tc-9")
                )

        assert swapped.is_error
        assert text(swapped) == (
            f"tool {name!r}: saga 'p1': call id 'tc-9' was asked for tool 'wire' (request "
            f"{request_id}, seq 1); tool {name!r} is not run under it. Give every call its own id"
        )
        assert reached == []
        assert text(ran) == "wire-9-X"
        assert upstream.calls == [("wire", ("9", "X"))]
        assert phases(sagacity.history("p1")) == [
            ("AWAITING_APPROVAL", "wire", "tc-9"),
            ("APPROVED", "wire", "tc-9"),
            ("REFUSED", name, "tc-9"),
            ("INTENT", "wire", "tc-9"),
            ("EXECUTED", "wire", "tc-9"),
        ]
        assert [p["reason"] for p in refused(sagacity, "p1")] == ["tool_mismatch"]


class TestOneIdForTwoCalls:
    async def test_a_second_request_under_a_running_call_id_is_refused(self) -> None:
        """Two requests under one `sagacity/call_id` at once: the second is refused.

        The first is still running; the second, of other input, does not run and does not
        share the first's journal entries; REFUSED (duplicate_call_id) records it.
        """
        sagacity, packing = Sagacity.from_url("memory://"), Packing()
        async with Client(mcp_server(sagacity, packing)) as client:
            first = asyncio.create_task(
                client.call_tool("pack", {"box": 1}, meta=meta("d1", "toolu_7"))
            )
            await asyncio.wait_for(packing.started.wait(), timeout=10)
            second = await client.call_tool("pack", {"box": 2}, meta=meta("d1", "toolu_7"))
            packing.finish.set()
            done = await asyncio.wait_for(first, timeout=10)

        assert second.is_error
        assert text(second) == (
            "Error executing tool pack: saga 'd1': call id 'toolu_7' is in use by another "
            "request of the saga that is still running; this call of tool 'pack' is not run. "
            "Give every call its own id, and send a call again only once it has answered"
        )
        assert text(done) == "packed-1"
        assert packing.packed == [1]
        assert phases(sagacity.history("d1")) == [
            ("INTENT", "pack", "toolu_7"),
            ("REFUSED", "pack", "toolu_7"),
            ("EXECUTED", "pack", "toolu_7"),
        ]
        assert [p["reason"] for p in refused(sagacity, "d1")] == ["duplicate_call_id"]

    async def test_a_second_wire_under_one_call_id_never_shares_its_request(self) -> None:
        """Two wires of other input sent under one call id: one request, for the first alone.

        The second is refused before it runs (its input does not hash to the request's)
        and is never asked for; approved, the first runs once, and the second, sent again,
        is refused: the id has run another input.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        other = {"amount": "5000.00", "to": "MALLORY"}
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("d2", "toolu_8"))
            second = await client.call_tool("send_wire_transfer", other, meta=meta("d2", "toolu_8"))
            (request,) = sagacity.pending("d2")
            sagacity.approve("d2", approver="alice@ops", expected_sha256=request.input_sha256)
            ran = await client.call_tool("send_wire_transfer", WIRE, meta=meta("d2", "toolu_8"))
            again = await client.call_tool("send_wire_transfer", other, meta=meta("d2", "toolu_8"))

        assert request.input == WIRE
        assert second.is_error
        assert "the input now hashes to" in text(second)
        assert text(ran) == "wire-100.00-ACME-IBAN"
        assert again.is_error
        assert "already ran at seq" in text(again)
        assert shop.events == [("send_wire_transfer", "100.00", "ACME-IBAN")]
        assert phases(sagacity.history("d2")) == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "toolu_8"),
            ("REFUSED", "send_wire_transfer", "toolu_8"),
            ("APPROVED", "send_wire_transfer", "toolu_8"),
            ("INTENT", "send_wire_transfer", "toolu_8"),
            ("EXECUTED", "send_wire_transfer", "toolu_8"),
        ]
        assert [p["reason"] for p in refused(sagacity, "d2")] == ["input_mismatch"]

    async def test_the_proxy_refuses_a_second_request_under_a_running_call_id(self) -> None:
        """Through the proxy, a second request under a running call id never reaches upstream."""
        packing = Packing()
        upstream: MCPServer[Any] = MCPServer("packer")

        @upstream.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def pack(box: int) -> str:
            """Pack a box."""
            return await packing.pack(box)

        sagacity = Sagacity.from_url("memory://")
        async with Client(upstream) as client_of_upstream:
            proxy = await mcp_proxy(sagacity, client_of_upstream)
            async with Client(proxy) as client:
                first = asyncio.create_task(
                    client.call_tool("pack", {"box": 1}, meta=meta("d3", "tc-1"))
                )
                await asyncio.wait_for(packing.started.wait(), timeout=10)
                second = await client.call_tool("pack", {"box": 2}, meta=meta("d3", "tc-1"))
                packing.finish.set()
                done = await asyncio.wait_for(first, timeout=10)

        assert second.is_error
        assert "call id 'tc-1' is in use by another request of the saga" in text(second)
        assert text(done) == "packed-1"
        assert packing.packed == [1]
        assert [p[0] for p in phases(sagacity.history("d3"))] == ["INTENT", "REFUSED", "EXECUTED"]

    async def test_the_id_is_free_again_once_its_request_answered(self) -> None:
        """Sent again after it answered, the same call replays its result: a safe retry."""
        sagacity, packing = Sagacity.from_url("memory://"), Packing()
        packing.finish.set()
        async with Client(mcp_server(sagacity, packing)) as client:
            first = await client.call_tool("pack", {"box": 1}, meta=meta("d4", "toolu_9"))
            retried = await client.call_tool("pack", {"box": 1}, meta=meta("d4", "toolu_9"))
            another = await client.call_tool("pack", {"box": 3}, meta=meta("d4"))

        assert text(first) == text(retried) == "packed-1"
        assert text(another) == "packed-3"
        assert packing.packed == [1, 3]
        assert phases(sagacity.history("d4")) == [
            ("INTENT", "pack", "toolu_9"),
            ("EXECUTED", "pack", "toolu_9"),
            ("INTENT", "pack", f"pack#1.{TOKEN}"),
            ("EXECUTED", "pack", f"pack#1.{TOKEN}"),
        ]


MINUTE = datetime.timedelta(minutes=1)


class TestOneWorkerPerSaga:
    async def test_a_saga_held_elsewhere_refuses_the_call(self, sqlite_url: str) -> None:
        """While another worker holds the saga, an MCP call of it is refused and runs nothing.

        Once the other worker is done, the next call of the saga runs.
        """
        sagacity, other, shop = Sagacity.from_url(sqlite_url), Sagacity.from_url(sqlite_url), Shop()
        lease = other.journal.acquire_lease(
            "pay-9", "another-worker", now=other.now(), expires_at=other.now() + MINUTE
        )
        try:
            async with Client(mcp_server(sagacity, shop)) as client:
                refused = await client.call_tool(
                    "reserve_inventory", {"sku": "SKU-1", "qty": 1}, meta=meta("pay-9")
                )
                other.journal.release_lease(lease)
                ran = await client.call_tool(
                    "reserve_inventory", {"sku": "SKU-1", "qty": 1}, meta=meta("pay-9")
                )
            assert refused.is_error
            assert "is held by another-worker" in text(refused)
            assert not ran.is_error
            assert [name for name, *_ in shop.events] == ["reserve_inventory"]
        finally:
            sagacity.close()
            other.close()
