"""`sagacity/end` sent again, and `sagacity/compensate`, on `mcp_server`.

The proxy's side is driven over stdio against `mcp-server-git` in `test_third_party.py`.
"""

from __future__ import annotations

import pytest
from mcp import Client, MCPError

from sagacity import CompensationContext, Sagacity, compensable, compensation
from sagacity.integrations.mcp import (
    PROCESS_TOKEN,
    mcp_server,
    request_compensate_saga,
    request_end_saga,
)
from tests._threads import noting_this_thread
from tests.integrations.mcp._shop import meta


class Lockers:
    """Books lockers; freeing one fails while the locker API is down."""

    def __init__(self) -> None:
        self.api_down = True
        self.freed: list[str] = []

    @compensable(by="free")
    def book(self, locker: str) -> str:
        """Book a locker."""
        return f"booked-{locker}"

    @compensation
    def free(self, ctx: CompensationContext) -> None:
        if self.api_down:
            raise ConnectionError("locker API unreachable")
        self.freed.append(ctx.result)

    @compensable(by="free")
    def jam(self, locker: str) -> str:
        """Jam a locker (always fails)."""
        raise RuntimeError(f"locker {locker} is jammed")


class TestRetriedEnd:
    async def test_end_sent_again_answers_the_lists_of_the_ended_entry(self) -> None:
        """The second answer equals the first, compensated and failed lists included."""
        sagacity = Sagacity.from_url("memory://")
        lockers = Lockers()
        async with Client(mcp_server(sagacity, lockers)) as client:
            await client.call_tool("book", {"locker": "L1"}, meta=meta("e"))
            await client.call_tool("book", {"locker": "L2"}, meta=meta("e"))
            await client.call_tool("jam", {"locker": "L3"}, meta=meta("e"))
            first = await request_end_saga(client, "e")
            second = await request_end_saga(client, "e")

        ids = [f"book#2.{PROCESS_TOKEN}", f"book#1.{PROCESS_TOKEN}"]
        assert (first.outcome, first.compensation_failed) == ("COMPENSATION_FAILED", ids)
        assert second == first


class TestCompensateRequest:
    async def test_a_failed_undo_is_retried_once_the_cause_is_gone(self) -> None:
        """Retried after the API is back: both lockers freed, in reverse order, once each."""
        sagacity = Sagacity.from_url("memory://")
        lockers = Lockers()
        async with Client(mcp_server(sagacity, lockers)) as client:
            await client.call_tool("book", {"locker": "L1"}, meta=meta("c"))
            await client.call_tool("book", {"locker": "L2"}, meta=meta("c"))
            await client.call_tool("jam", {"locker": "L3"}, meta=meta("c"))
            failed = await request_end_saga(client, "c")
            still_down = await request_compensate_saga(client, "c")
            lockers.api_down = False
            retried = await request_compensate_saga(client, "c")
            again = await request_compensate_saga(client, "c")

        assert failed.outcome == still_down.outcome == "COMPENSATION_FAILED"
        assert (retried.outcome, retried.compensation_failed) == ("COMPENSATED", [])
        assert retried.compensated == [f"book#2.{PROCESS_TOKEN}", f"book#1.{PROCESS_TOKEN}"]
        assert again == retried
        assert lockers.freed == ["booked-L2", "booked-L1"]  # never twice

    async def test_open_unknown_and_completed_sagas_are_refused(self) -> None:
        """Each refusal is an MCP error naming the saga; a completed saga is never undone."""
        sagacity = Sagacity.from_url("memory://")
        lockers = Lockers()
        lockers.api_down = False
        async with Client(mcp_server(sagacity, lockers)) as client:
            with pytest.raises(MCPError, match="saga 'ghost' has no journal entries"):
                await request_compensate_saga(client, "ghost")
            await client.call_tool("book", {"locker": "L1"}, meta=meta("ok"))
            with pytest.raises(MCPError, match="saga 'ok' is still open; end it"):
                await request_compensate_saga(client, "ok")
            await request_end_saga(client, "ok")
            with pytest.raises(MCPError, match="saga 'ok' ended COMPLETED"):
                await request_compensate_saga(client, "ok")

        assert lockers.freed == []


class TestTheLoopIsNotBlocked:
    async def test_ending_and_compensating_read_the_journal_off_the_loop(
        self, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every read of the journal an MCP request makes runs on a worker thread.

        A read on the loop would wait there for the journal's connection whenever
        another saga's commit holds it, and stall every request of the server meanwhile.
        """
        sagacity = Sagacity.from_url(sqlite_url)
        lockers = Lockers()
        lockers.api_down = False
        read_on_the_loop: list[bool] = []
        journal = sagacity.journal
        monkeypatch.setattr(
            journal, "entries", noting_this_thread(journal.entries, read_on_the_loop)
        )
        try:
            async with Client(mcp_server(sagacity, lockers)) as client:
                await client.call_tool("book", {"locker": "L1"}, meta=meta("failed"))
                await client.call_tool("jam", {"locker": "L2"}, meta=meta("failed"))
                await client.call_tool("book", {"locker": "L3"}, meta=meta("done"))
                failed = await request_end_saga(client, "failed")
                again = await request_compensate_saga(client, "failed")
                done = await request_end_saga(client, "done")
        finally:
            sagacity.close()

        assert (failed.outcome, again.outcome, done.outcome) == (
            "COMPENSATED",
            "COMPENSATED",
            "COMPLETED",
        )
        assert lockers.freed == ["booked-L1"]
        assert read_on_the_loop != []
        assert not any(read_on_the_loop)
