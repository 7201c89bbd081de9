"""Calls the work left running when it failed: undone too, or listed, never left live.

`asyncio.gather` raises at the first failure and leaves the other calls running; a
thread started by the work runs on after it. Their EXECUTED may land while the
compensation walk runs, or after it planned its undos.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from sagacity import CompensationContext, Phase, Sagacity, SagaOutcome, compensable, compensation
from sagacity.compensation._runner import CompensationRunner


class Bookings:
    """Book rooms; some bookings wait to be let through; undos are logged in order."""

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity
        self.undone: list[str] = []
        self.let_through = asyncio.Event()
        self.thread_let_through = threading.Event()
        self.tools = {tool.name: tool for tool in sagacity.wrap(self)}

    @compensable(by="cancel")
    async def book(self, room: str) -> str:
        return room

    @compensable(by="cancel")
    async def book_later(self, room: str) -> str:
        await self.let_through.wait()
        return room

    @compensable(by="cancel")
    def book_on_a_thread(self, room: str) -> str:
        assert self.thread_let_through.wait(30)
        return room

    @compensable(by="cancel")
    async def fail(self, room: str) -> str:
        raise RuntimeError(f"room {room} is gone")

    @compensation
    async def cancel(self, ctx: CompensationContext) -> None:
        self.undone.append(ctx.result)
        if ctx.result == "first" and self.booked("book_later", Phase.INTENT):
            self.let_through.set()  # the walk's first undo lets the late booking finish
            for _ in range(1000):
                if self.booked("book_later", Phase.EXECUTED):
                    break
                await asyncio.sleep(0.005)

    def booked(self, tool: str, phase: Phase) -> bool:
        return any(e.phase is phase and e.tool_name == tool for e in self.sagacity.history("s"))


async def test_a_call_that_executes_during_the_walk_is_undone_too(sagacity: Sagacity) -> None:
    """It executed after the walk had planned: it is undone after the others, once."""
    bookings = Bookings(sagacity)
    tools = bookings.tools

    async def work() -> None:
        await tools["book"]("first")
        await asyncio.gather(tools["book_later"]("late"), tools["fail"]("gone"))

    result = await sagacity.asaga("s", work)

    assert result.outcome is SagaOutcome.COMPENSATED
    assert bookings.undone == ["first", "late"]
    assert result.compensation is not None
    assert [ref.call_id for ref in result.compensation.compensated] == [
        "book#1",
        "book_later#1",
    ]
    assert result.compensation.in_doubt == []


async def test_a_call_that_executes_after_the_walk_planned_is_listed_live(
    sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its EXECUTED lands once the walk has run out of undos: the saga needs attention.

    Compensated again, it is undone.
    """
    bookings = Bookings(sagacity)
    tools = bookings.tools
    report = CompensationRunner._report

    def late_report(history: Any, plan: Any) -> Any:
        bookings.thread_let_through.set()  # the thread's EXECUTED lands now
        for _ in range(3000):
            if any(c.executed for c in history.calls.values() if c.intent.call_id == "t#1"):
                break
            time.sleep(0.001)
        return report(history, plan)

    async def work() -> None:
        await tools["book"]("first")
        booking = tools["book_on_a_thread"]
        thread = asyncio.to_thread(lambda: booking.invoke(("on a thread",), {}, call_id="t#1"))
        await asyncio.gather(thread, tools["fail"]("gone"))

    monkeypatch.setattr(CompensationRunner, "_report", staticmethod(late_report))
    result = await sagacity.asaga("s", work)
    monkeypatch.undo()

    assert result.outcome is SagaOutcome.NEEDS_ATTENTION
    assert bookings.undone == ["first"]
    assert result.compensation is not None
    (live,) = result.compensation.in_doubt
    assert live.call_id == "t#1"
    assert "executed after the compensation walk had planned" in (live.error or "")

    again = await sagacity.acompensate("s")
    assert again.outcome is SagaOutcome.COMPENSATED
    assert bookings.undone == ["first", "on a thread"]
