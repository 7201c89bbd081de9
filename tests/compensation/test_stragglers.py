"""Calls the work left running when it failed: undone too, or listed, never left live.

`asyncio.gather` raises at the first failure and leaves the other calls running; a
thread started by the work runs on after it. The run waits for them before it walks
(`running_call_wait`); one still running then is in doubt, and its late outcome is
refused. An EXECUTED that lands after the walk planned its undos anyway (written by
something the run does not wait for) is listed, never left live.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    Phase,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    compensable,
    compensation,
)
from sagacity.compensation._runner import CompensationRunner


class Bookings:
    """Book rooms; some bookings wait to be let through; undos are logged in order."""

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity
        self.undone: list[str] = []
        self.let_through = asyncio.Event()
        self.late: asyncio.Future[Any] | None = None
        self.tools = {tool.name: tool for tool in sagacity.wrap(self)}

    @compensable(by="cancel")
    async def book(self, room: str) -> str:
        return room

    @compensable(by="cancel")
    async def book_later(self, room: str) -> str:
        await self.let_through.wait()
        return room

    @compensable(by="cancel")
    async def fail(self, room: str) -> str:
        raise RuntimeError(f"room {room} is gone")

    @compensation
    async def cancel(self, ctx: CompensationContext) -> None:
        self.undone.append(ctx.result)
        if ctx.result == "first" and self.late is not None:
            self.let_through.set()  # the walk's first undo lets the late booking finish
            await asyncio.wait([self.late])


@pytest.fixture
def impatient(store_url: str) -> Any:
    """A Sagacity whose runs do not wait for the calls their work left running."""
    sagacity = Sagacity.from_url(store_url, running_call_wait=0)
    yield sagacity
    sagacity.close()


async def test_a_call_finishing_during_the_walk_is_in_doubt_not_journaled(
    impatient: Sagacity,
) -> None:
    """Past the wait, the call is in doubt, and its EXECUTED during the walk is refused.

    The walk does not plan on it, and the saga needs attention. Resolved, it is undone.
    """
    bookings = Bookings(impatient)
    tools = bookings.tools

    async def work() -> None:
        await tools["book"]("first")
        bookings.late = asyncio.ensure_future(tools["book_later"]("late"))
        await asyncio.gather(bookings.late, tools["fail"]("gone"))

    result = await impatient.asaga("s", work)

    assert result.outcome is SagaOutcome.NEEDS_ATTENTION
    assert bookings.undone == ["first"]
    assert result.compensation is not None
    assert [ref.call_id for ref in result.compensation.in_doubt] == ["book_later#1"]
    assert bookings.late is not None
    assert isinstance(bookings.late.exception(), SagaStateError)
    assert impatient.history("s")[-1].phase is Phase.ENDED

    impatient.resolve("s", "book_later#1", executed=True, result="late", by="ops")
    bookings.late = None
    again = await impatient.acompensate("s")
    assert again.outcome is SagaOutcome.COMPENSATED
    assert bookings.undone == ["first", "late"]


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
        # A writer the run does not wait for (another process under the lease, say).
        (intent,) = [e for e in history.entries if e.call_id == "t#1"]
        history.append(
            sagacity.journal,
            Phase.EXECUTED,
            tool_name=intent.tool_name,
            call_id="t#1",
            ref_seq=intent.seq,
            payload={"result": "elsewhere"},
        )
        return report(history, plan)

    async def work() -> None:
        await tools["book"]("first")
        sagacity.journal.append(
            "s", Phase.INTENT, tool_name="book", call_id="t#1", payload={"input": {}}
        )
        await tools["fail"]("gone")

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
    assert bookings.undone == ["first", "elsewhere"]
