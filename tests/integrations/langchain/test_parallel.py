"""Scenario 3: parallel tool calls in one model turn, and a sibling cancelled mid-call."""

from __future__ import annotations

import asyncio
import threading

import pytest
from langchain_core.messages import HumanMessage

from sagacity import CompensationContext, Sagacity, SagaOutcome, compensable, compensation
from sagacity.audit import verify
from sagacity.integrations.langchain import langchain_tools
from tests.integrations.langchain._agents import (
    OrderTools,
    calls,
    prebuilt_agent,
    scripted,
    tool_call,
    tool_node_graph,
)

REQUEST = {"messages": [HumanMessage("Ship it.")]}


def journal_of(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None, str | None]]:
    return [(e.phase.name, e.tool_name, e.call_id) for e in sagacity.history(saga_id)]


def phases_by_call(sagacity: Sagacity, saga_id: str) -> dict[str | None, list[str]]:
    found: dict[str | None, list[str]] = {}
    for entry in sagacity.history(saga_id):
        found.setdefault(entry.call_id, []).append(entry.phase.name)
    return found


class RelayTools:
    """Two async tools whose order is forced: `hold` finishes only after `relay` did."""

    def __init__(self) -> None:
        self.relayed = asyncio.Event()

    @compensable(by="undo")
    async def hold(self, n: int) -> str:
        """Hold a slot until the relay passes."""
        await self.relayed.wait()
        return f"held-{n}"

    @compensable(by="undo")
    async def relay(self, n: int) -> str:
        """Pass the relay."""
        self.relayed.set()
        return f"relayed-{n}"

    @compensation
    def undo(self) -> None:
        pass


class BarrierTools:
    """Three sync tools that wait for each other, so all three are in flight at once."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(3, timeout=10)

    @compensable(by="undo")
    def pack(self, box: int) -> str:
        """Pack a box."""
        self.barrier.wait()
        return f"packed-{box}"

    @compensation
    def undo(self) -> None:
        pass


class CourierTools:
    """A pickup that waits on the courier, and a label printer that jams."""

    def __init__(self) -> None:
        self.pickup_started = asyncio.Event()
        self.courier_answers = asyncio.Event()
        self.pickup_finished = asyncio.Event()
        self.undone: list[tuple[str, object]] = []

    @compensable(by="cancel_pickup")
    async def book_pickup(self, address: str) -> str:
        """Book a courier pickup."""
        self.pickup_started.set()
        await self.courier_answers.wait()
        self.pickup_finished.set()
        return f"pickup-{address}"

    @compensation
    def cancel_pickup(self, ctx: CompensationContext) -> None:
        self.undone.append(("cancel_pickup", ctx.result))

    @compensable(by="void_label")
    async def print_label(self, address: str) -> str:
        """Print the shipping label."""
        await self.pickup_started.wait()  # jam only once the pickup is in flight
        raise RuntimeError("label printer jammed")

    @compensation
    def void_label(self, ctx: CompensationContext) -> None:
        self.undone.append(("void_label", ctx.result))


RESERVE_TURN = calls(tool_call("reserve_inventory", "call-1", sku="SKU-1", qty=1))
PARALLEL_TURN = calls(
    tool_call("book_pickup", "call-2", address="dock 4"),
    tool_call("print_label", "call-3", address="dock 4"),
)


class TestParallelJournal:
    async def test_interleaved_async_calls_journal_without_gaps(self) -> None:
        """Under `ainvoke` the calls interleave (INTENT a, INTENT b, EXECUTED b, EXECUTED a).

        Each outcome refers to its own INTENT, seqs have no gaps and the chain verifies.
        """
        sagacity = Sagacity.from_url("memory://")
        turn = calls(tool_call("hold", "call-a", n=1), tool_call("relay", "call-b", n=2))
        graph = tool_node_graph(scripted(turn, "done"), langchain_tools(sagacity, RelayTools()))

        result = await sagacity.asaga("relay-1", lambda: graph.ainvoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPLETED
        entries = sagacity.history("relay-1")
        assert journal_of(sagacity, "relay-1") == [
            ("INTENT", "hold", "call-a"),
            ("INTENT", "relay", "call-b"),
            ("EXECUTED", "relay", "call-b"),
            ("EXECUTED", "hold", "call-a"),
            ("ENDED", None, None),
        ]
        assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
        assert [e.ref_seq for e in entries[2:4]] == [2, 1]
        assert verify(sagacity.journal, "relay-1").ok

    def test_concurrent_sync_calls_journal_without_gaps(self, sagacity: Sagacity) -> None:
        """Under `invoke` three calls run in threads, all in flight at once; the chain verifies."""
        turn = calls(*(tool_call("pack", f"call-{n}", box=n) for n in (1, 2, 3)))
        graph = tool_node_graph(scripted(turn, "done"), langchain_tools(sagacity, BarrierTools()))

        result = sagacity.saga("pack-1", lambda: graph.invoke(REQUEST))

        assert result.outcome is SagaOutcome.COMPLETED
        entries = sagacity.history("pack-1")
        assert [e.seq for e in entries] == list(range(1, 8))
        assert [e.phase.name for e in entries] == ["INTENT"] * 3 + ["EXECUTED"] * 3 + ["ENDED"]
        intents = {e.call_id: e.seq for e in entries[:3]}
        assert sorted(intents) == ["call-1", "call-2", "call-3"]
        assert {e.call_id: e.ref_seq for e in entries[3:6]} == intents
        assert {e.call_id: e.payload for e in entries[3:6]} == {
            f"call-{n}": {"result": f"packed-{n}"} for n in (1, 2, 3)
        }
        assert verify(sagacity.journal, "pack-1").ok


class TestCancelledSibling:
    async def test_a_cancelled_sibling_is_in_doubt_not_compensated(self) -> None:
        """create_agent runs each call as its own task; when one fails LangGraph cancels the other.

        The cancelled call is journaled FAILED with its outcome unknown, listed in doubt
        and never compensated; the earlier reservation is compensated.
        """
        sagacity = Sagacity.from_url("memory://")
        shop, courier = OrderTools(), CourierTools()
        model = scripted(RESERVE_TURN, PARALLEL_TURN, "done")
        agent = prebuilt_agent(model, langchain_tools(sagacity, shop, courier), swallow=False)

        result = await sagacity.asaga("ship-1", lambda: agent.ainvoke(REQUEST))

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert str(result.error) == "label printer jammed"
        assert phases_by_call(sagacity, "ship-1") == {
            "call-1": ["INTENT", "EXECUTED", "COMPENSATING", "COMPENSATED"],
            "call-2": ["INTENT", "FAILED"],
            "call-3": ["INTENT", "FAILED"],
            None: ["ENDED"],
        }
        failed = {
            e.call_id: e.payload for e in sagacity.history("ship-1") if e.phase.name == "FAILED"
        }
        assert failed == {
            "call-2": {
                "kind": "outcome_unknown",
                "error": {"type": "CancelledError", "message": ""},
            },
            "call-3": {
                "kind": "failure",
                "error": {"type": "RuntimeError", "message": "label printer jammed"},
            },
        }
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-2"]
        assert [ref.call_id for ref in result.compensation.compensated] == ["call-1"]
        assert shop.undone == [("release_inventory", "res-SKU-1-1")]
        assert courier.undone == []
        assert sagacity.history("ship-1")[-1].payload == {
            "outcome": "NEEDS_ATTENTION",
            "error": {"type": "RuntimeError", "message": "label printer jammed"},
            "compensated": ["call-1"],
            "compensation_failed": [],
            "in_doubt": ["call-2"],
        }
        assert verify(sagacity.journal, "ship-1").ok

    async def test_a_tool_node_does_not_cancel_its_sibling(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A hand-built ToolNode does not cancel a sibling: the sibling outlives the saga.

        Its `asyncio.gather` propagates the first error and leaves the other call running.
        Past `running_call_wait` (here none) it is in doubt when the saga ends; its
        EXECUTED, when it comes, is refused (nothing follows ENDED) and logged; resolved,
        `Sagacity.acompensate` then undoes it.
        """
        sagacity = Sagacity.from_url("memory://", running_call_wait=0)
        shop, courier = OrderTools(), CourierTools()
        model = scripted(RESERVE_TURN, PARALLEL_TURN, "done")
        tools = langchain_tools(sagacity, shop, courier)
        graph = tool_node_graph(model, tools, handle_tool_errors=False)

        result = await sagacity.asaga("ship-1", lambda: graph.ainvoke(REQUEST))

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-2"]
        assert courier.undone == []

        courier.courier_answers.set()
        await asyncio.wait_for(courier.pickup_finished.wait(), timeout=10)
        await asyncio.sleep(0)  # let the tool try to journal its EXECUTED
        assert journal_of(sagacity, "ship-1")[-1] == ("ENDED", None, None)
        assert "'call-2' of tool 'book_pickup' came to EXECUTED" in caplog.text

        sagacity.resolve("ship-1", "call-2", executed=True, result="pickup-dock 4", by="ops")
        again = await sagacity.acompensate("ship-1")

        assert again.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "ship-1")[-4:] == [
            ("EXECUTED", "book_pickup", "call-2"),
            ("COMPENSATING", "book_pickup", "call-2"),
            ("COMPENSATED", "book_pickup", "call-2"),
            ("ENDED", None, None),
        ]
        assert sagacity.history("ship-1")[-1].payload["in_doubt"] == []
        assert courier.undone == [("cancel_pickup", "pickup-dock 4")]
        assert shop.undone == [("release_inventory", "res-SKU-1-1")]  # not undone twice
        assert verify(sagacity.journal, "ship-1").ok
