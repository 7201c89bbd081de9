"""Scenario 3: parallel tool calls in one model response, and cancelled siblings."""

from __future__ import annotations

import asyncio
import threading

from pydantic_ai.exceptions import ToolFailed

from sagacity import (
    CompensationContext,
    JournalEntry,
    Phase,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    verify,
)
from sagacity.integrations.pydantic_ai import saga_toolset
from tests.integrations.pydantic_ai._agents import (
    OrderTools,
    ScriptedModel,
    agent_with,
    call,
    journal_of,
)


def assert_well_formed(entries: list[JournalEntry]) -> None:
    """Seqs 1..n with no gap; every outcome follows and points at its own call's INTENT."""
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    by_seq = {e.seq: e for e in entries}
    for entry in entries:
        if entry.phase in (Phase.EXECUTED, Phase.FAILED):
            intent = by_seq[entry.ref_seq or 0]
            assert intent.phase is Phase.INTENT
            assert (intent.call_id, intent.tool_name) == (entry.call_id, entry.tool_name)
            assert intent.seq < entry.seq


class TestParallelCalls:
    async def test_parallel_calls_journal_without_gaps_and_compensate_in_reverse(
        self, sagacity: Sagacity
    ) -> None:
        """Parallel calls journal without gaps and compensate in reverse order.

        Three calls in one response run concurrently (sync ones in worker threads); the third
        fails and is swallowed. Every call is journaled under its own id, the chain verifies,
        and the two that ran are undone in reverse order of execution.
        """
        shop = OrderTools()
        model = ScriptedModel(
            [
                call("reserve_inventory", "call-1", sku="SKU-1", qty=2),
                call("charge_card", "call-2", amount_cents=1999),
                call("ship_order", "call-3", address="1 Main St"),
            ],
            "Done.",
        )
        agent = agent_with(model, saga_toolset(sagacity, shop))

        result = await sagacity.asaga("batch-1", lambda: agent.run("Order it all at once."))

        assert result.outcome is SagaOutcome.COMPENSATED
        entries = sagacity.history("batch-1")
        assert_well_formed(entries)
        assert verify(sagacity.journal, "batch-1").ok
        outcomes = {(e.call_id, e.phase.name) for e in entries if e.phase.name != "INTENT"}
        assert {("call-1", "EXECUTED"), ("call-2", "EXECUTED"), ("call-3", "FAILED")} <= outcomes
        executed = [e.call_id for e in entries if e.phase is Phase.EXECUTED]
        compensated = [e.call_id for e in entries if e.phase is Phase.COMPENSATED]
        assert compensated == executed[::-1]
        assert sorted(shop.undone) == [
            ("refund_card", "ch-1999"),
            ("release_inventory", "res-SKU-1-2"),
        ]


class Race:
    """Tools that run side by side until `fail` raises, uncaught, once the others are busy."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.waiting = asyncio.Event()
        self.blocking = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.undone: list[str] = []

    @compensable(by="undo")
    async def book_seat(self) -> str:
        """Finishes at once."""
        self.done.set()
        return "seat-1"

    @compensable(by="undo")
    async def book_hotel(self) -> str:
        """Waits for an answer that never comes: it is cancelled."""
        self.waiting.set()
        await asyncio.Event().wait()
        return "hotel-1"

    @compensable(by="undo")
    def book_car(self) -> str:
        """Blocks its worker thread until the test releases it."""
        self.blocking.set()
        self.release.wait(timeout=10)
        self.finished.set()
        return "car-1"

    @compensable(by="undo")
    async def book_train(self) -> str:
        """Fails once the others are done, waiting, or blocked."""
        await self.done.wait()
        await self.waiting.wait()
        while not self.blocking.is_set():
            await asyncio.sleep(0.001)
        raise RuntimeError("no trains today")

    @compensation
    def undo(self, ctx: CompensationContext) -> None:
        self.undone.append(ctx.call_id)


class TestCancelledSiblings:
    async def test_cancelled_siblings_are_in_doubt_not_compensated(
        self, sagacity: Sagacity
    ) -> None:
        """Cancelled siblings are in doubt, not compensated.

        An uncaught failure makes PydanticAI cancel the calls still running: the async one sees
        CancelledError, the sync one's worker thread is abandoned. Both are FAILED
        `outcome_unknown`, never compensated; the finished call is.
        """
        race = Race()
        model = ScriptedModel(
            [
                call("book_seat", "seat"),
                call("book_hotel", "hotel"),
                call("book_car", "car"),
                call("book_train", "train"),
            ]
        )
        agent = agent_with(model, saga_toolset(sagacity, race))

        result = await sagacity.asaga("trip-1", lambda: agent.run("Book the trip."))

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert str(result.error) == "no trains today"
        entries = sagacity.history("trip-1")
        assert_well_formed(entries)
        assert verify(sagacity.journal, "trip-1").ok
        failed = {e.call_id: e.payload for e in entries if e.phase is Phase.FAILED}
        assert failed["train"]["kind"] == "failure"
        assert failed["hotel"]["kind"] == "outcome_unknown"
        assert failed["hotel"]["error"]["type"] == "CancelledError"
        assert failed["car"]["kind"] == "outcome_unknown"
        assert result.compensation is not None
        assert sorted(ref.call_id for ref in result.compensation.in_doubt) == ["car", "hotel"]
        assert race.undone == ["seat"]

        # The abandoned thread is still running: the effect lands after the saga ended.
        assert not race.finished.is_set()
        race.release.set()
        assert race.finished.wait(timeout=10)
        assert len(sagacity.history("trip-1")) == len(entries)

    async def test_in_doubt_sibling_is_compensated_once_resolved(self, sagacity: Sagacity) -> None:
        """A human who finds the abandoned call did run records it; the next walk undoes it."""
        race = Race()
        model = ScriptedModel(
            [
                call("book_seat", "seat"),
                call("book_hotel", "hotel"),
                call("book_car", "car"),
                call("book_train", "train"),
            ]
        )
        agent = agent_with(model, saga_toolset(sagacity, race))
        await sagacity.asaga("trip-2", lambda: agent.run("Book the trip."))
        race.release.set()
        assert race.finished.wait(timeout=10)

        sagacity.resolve("trip-2", "car", executed=True, result="car-1", by="ops@example")
        again = sagacity.compensate("trip-2")

        assert again.outcome is SagaOutcome.NEEDS_ATTENTION
        assert race.undone == ["seat", "car"]
        assert journal_of(sagacity, "trip-2")[-5:] == [
            ("ENDED", None, None),
            ("EXECUTED", "book_car", "car"),
            ("COMPENSATING", "book_car", "car"),
            ("COMPENSATED", "book_car", "car"),
            ("ENDED", None, None),  # a new ENDED: the call is no longer in doubt
        ]
        assert verify(sagacity.journal, "trip-2").ok


class TestToolFailedInParallel:
    async def test_tool_failed_does_not_cancel_siblings(self, sagacity: Sagacity) -> None:
        """A swallowed failure (ToolFailed) cancels no sibling.

        The siblings finish and are compensated; none is in doubt.
        """
        shop = OrderTools(ship_error=ToolFailed("no carrier"))
        model = ScriptedModel(
            [
                call("ship_order", "call-3", address="x"),
                call("charge_card", "call-2", amount_cents=5),
            ],
            "Done.",
        )
        agent = agent_with(model, saga_toolset(sagacity, shop))

        result = await sagacity.asaga("batch-2", lambda: agent.run("go"))

        assert result.compensation is not None
        assert result.compensation.in_doubt == []
        assert [ref.call_id for ref in result.compensation.compensated] == ["call-2"]
