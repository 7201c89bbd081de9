"""Parallel tool calls over one client session, and cancelled ones.

Every call is journaled and the chain stays whole; a call the client cancels is in doubt,
never compensated.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from mcp import Client, MCPError
from mcp.types import REQUEST_TIMEOUT

from sagacity import Phase, Sagacity, SagaOutcome, compensable, verify
from sagacity.integrations.mcp import PROCESS_TOKEN as TOKEN
from sagacity.integrations.mcp import end_saga, mcp_server
from tests.integrations.mcp._shop import check_calls, meta, text


class Depot:
    """Tools that only finish together, proving the server ran them at the same time."""

    def __init__(self) -> None:
        self.threads_together = threading.Barrier(2, timeout=5)
        self.tasks_arrived = 0
        self.tasks_together = asyncio.Event()
        self.started = asyncio.Event()
        self.undone: list[str] = []
        self.finished: list[str] = []

    @compensable(by="free_bin")
    def reserve_bin(self, bin_id: str) -> str:
        """Reserve a storage bin (in a worker thread)."""
        self.threads_together.wait()
        return f"bin-{bin_id}"

    def free_bin(self) -> None:
        """Free the bin."""
        self.undone.append("free_bin")

    @compensable(by="cancel_courier")
    async def book_courier(self, slot: str) -> str:
        """Book a courier (on the event loop)."""
        self.tasks_arrived += 1
        if self.tasks_arrived == 2:
            self.tasks_together.set()
        await asyncio.wait_for(self.tasks_together.wait(), 5)
        return f"courier-{slot}"

    def cancel_courier(self) -> None:
        """Cancel the courier."""
        self.undone.append("cancel_courier")

    @compensable(by="shred_label")
    async def print_label(self, order: str) -> str:
        """Print a label, slowly."""
        self.started.set()
        await asyncio.sleep(5)
        self.finished.append(order)
        return f"label-{order}"

    def shred_label(self) -> None:
        """Shred the label."""
        self.undone.append("shred_label")

    @compensable(by="unweigh")
    def weigh_parcel(self, order: str) -> str:
        """Weigh a parcel in a worker thread that nothing can interrupt."""
        self.started.set()
        time.sleep(0.3)
        self.finished.append(order)
        return f"weight-{order}"

    def unweigh(self) -> None:
        """Nothing to undo, noted."""
        self.undone.append("unweigh")


class TestParallelCalls:
    async def test_concurrent_calls_journal_without_gaps(self, sagacity: Sagacity) -> None:
        """Concurrent calls journal whole, without gaps.

        Two sync calls that wait for each other in worker threads and two async calls that wait for
        each other on the loop: every call is INTENT then EXECUTED, seqs have no gaps, the INTENTs
        interleave, and the chain verifies.
        """
        depot = Depot()
        async with Client(mcp_server(sagacity, depot)) as client:
            results = await asyncio.gather(
                client.call_tool("reserve_bin", {"bin_id": "A"}, meta=meta("par-1", "c1")),
                client.call_tool("reserve_bin", {"bin_id": "B"}, meta=meta("par-1", "c2")),
                client.call_tool("book_courier", {"slot": "9am"}, meta=meta("par-1", "c3")),
                client.call_tool("book_courier", {"slot": "1pm"}, meta=meta("par-1", "c4")),
            )
        ended = await end_saga(sagacity, "par-1")

        assert [text(r) for r in results] == ["bin-A", "bin-B", "courier-9am", "courier-1pm"]
        entries = sagacity.history("par-1")
        assert check_calls(entries[:-1]) == {
            call: [Phase.INTENT, Phase.EXECUTED] for call in ("c1", "c2", "c3", "c4")
        }
        first_executed = next(i for i, e in enumerate(entries) if e.phase is Phase.EXECUTED)
        assert first_executed >= 2  # a second call had started before the first ended
        assert ended.outcome is SagaOutcome.COMPLETED
        assert verify(sagacity.journal, "par-1").ok

    async def test_parallel_calls_without_call_ids_get_distinct_ids(self) -> None:
        """Concurrent calls of one tool, with no client call id, are numbered apart."""
        sagacity, depot = Sagacity.from_url("memory://"), Depot()
        async with Client(mcp_server(sagacity, depot)) as client:
            await asyncio.gather(
                *(client.call_tool("reserve_bin", {"bin_id": b}, meta=meta("par-2")) for b in "AB")
            )

        ids = {e.call_id for e in sagacity.history("par-2")}
        assert ids == {f"reserve_bin#1.{TOKEN}", f"reserve_bin#2.{TOKEN}"}


class TestCancellation:
    @pytest.mark.parametrize("how", ["cancel", "timeout"])
    async def test_cancelled_async_call_is_in_doubt(self, how: str) -> None:
        """A cancelled async call is in doubt, never compensated.

        The client cancels a running async call (its task, or its read timeout): the server's tool
        sees CancelledError, the call is journaled outcome_unknown, the saga fails and undoes its
        sibling, and the cancelled call is listed in doubt, its compensation never run.
        """
        sagacity, depot = Sagacity.from_url("memory://"), Depot()
        depot.tasks_together.set()  # one courier booking needs no partner here
        async with Client(mcp_server(sagacity, depot)) as client:
            done = await client.call_tool("book_courier", {"slot": "9am"}, meta=meta("c", "ok"))
            if how == "cancel":
                label = asyncio.create_task(
                    client.call_tool("print_label", {"order": "7"}, meta=meta("c", "lbl"))
                )
                await depot.started.wait()
                label.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await label
            else:
                with pytest.raises(MCPError) as raised:
                    await client.call_tool(
                        "print_label",
                        {"order": "7"},
                        read_timeout_seconds=0.2,
                        meta=meta("c", "lbl"),
                    )
                assert raised.value.code == REQUEST_TIMEOUT
        ended = await end_saga(sagacity, "c")

        assert text(done) == "courier-9am"
        failed = sagacity.history("c")[3]
        assert (failed.phase, failed.call_id, failed.payload["kind"]) == (
            Phase.FAILED,
            "lbl",
            "outcome_unknown",
        )
        assert failed.payload["error"]["type"] == "CancelledError"
        assert ended.outcome is SagaOutcome.NEEDS_ATTENTION
        assert ended.compensation is not None
        assert [r.call_id for r in ended.compensation.in_doubt] == ["lbl"]
        assert [r.call_id for r in ended.compensation.compensated] == ["ok"]
        assert depot.undone == ["cancel_courier"]
        assert depot.finished == []

    async def test_sync_call_in_a_worker_thread_runs_to_its_end(self) -> None:
        """A sync call in a worker thread cannot be cancelled, and is journaled.

        MCP cannot stop a sync tool already running in its worker thread: the client's cancel
        returns at once, the tool finishes, and the journal records EXECUTED, so the call is known,
        not in doubt.
        """
        sagacity, depot = Sagacity.from_url("memory://"), Depot()
        async with Client(mcp_server(sagacity, depot)) as client:
            weighing = asyncio.create_task(
                client.call_tool("weigh_parcel", {"order": "7"}, meta=meta("t", "w"))
            )
            await depot.started.wait()
            weighing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await weighing
            ended = await end_saga(sagacity, "t")  # waits for the thread's call to return

        assert depot.finished == ["7"]
        assert [e.phase.name for e in sagacity.history("t")] == ["INTENT", "EXECUTED", "ENDED"]
        assert ended.outcome is SagaOutcome.COMPLETED


class TestRequestsCutShort:
    async def test_requests_that_time_out_all_leave_their_saga(self) -> None:
        """Requests of one saga, some timing out at once, each leave it: the end is not held.

        A client's read timeout cancels the request through an anyio scope, which cancels
        again at every await, while other requests of the saga pass its gate.
        """
        rng = random.Random(7)
        sagacity = Sagacity.from_url("memory://")

        class Stock:
            @compensable(by="release")
            async def reserve(self, sku: str) -> str:
                """Reserve stock."""
                await asyncio.sleep(rng.random() * 0.02)
                return f"res-{sku}"

            def release(self) -> None:
                """Release it."""

        async def one(client: Client, saga: str, n: int) -> str:
            await asyncio.sleep(rng.random() * 0.05)
            try:
                await client.call_tool(
                    "reserve",
                    {"sku": str(n)},
                    meta=meta(saga, f"c{n}"),
                    read_timeout_seconds=rng.choice([0.005, 0.01, 0.02, 5]),
                )
            except MCPError:
                return "timed out"
            return "ok"

        async with Client(mcp_server(sagacity, Stock())) as client:
            for round_ in range(4):
                saga = f"cut-{round_}"
                answers = await asyncio.gather(*(one(client, saga, n) for n in range(30)))
                assert set(answers) <= {"ok", "timed out"}
                ended = await asyncio.wait_for(end_saga(sagacity, saga), 10)
                assert ended.outcome in (SagaOutcome.COMPLETED, SagaOutcome.NEEDS_ATTENTION)

    async def test_an_ending_given_up_leaves_the_running_call_its_answer(self) -> None:
        """An `end_saga` whose caller gave up while a call ran does not fail that call."""
        sagacity = Sagacity.from_url("memory://")
        entered, go = asyncio.Event(), asyncio.Event()

        class Slow:
            @compensable(by="release")
            async def reserve(self, sku: str) -> str:
                """Reserve stock, once let go."""
                entered.set()
                await go.wait()
                return f"res-{sku}"

            def release(self) -> None:
                """Release it."""

        async with Client(mcp_server(sagacity, Slow())) as client:
            call = asyncio.create_task(
                client.call_tool("reserve", {"sku": "x"}, meta=meta("given-up", "r"))
            )
            await entered.wait()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(end_saga(sagacity, "given-up"), 0.05)
            go.set()
            assert text(await call) == "res-x"
        ended = await end_saga(sagacity, "given-up")
        assert ended.outcome is SagaOutcome.COMPLETED


class TestTheLoopIsNotBlocked:
    async def test_a_request_joins_and_leaves_its_saga_off_the_loop(self, tmp_path: Path) -> None:
        """Taking the saga's lease, reading its journal and letting it go run on threads.

        Another connection holds SQLite's write lock while a call comes in: the loop goes
        on ticking while the request waits for it, and the call runs once it is let go.
        Were the lease taken on the loop's thread, nothing could tick until the lock's
        holder (a timer here, should the loop be stuck) let it go.
        """
        path = tmp_path / "sagacity.db"
        sagacity, depot = Sagacity.from_url(f"sqlite:///{path}"), Depot()
        depot.tasks_together.set()
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        let_go = threading.Timer(10, lambda: holder.execute("ROLLBACK"))
        try:
            async with Client(mcp_server(sagacity, depot)) as client:
                holder.execute("BEGIN IMMEDIATE")
                let_go.start()
                call = asyncio.create_task(
                    client.call_tool("book_courier", {"slot": "9am"}, meta=meta("held", "c1"))
                )
                ticks = []
                for tick in range(5):
                    ticks.append(tick)
                    await asyncio.sleep(0.02)
                assert not call.done(), "the request did not wait for the held lock"
                let_go.cancel()
                holder.execute("ROLLBACK")
                assert text(await call) == "courier-9am"
            assert ticks == [0, 1, 2, 3, 4]
            assert [e.phase for e in sagacity.history("held")] == [Phase.INTENT, Phase.EXECUTED]
        finally:
            let_go.cancel()
            holder.close()
            sagacity.close()
