"""Async sagas on the non-blocking journal path, and group commit, on real databases.

The loop awaits every journal write: these tests hold the database's write lock from a
task on the loop itself, so a write that blocked the loop could never be let through.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

from sagacity import (
    JournalError,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaResult,
    compensable,
    compensation,
    verify,
)
from sagacity.adapter import current_scope
from sagacity.journal import JournalEntry, SideEffectJournal
from sagacity.journal._group import GroupCommit
from tests._threads import noting_this_thread

SAGAS = 24
CALLS = 6


class SlowAsking:
    """An approval hook that, once `slow`, takes 0.3 s: the gate that asks stays open."""

    def __init__(self) -> None:
        self.slow = False
        self.asking = threading.Event()
        """Set once a slow request is being asked."""

    def __call__(self, request: object) -> None:
        if self.slow:
            self.asking.set()
            time.sleep(0.3)


class Ledger:
    """Async tools that record what ran, in order, and their compensations."""

    def __init__(self, sagacity: Sagacity | None = None) -> None:
        self.ran: list[str] = []
        self.undone: list[str] = []
        self.sagacity = sagacity
        self.intent_first: list[bool] = []
        """Per call: its INTENT was in the journal when the tool started."""

    @compensable(by="release")
    async def reserve(self, sku: str) -> str:
        if self.sagacity is not None:
            scope_call = _current()
            entries = self.sagacity.journal.entries(scope_call[0])
            self.intent_first.append(
                any(e.phase is Phase.INTENT and e.call_id == scope_call[1] for e in entries)
            )
        self.ran.append(sku)
        await asyncio.sleep(0)
        return f"res-{sku}"

    @compensation
    async def release(self, ctx: Any) -> None:
        self.undone.append(ctx.result)

    @compensable(by="release")
    async def fail(self, sku: str) -> str:
        raise RuntimeError(f"out of {sku}")

    @compensable(by="release")
    async def slow(self, sku: str) -> str:
        await asyncio.sleep(5)
        return f"res-{sku}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def wire(self, amount: str) -> str:
        """Wire money out."""
        self.ran.append(f"wire {amount}")
        await asyncio.sleep(0)
        return f"wire-{amount}"


def _current() -> tuple[str, str]:
    from sagacity import current_call

    call = current_call()
    assert call is not None
    return call.saga_id, call.call_id


def tools_by_name(sagacity: Sagacity, ledger: Ledger) -> dict[str, Any]:
    return {tool.name: tool for tool in sagacity.wrap(ledger)}


def assert_calls_paired(entries: list[JournalEntry], calls: int) -> None:
    """Each call: its INTENT, then its EXECUTED pointing at it; then ENDED COMPLETED."""
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    intents = [e for e in entries if e.phase is Phase.INTENT]
    executed = {e.ref_seq: e for e in entries if e.phase is Phase.EXECUTED}
    assert len(intents) == calls
    for intent in intents:
        assert executed[intent.seq].seq > intent.seq
        assert executed[intent.seq].call_id == intent.call_id
    assert entries[-1].phase is Phase.ENDED
    assert entries[-1].payload == {"outcome": "COMPLETED"}


class TestManyAsyncSagas:
    async def test_concurrent_async_sagas_lose_nothing_and_keep_every_chain(
        self, shared_store_url: str
    ) -> None:
        """24 async sagas of 6 calls each on one loop: every entry, in order, chains valid.

        Their appends overlap, so group commit writes some together: still every saga's
        seqs run 1..n without gaps, each EXECUTED follows its INTENT, and verify passes.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        try:

            async def run(index: int) -> SagaOutcome:
                async def work() -> None:
                    for call in range(CALLS):
                        await tools["reserve"](f"{index}-{call}")

                return (await sagacity.asaga(f"saga-{index:02}", work)).outcome

            outcomes = await asyncio.gather(*(run(i) for i in range(SAGAS)))
            assert outcomes == [SagaOutcome.COMPLETED] * SAGAS
            assert sorted(ledger.ran) == sorted(
                f"{i}-{c}" for i in range(SAGAS) for c in range(CALLS)
            )
            for index in range(SAGAS):
                entries = sagacity.journal.entries(f"saga-{index:02}")
                assert_calls_paired(entries, CALLS)
                inputs = [e.payload["input"]["sku"] for e in entries if e.phase is Phase.INTENT]
                assert inputs == [f"{index}-{c}" for c in range(CALLS)]  # the saga's own order
            assert verify(sagacity.journal).ok
            stats = sagacity.journal.group_stats  # type: ignore[attr-defined]
            assert stats.batched > 0, stats  # overlapping appends were committed together
        finally:
            sagacity.close()

    async def test_parallel_calls_within_one_saga(self, shared_store_url: str) -> None:
        """20 calls of one saga gathered at once: 20 INTENT/EXECUTED pairs, one valid chain."""
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        try:

            async def work() -> list[str]:
                return list(await asyncio.gather(*(tools["reserve"](f"p{n}") for n in range(20))))

            result = await sagacity.asaga("parallel", work)
            assert result.outcome is SagaOutcome.COMPLETED
            assert result.value == [f"res-p{n}" for n in range(20)]
            entries = sagacity.journal.entries("parallel")
            assert_calls_paired(entries, 20)
            assert verify(sagacity.journal, "parallel").ok
            stats = sagacity.journal.group_stats  # type: ignore[attr-defined]
            assert stats.largest > 1, stats  # calls of one saga committed together
            assert stats.commits < len(entries), stats
        finally:
            sagacity.close()

    async def test_a_failed_async_saga_compensates_in_reverse(self, shared_store_url: str) -> None:
        """The async path keeps compensation: two reserves undone in reverse after a failure."""
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        try:

            async def work() -> None:
                await tools["reserve"]("a")
                await tools["reserve"]("b")
                with contextlib.suppress(RuntimeError):
                    await tools["fail"]("c")  # the framework swallows it

            result = await sagacity.asaga("undo", work)
            assert result.outcome is SagaOutcome.COMPENSATED
            assert ledger.undone == ["res-b", "res-a"]
            phases = [e.phase.value for e in sagacity.journal.entries("undo")]
            assert phases == [
                "INTENT", "EXECUTED", "INTENT", "EXECUTED", "INTENT", "FAILED",
                "COMPENSATING", "COMPENSATED", "COMPENSATING", "COMPENSATED", "ENDED",
            ]  # fmt: skip
        finally:
            sagacity.close()


class TestSyncThreads:
    def test_sixteen_threads_of_sync_sagas(self, shared_store_url: str) -> None:
        """16 threads each running sync sagas: nothing lost, every chain and order kept."""
        sagacity = Sagacity.from_url(shared_store_url)
        ran: list[str] = []
        lock = threading.Lock()

        @compensable(by=lambda: None)
        def book(slot: str) -> str:
            with lock:
                ran.append(slot)
            return slot

        (tool,) = sagacity.wrap(book)
        errors: list[BaseException] = []

        def worker(thread: int) -> None:
            try:
                for saga in range(3):
                    slots = [f"{thread}-{saga}-{n}" for n in range(5)]
                    sagacity.saga(f"t{thread:02}-{saga}", lambda s=slots: [tool(x) for x in s])
            except BaseException as error:  # reported below, with the thread's name
                errors.append(error)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            assert len(ran) == 16 * 3 * 5
            appended = 0
            for t in range(16):
                for saga in range(3):
                    entries = sagacity.journal.entries(f"t{t:02}-{saga}")
                    assert_calls_paired(entries, 5)
                    appended += len(entries)
            assert verify(sagacity.journal).ok
            stats = sagacity.journal.group_stats  # type: ignore[attr-defined]
            assert stats.largest > 1, stats  # threads' appends committed together
            assert stats.commits < appended, stats
        finally:
            sagacity.close()


# -- holding the database's writes from the loop --------------------------------------------


@contextlib.contextmanager
def writes_held(
    url: str, sagacity: Sagacity, saga_id: str, *, new_sagas: tuple[str, ...] = ()
) -> Iterator[Callable[[], None]]:
    """Block the saga's next journal write, and the first of `new_sagas`, until let go.

    SQLite: another connection holds the write lock. PostgreSQL: another transaction
    holds the saga's lease row, which a checked append share-locks, and has inserted,
    uncommitted, the saga's next seq and seq 1 of each new saga, which an append of that
    seq waits for (an append under a lease just taken checks nothing).
    """
    if url.startswith("sqlite"):
        # Any thread may let go (see `released_after`).
        holder = sqlite3.connect(urlsplit(url).path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield lambda: holder.execute("ROLLBACK") if holder.in_transaction else None
        finally:
            if holder.in_transaction:
                holder.execute("ROLLBACK")
            holder.close()
        return
    import psycopg

    database = sagacity.journal.database  # type: ignore[attr-defined]
    conn = psycopg.connect(database.settings.conninfo)
    conn.execute(f"SELECT 1 FROM {database.tables.lease} WHERE saga_id = %s FOR UPDATE", (saga_id,))
    last = conn.execute(
        f"SELECT coalesce(max(seq), 0) FROM {database.tables.journal} WHERE saga_id = %s",
        (saga_id,),
    ).fetchone()
    assert last is not None
    for new, seq in [(saga_id, last[0] + 1), *((n, 1) for n in new_sagas)]:
        conn.execute(
            f"INSERT INTO {database.tables.journal} VALUES "
            "(%s, %s, 'INTENT', NULL, NULL, NULL, 'null', '', '', '')",
            (new, seq),
        )
    try:
        yield conn.rollback
    finally:
        conn.rollback()
        conn.close()


@contextlib.contextmanager
def released_after(let_go: Callable[[], None], seconds: float = 10) -> Iterator[None]:
    """Let the held writes go from another thread after `seconds`, should the loop be stuck.

    A write made on the loop's thread would wait for the writes held by the loop itself
    forever; let go, the test fails on what it asserts instead of hanging.
    """
    timer = threading.Timer(seconds, let_go)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


def group_of(sagacity: Sagacity) -> GroupCommit:
    group: GroupCommit = sagacity.journal._group  # type: ignore[attr-defined]
    return group


class AsyncAppends:
    """What a journal's async appends are doing now, on the running loop.

    SQLite's go through its `GroupCommit`'s writer threads; PostgreSQL's through the
    loop's own `LoopWriter`, on async connections (made on the loop's first append).
    """

    def __init__(self, sagacity: Sagacity) -> None:
        self.journal: Any = sagacity.journal

    def _writer(self) -> Any:
        writers = getattr(self.journal, "_loop_writers", None)
        return None if writers is None else writers.get(asyncio.get_running_loop())

    @property
    def postgres(self) -> bool:
        return hasattr(self.journal, "_loop_writers")

    @property
    def in_flight(self) -> int:
        """Commits under way."""
        if not self.postgres:
            return int(self.journal._group._in_flight)
        writer = self._writer()
        return 0 if writer is None else int(writer._in_flight)

    @property
    def queued(self) -> int:
        """Appends waiting for a commit to end, withdrawn ones left out."""
        if not self.postgres:
            return sum(not p.future.cancelled() for p in self.journal._group._queue)
        writer = self._writer()
        return 0 if writer is None else len(writer._queue)

    @property
    def capacity(self) -> int:
        """Commits that may be under way at once before appends queue."""
        if not self.postgres:
            return int(self.journal._group._max_writers)
        return int(self.journal.database.settings.pool_max_size)


class TestTheLoopIsNotBlocked:
    async def test_the_loop_runs_while_an_intent_waits_for_the_database(
        self, shared_store_url: str
    ) -> None:
        """A commit waiting on a held write lock leaves the loop free: a task on it lets it go.

        Were the write made on the loop's thread, the task that frees the lock could never
        run. And the tool starts only once its INTENT is in the journal.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger(sagacity)
        tools = tools_by_name(sagacity, ledger)
        ticks: list[int] = []
        try:
            entered = asyncio.Event()
            go = asyncio.Event()

            async def work() -> str:
                entered.set()
                await go.wait()
                return str(await tools["reserve"]("x"))

            running = asyncio.create_task(sagacity.asaga("held", work))
            await entered.wait()
            with writes_held(shared_store_url, sagacity, "held") as let_go:
                go.set()
                await until(lambda: group_of(sagacity).stats.commits > 0, "the INTENT is sent")
                for tick in range(5):
                    ticks.append(tick)
                    await asyncio.sleep(0.02)
                assert ledger.ran == []  # its INTENT is not committed yet: the tool waits
                let_go()
                result = await running
            assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "res-x")
            assert ticks == [0, 1, 2, 3, 4]
            assert ledger.intent_first == [True]
        finally:
            sagacity.close()

    async def test_a_failed_saga_reads_its_journal_again_off_the_loop(
        self, shared_store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A failed saga re-reads its journal before compensating: on a worker thread.

        On SQLite that read waits for the journal's connection, which another saga's
        commit holds while the database's write lock is held: made on the loop, it would
        stall every task on it, the one that lets the lock go included.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        read_on: list[bool] = []  # per read of the journal: on the loop's thread
        try:
            held = LetIn(lambda: tools["reserve"]("held"))
            failed, may_end = asyncio.Event(), asyncio.Event()

            async def failing() -> None:
                with contextlib.suppress(RuntimeError):
                    await tools["fail"]("c")  # the framework swallows it
                failed.set()
                await may_end.wait()

            running = asyncio.create_task(sagacity.asaga("held", held))
            failing_saga = asyncio.create_task(sagacity.asaga("failing", failing))
            await held.entered.wait()
            await failed.wait()
            journal = sagacity.journal
            monkeypatch.setattr(journal, "entries", noting_this_thread(journal.entries, read_on))
            appends = AsyncAppends(sagacity)
            with (
                writes_held(shared_store_url, sagacity, "held") as let_go,
                released_after(let_go),
            ):
                held.go.set()
                await until(lambda: appends.in_flight > 0, "the held INTENT is being committed")
                may_end.set()
                await until(lambda: read_on != [], "the failed saga reads its journal")
                ticks = []
                for tick in range(5):
                    ticks.append(tick)
                    await asyncio.sleep(0.02)
                assert ledger.ran == []  # the loop went on while the writes were still held
                let_go()
                result, ended = await running, await failing_saga
            assert ticks == [0, 1, 2, 3, 4]
            assert read_on == [False]
            assert (result.outcome, ended.outcome) == (
                SagaOutcome.COMPLETED,
                SagaOutcome.COMPENSATED,
            )
        finally:
            sagacity.close()


def in_scope(
    scope: anyio.CancelScope, call: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[str]]:
    """`call` inside `scope`: its result as text, or "cancelled" once the scope cancels it."""

    async def scoped() -> str:
        with scope:
            return str(await call())
        return "cancelled"

    return scoped


class LetIn:
    """A saga's work that waits to be let in, then makes `call`: its lease is taken by then."""

    def __init__(self, call: Callable[[], Awaitable[Any]]) -> None:
        self.call = call
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.scope: Any = None

    async def __call__(self) -> Any:
        self.scope = current_scope()
        self.entered.set()
        await self.go.wait()
        return await self.call()


class TestTheApprovalGateOffTheLoop:
    """An IRREVERSIBLE call's approval gate reads and writes on a worker thread.

    It journals AWAITING_APPROVAL and stores the request, or checks the approval and
    journals INTENT: the loop goes on meanwhile, as the ticks show.
    """

    @staticmethod
    async def held_while(running: asyncio.Task[Any]) -> list[int]:
        """Tick the loop five times while the task waits on the held writes."""
        ticks = []
        for tick in range(5):
            ticks.append(tick)
            await asyncio.sleep(0.02)
        assert not running.done(), "the gate did not wait for the held writes"
        return ticks

    async def test_asked_and_run_while_the_loop_goes_on(self, shared_store_url: str) -> None:
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        try:
            for run in (sagacity.asaga, sagacity.aresume_saga):
                work = LetIn(lambda: tools["wire"]("250.00"))
                running = asyncio.create_task(run("gated", work))
                await work.entered.wait()
                with (
                    writes_held(shared_store_url, sagacity, "gated") as let_go,
                    released_after(let_go),
                ):
                    work.go.set()
                    assert await self.held_while(running) == [0, 1, 2, 3, 4]
                    let_go()
                    result = await running
                if run == sagacity.asaga:
                    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
                    assert ledger.ran == []
                    sagacity.approve("gated", approver="alice")
            assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-250.00")
            assert ledger.ran == ["wire 250.00"]
            assert [e.phase for e in sagacity.journal.entries("gated")] == [
                Phase.AWAITING_APPROVAL,
                Phase.APPROVED,
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.ENDED,
            ]
        finally:
            sagacity.close()

    async def test_an_adapters_check_leaves_the_loop_free(self, shared_store_url: str) -> None:
        """`apending_approval`, the adapters' check, asks off the loop too."""
        sagacity = Sagacity.from_url(shared_store_url)
        (wire,) = [t for t in sagacity.wrap(Ledger()) if t.name == "wire"]
        try:
            work = LetIn(lambda: wire.apending_approval(("250.00",), call_id="fw-1"))
            running = asyncio.create_task(sagacity.asaga("checked", work))
            await work.entered.wait()
            with (
                writes_held(shared_store_url, sagacity, "checked") as let_go,
                released_after(let_go),
            ):
                work.go.set()
                assert await self.held_while(running) == [0, 1, 2, 3, 4]
                let_go()
                request = (await running).value
            assert (request.call_id, request.input) == ("fw-1", {"amount": "250.00"})
            assert [p.request_id for p in sagacity.pending("checked")] == [request.request_id]
        finally:
            sagacity.close()

    @pytest.mark.parametrize("canceller", ["task", "anyio scope"])
    async def test_cancelled_while_its_approved_intent_commits_it_is_not_started(
        self, shared_store_url: str, canceller: str
    ) -> None:
        """A cancel that comes while the gate journals the approved INTENT stops the call.

        The tool is not started, and FAILED `not_started` says so: the call is not in
        doubt, its approval still stands, and the next run runs it, once. The same under
        an anyio scope, which cancels again at every await until it exits.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        scope = anyio.CancelScope()
        scoped = in_scope(scope, lambda: tools["wire"]("250.00"))
        try:
            asked = await sagacity.asaga("cut", lambda: tools["wire"]("250.00"))
            assert asked.outcome is SagaOutcome.AWAITING_APPROVAL
            sagacity.approve("cut", approver="alice")
            work = LetIn(scoped)
            running = asyncio.create_task(sagacity.aresume_saga("cut", work))
            await work.entered.wait()
            with (
                writes_held(shared_store_url, sagacity, "cut") as let_go,
                released_after(let_go),
            ):
                work.go.set()
                await until(lambda: work.scope.gating, "the gate runs")
                (running.cancel if canceller == "task" else scope.cancel)()
                await asyncio.sleep(0.02)
                let_go()
                if canceller == "task":
                    with pytest.raises(asyncio.CancelledError):
                        await running
                else:
                    assert (await asyncio.wait_for(running, 20)).value == "cancelled"
            assert ledger.ran == []
            entries = sagacity.journal.entries("cut")
            assert [e.phase for e in entries] == [
                Phase.AWAITING_APPROVAL,
                Phase.APPROVED,
                Phase.INTENT,
                Phase.FAILED,
            ]
            assert entries[-1].payload["kind"] == "not_started"
            assert [r.state for r in sagacity.pending("cut")] == ["approved"]
            again = await sagacity.aresume_saga("cut", lambda: tools["wire"]("250.00"))
            assert (again.outcome, again.value) == (SagaOutcome.COMPLETED, "wire-250.00")
            assert ledger.ran == ["wire 250.00"]
            assert [e.phase for e in sagacity.journal.entries("cut")][4:] == [
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.ENDED,
            ]
        finally:
            sagacity.close()


SETTLING = """
import asyncio
from sagacity._gates import Gates

async def main():
    gates = Gates(asyncio.get_running_loop())
    await gates.turn.acquire()  # a gate holds the turn
    queued = asyncio.create_task(gates.run(lambda: None))
    await asyncio.sleep(0)  # it waits for its turn
    waiting = asyncio.create_task(gates.{wait}())  # runs before the queued gate's cancel
    queued.cancel()
    gates.turn.release()  # its first waiter is cancelled: no one is woken
    await asyncio.wait_for(waiting, 5)
    print("settled", f"gating={{gates.gating}}")

asyncio.run(main())
"""


class TestGatesAndTheirSiblings:
    """What waits for a gate, and what does not, on every backend."""

    @pytest.mark.parametrize("wait", ["settled", "settle_holding_cancels"])
    def test_a_gate_cancelled_in_its_queue_lets_the_saga_settle(self, wait: str) -> None:
        """Work waiting for the saga's gates waits for them to end, not for a free turn.

        A gate cancelled while it waits for its turn still counts until its task runs. A
        wait that took the turn, free then, would not wait, and would check again before
        that task could run, for good: the loop would be stuck. An MCP request cut short
        by its client did this once in a few hundred runs. The wait runs in a child
        process, so that a stuck loop fails the test instead of hanging the suite.
        """
        script = SETTLING.format(wait=wait)
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["settled", "gating=0"]

    async def test_an_outcome_behind_a_gate_is_journaled_through_a_cancel(
        self, store_url: str
    ) -> None:
        """A call's EXECUTED that waits for a sibling's gate is journaled though cancelled.

        The approved wire w1 runs while the new wire w2 is asked (its hook is slow), so
        w1's EXECUTED waits for w2's gate; cancelled then, w1 is not left in doubt: the
        EXECUTED lands and the cancel follows.
        """
        hook = SlowAsking()
        sagacity = Sagacity.from_url(store_url, on_approval_request=hook)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        outcomes: list[str] = []
        try:
            asked = await sagacity.asaga("x", lambda: tools["wire"].ainvoke(("1",), call_id="w1"))
            assert asked.outcome is SagaOutcome.AWAITING_APPROVAL
            sagacity.approve("x", approver="alice")
            hook.slow = True

            async def work() -> None:
                w1 = asyncio.create_task(tools["wire"].ainvoke(("1",), call_id="w1"))
                w2 = asyncio.create_task(tools["wire"].ainvoke(("2",), call_id="w2"))
                await until(lambda: ledger.ran == ["wire 1"] and hook.asking.is_set(), "w1 ran")
                w1.cancel()
                for task in (w1, w2):
                    try:
                        outcomes.append(str(await task)[:19])
                    except asyncio.CancelledError as cancelled:
                        outcomes.append(type(cancelled).__name__)

            result = await sagacity.aresume_saga("x", work)
            assert outcomes == ["CancelledError", "[AWAITING_APPROVAL]"]
            assert result.outcome is SagaOutcome.AWAITING_APPROVAL
            assert [(e.phase.name, e.call_id) for e in sagacity.history("x")] == [
                ("AWAITING_APPROVAL", "w1"),
                ("APPROVED", "w1"),
                ("INTENT", "w1"),
                ("AWAITING_APPROVAL", "w2"),
                ("EXECUTED", "w1"),
            ]
        finally:
            sagacity.close()

    def test_one_saga_gated_from_two_loops_in_turn_and_at_once(self, store_url: str) -> None:
        """Sync work may run event loops, one after another or in threads at once.

        The gates are the first loop's to use them, and pass on once it stopped; a loop
        that runs while another has them gates as sync code does. Every wire is asked.
        """
        sagacity = Sagacity.from_url(store_url)
        tools = tools_by_name(sagacity, Ledger())

        async def two_wires(first: int) -> list[Any]:
            return list(
                await asyncio.gather(tools["wire"](str(first)), tools["wire"](str(first + 1)))
            )

        def in_threads() -> None:
            threads = [
                threading.Thread(
                    target=contextvars.copy_context().run, args=(asyncio.run, two_wires(n))
                )
                for n in (5, 7)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(20)
                assert not thread.is_alive(), "a loop is stuck"

        try:
            result = sagacity.saga(
                "loops", lambda: [asyncio.run(two_wires(1)), asyncio.run(two_wires(3))]
            )
            assert result.outcome is SagaOutcome.AWAITING_APPROVAL
            sagacity.saga("threads", in_threads)
            assert [len(sagacity.pending(saga)) for saga in ("loops", "threads")] == [4, 4]
        finally:
            sagacity.close()

    def test_the_gates_pass_on_from_a_loop_closed_mid_gate(self, store_url: str) -> None:
        """A loop closed with a call in its gate does not keep the gates from later loops."""
        sagacity = Sagacity.from_url(store_url, on_approval_request=lambda r: time.sleep(0.1))
        tools = tools_by_name(sagacity, Ledger())

        def work() -> bool:
            scope = current_scope()
            assert scope is not None
            first = asyncio.new_event_loop()
            left: list[asyncio.Task[Any]] = []

            async def leave_one_in_its_gate() -> None:
                left.append(first.create_task(tools["wire"]("1")))
                await until(lambda: scope.gating, "the first gate runs")

            first.run_until_complete(leave_one_in_its_gate())
            first.close()

            async def second() -> bool:
                await tools["wire"]("2")
                gates = scope._gates  # whose they are now
                return gates is not None and gates.loop is asyncio.get_running_loop()

            return asyncio.run(second())

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the first loop's task
                result = sagacity.saga("handed", work)
            assert (result.outcome, result.value) == (SagaOutcome.AWAITING_APPROVAL, True)
            assert [r.input["amount"] for r in sagacity.pending("handed")] == ["1", "2"]
        finally:
            sagacity.close()

    def test_a_hook_may_run_a_loop_of_its_own(self, store_url: str) -> None:
        """A hook that runs async code of its own (a journaled call, here) does not stall.

        It runs on the gate's thread, in the saga's context; its loop does not have the
        saga's gates, so its call gates as sync code does, under the gate's own lock. (The
        saga runs in a thread of its own, so that a stall fails the test.)
        """
        notified: list[str] = []
        results: list[Any] = []

        def hook(request: Any) -> None:
            notified.append(asyncio.run(tools["reserve"]("notify")))

        sagacity = Sagacity.from_url(store_url, on_approval_request=hook)
        tools = tools_by_name(sagacity, Ledger())

        def run() -> None:
            results.append(asyncio.run(sagacity.asaga("hooked", lambda: tools["wire"]("10"))))

        try:
            saga = threading.Thread(target=run, daemon=True)
            saga.start()
            saga.join(20)
            assert not saga.is_alive(), "the saga is stuck in its gate"
            assert [r.outcome for r in results] == [SagaOutcome.AWAITING_APPROVAL]
            assert notified == ["res-notify"]
            assert [e.phase.name for e in sagacity.history("hooked")] == [
                "AWAITING_APPROVAL",
                "INTENT",
                "EXECUTED",
            ]
        finally:
            sagacity.close()


class TestCancelScopes:
    """anyio's cancel scopes (MCP, PydanticAI) cancel again at every await until they exit.

    What sagacity waits for through a cancel, it waits for through all of them.
    """

    async def test_an_outcome_is_journaled_through_a_scope_that_cancels_again(
        self, store_url: str
    ) -> None:
        """A call cancelled by a scope while its EXECUTED waits for a gate keeps it."""
        hook = SlowAsking()
        sagacity = Sagacity.from_url(store_url, on_approval_request=hook)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        try:
            hook.slow = True

            async def work() -> None:
                scope = anyio.CancelScope()

                async def reserve() -> None:
                    with scope:
                        await tools["reserve"]("x")

                reserving = asyncio.create_task(reserve())
                wiring = asyncio.create_task(tools["wire"]("10"))
                await until(lambda: ledger.ran[:1] == ["x"] and hook.asking.is_set(), "x ran")
                scope.cancel()
                await asyncio.gather(reserving, wiring)

            result = await sagacity.asaga("scoped", work)
            assert result.outcome is SagaOutcome.AWAITING_APPROVAL
            assert [(e.phase.name, e.call_id) for e in sagacity.history("scoped")] == [
                ("INTENT", "reserve#1"),
                ("AWAITING_APPROVAL", "wire#1"),
                ("EXECUTED", "reserve#1"),
            ]
        finally:
            sagacity.close()

    def test_a_failure_is_journaled_through_a_scope_that_cancels_again(
        self, store_url: str
    ) -> None:
        """A tool cut short by `anyio.move_on_after` gets its FAILED, and the saga ends.

        (In a thread of its own, so that an append that never ends fails the test.)
        """
        sagacity = Sagacity.from_url(store_url)
        tools = tools_by_name(sagacity, Ledger())
        results: list[Any] = []

        async def work() -> str:
            with anyio.move_on_after(0.1):
                await tools["slow"]("x")
            return "moved on"

        def run() -> None:
            results.append(asyncio.run(sagacity.asaga("cut-short", work)))

        try:
            saga = threading.Thread(target=run, daemon=True)
            saga.start()
            saga.join(20)
            assert not saga.is_alive(), "an append did not end"
            (result,) = results
            assert result.outcome is SagaOutcome.NEEDS_ATTENTION  # the cut call is in doubt
            assert [e.phase for e in sagacity.history("cut-short")] == [
                Phase.INTENT,
                Phase.FAILED,
                Phase.ENDED,
            ]
        finally:
            sagacity.close()

    @pytest.mark.parametrize("awaited", ["plainly", "in an except block"])
    async def test_a_scope_cancelled_while_a_failure_commits_ends_at_the_scope(
        self, shared_store_url: str, awaited: str
    ) -> None:
        """The cancel raised once the FAILED is committed is the scope's: the work goes on.

        It is raised while the tool's own error is being handled, and maybe an error of
        the work's own up the stack; chained to either instead of to the scope's cancel,
        it would pass the scope by and cancel the whole saga.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        started, raise_now = asyncio.Event(), asyncio.Event()

        @compensable(by=lambda: None)
        async def refuse(order: str) -> str:
            started.set()
            await raise_now.wait()
            raise RuntimeError(f"order {order} refused")

        (tool,) = sagacity.wrap(refuse)
        scope = anyio.CancelScope()

        async def work() -> str:
            if awaited == "plainly":
                with scope:
                    await tool("o-1")
                return "went on"
            try:
                raise LookupError("the first supplier has none")
            except LookupError:
                with scope:
                    await tool("o-1")
            return "went on"

        try:
            running = asyncio.create_task(sagacity.asaga("scoped", work))
            # Not the INTENT's row read back: its commit can still be in flight (a cancel
            # then leaves it in doubt); a tool that started has its INTENT's slot ended.
            await started.wait()
            appends = AsyncAppends(sagacity)
            with (
                writes_held(shared_store_url, sagacity, "scoped") as let_go,
                released_after(let_go),
            ):
                raise_now.set()
                await until(lambda: appends.in_flight > 0, "the FAILED is being committed")
                scope.cancel()
                let_go()
                result = await running
            assert (result.outcome, result.value) == (SagaOutcome.COMPENSATED, "went on")
            assert [e.phase for e in sagacity.history("scoped")] == [
                Phase.INTENT,
                Phase.FAILED,
                Phase.ENDED,
            ]
        finally:
            sagacity.close()

    async def test_a_failed_tool_raises_its_own_error_with_its_own_chain(
        self, sagacity: Sagacity
    ) -> None:
        """The error the work gets is the tool's, chained as the tool chained it.

        Not to an error the work itself was handling when it made the call.
        """

        @compensable(by=lambda: None)
        async def look_up(key: str) -> str:
            try:
                return {"a": "1"}[key]
            except KeyError:
                raise ValueError(f"no value for {key}") from None

        @compensable(by=lambda: None)
        async def convert(key: str) -> str:
            try:
                return {"a": "1"}[key]
            except KeyError:
                raise ValueError(f"cannot convert {key}")  # noqa: B904 (the chain tested)

        tools = {tool.name: tool for tool in sagacity.wrap(look_up, convert)}
        seen: list[BaseException] = []

        async def work() -> None:
            for name in ("look_up", "convert"):
                try:
                    raise OSError("the cache is down")
                except OSError:
                    try:
                        await tools[name]("b")
                    except ValueError as error:
                        seen.append(error)

        await sagacity.asaga("chained", work)
        suppressed, chained = seen
        assert (suppressed.__suppress_context__, repr(suppressed.__context__)) == (
            True,
            "KeyError('b')",
        )
        assert repr(chained.__context__) == "KeyError('b')"


async def cut_while_the_intent_commits(
    url: str,
    sagacity: Sagacity,
    call: Callable[[], Awaitable[Any]],
    cancel: Callable[[], object] | None = None,
) -> asyncio.Task[SagaResult]:
    """Run saga "cut", whose work awaits `call`; cancel it while the call's INTENT commits.

    `cancel` cancels; by default the saga's task is cancelled. Returns the task, done.
    """
    appends = AsyncAppends(sagacity)
    work = LetIn(call)
    running = asyncio.create_task(sagacity.asaga("cut", work))
    await work.entered.wait()
    with writes_held(url, sagacity, "cut") as let_go:
        work.go.set()
        await until(lambda: appends.in_flight > 0, "the INTENT is in flight")
        (cancel or running.cancel)()
        await asyncio.sleep(0.05)
        let_go()
        await asyncio.wait([running])
    return running


class TestCancellation:
    @pytest.mark.parametrize("then", ["compensate", "run again"])
    async def test_cancelled_while_its_intent_commits_it_is_not_started(
        self, shared_store_url: str, then: str
    ) -> None:
        """Cancelled mid-commit: the INTENT lands, the tool never runs, FAILED says so.

        FAILED `not_started` leaves the call out of doubt: a compensation walk has
        nothing in doubt and nothing to undo, and the saga run again runs it, once.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        try:
            running = await cut_while_the_intent_commits(
                shared_store_url, sagacity, lambda: tools["reserve"]("x")
            )
            with pytest.raises(asyncio.CancelledError):
                running.result()
            assert ledger.ran == []
            entries = sagacity.journal.entries("cut")
            assert [(e.phase, e.call_id) for e in entries] == [
                (Phase.INTENT, "reserve#1"),
                (Phase.FAILED, "reserve#1"),
            ]
            assert entries[-1].payload["kind"] == "not_started"
            if then == "compensate":
                compensated = await sagacity.acompensate("cut")
                assert compensated.outcome is SagaOutcome.COMPENSATED
                assert compensated.compensation is not None
                assert compensated.compensation.in_doubt == []
            else:
                again = await sagacity.asaga("cut", lambda: tools["reserve"]("x"))
                assert (again.outcome, again.value) == (SagaOutcome.COMPLETED, "res-x")
                assert ledger.ran == ["x"]
            assert ledger.undone == []
        finally:
            sagacity.close()

    async def test_under_a_scope_that_cancels_again_it_is_not_started_and_the_work_goes_on(
        self, shared_store_url: str
    ) -> None:
        """A scope that cancels at every await (anyio's): FAILED `not_started` is journaled.

        The work, its scope exited, returns; the saga ends COMPLETED: nothing ran, nothing
        is in doubt.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        scope = anyio.CancelScope()
        scoped = in_scope(scope, lambda: tools["reserve"]("x"))
        try:
            running = await cut_while_the_intent_commits(
                shared_store_url, sagacity, scoped, scope.cancel
            )
            result = running.result()
            assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "cancelled")
            assert ledger.ran == []
            entries = sagacity.journal.entries("cut")
            assert [e.phase for e in entries] == [Phase.INTENT, Phase.FAILED, Phase.ENDED]
            assert entries[1].payload["kind"] == "not_started"
            assert verify(sagacity.journal).ok
        finally:
            sagacity.close()

    async def test_a_not_started_call_whose_failed_is_refused_stays_in_doubt(
        self, shared_store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """FAILED `not_started` refused by the journal: the INTENT is in doubt, the saga failed.

        Work that swallows the error cannot end the saga COMPLETED: it needs attention.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        journal: Any = sagacity.journal
        aappend = journal.aappend

        async def no_failed(saga_id: str, phase: Phase, **options: Any) -> JournalEntry:
            if phase is Phase.FAILED:
                raise JournalError("the database went away")
            entry: JournalEntry = await aappend(saga_id, phase, **options)
            return entry

        monkeypatch.setattr(journal, "aappend", no_failed)
        try:
            refused: list[BaseException] = []

            async def swallowing() -> None:
                try:
                    await tools["reserve"]("x")
                except BaseException as error:
                    refused.append(error)

            result = (
                await cut_while_the_intent_commits(shared_store_url, sagacity, swallowing)
            ).result()
            assert [type(error) for error in refused] == [JournalError]
            assert ledger.ran == []
            assert result.outcome is SagaOutcome.NEEDS_ATTENTION
            assert result.compensation is not None
            assert [ref.call_id for ref in result.compensation.in_doubt] == ["reserve#1"]
        finally:
            sagacity.close()

    async def test_cancelled_before_its_batch_starts_writes_no_intent(
        self, shared_store_url: str
    ) -> None:
        """An INTENT still queued behind a commit in flight is withdrawn: nothing is written."""
        sagacity = Sagacity.from_url(shared_store_url)
        ledger = Ledger()
        tools = tools_by_name(sagacity, ledger)
        appends = AsyncAppends(sagacity)
        try:
            gates = {name: (asyncio.Event(), asyncio.Event()) for name in ("first", "second")}

            def work_for(name: str) -> Callable[[], Any]:
                entered, go = gates[name]

                async def work() -> None:
                    entered.set()
                    await go.wait()
                    await tools["reserve"](name)

                return work

            tasks = {n: asyncio.create_task(sagacity.asaga(n, work_for(n))) for n in gates}
            for entered, _ in gates.values():
                await entered.wait()
            blocking = tuple(f"blocker-{n}" for n in range(appends.capacity))
            with writes_held(shared_store_url, sagacity, "first", new_sagas=blocking) as let_go:
                # Keep every commit slot busy with an append the held lock keeps in flight.
                gates["first"][1].set()
                await until(lambda: appends.in_flight > 0, "the first INTENT is in flight")
                blockers: list[asyncio.Task[JournalEntry]] = []
                while appends.in_flight < appends.capacity:
                    blockers.append(
                        asyncio.create_task(
                            sagacity.journal.aappend(  # type: ignore[attr-defined]
                                blocking[len(blockers)], Phase.INTENT, tool_name="blocker"
                            )
                        )
                    )
                    sent = len(blockers) + 1
                    await until(lambda n=sent: appends.in_flight >= n, "the blocker is in flight")
                gates["second"][1].set()
                await until(lambda: appends.queued == 1, "the second INTENT is queued")
                tasks["second"].cancel()
                await until(lambda: appends.queued == 0, "it is withdrawn")
                let_go()
                with pytest.raises(asyncio.CancelledError):
                    await tasks["second"]
                first = await tasks["first"]
                await asyncio.gather(*blockers)
            assert first.outcome is SagaOutcome.COMPLETED, repr(first.error)
            assert ledger.ran == ["first"]
            assert sagacity.journal.entries("second") == []
        finally:
            sagacity.close()


class TestBatchSemantics:
    @pytest.fixture
    def journal(self, shared_store_url: str) -> Iterator[SideEffectJournal]:
        sagacity = Sagacity.from_url(shared_store_url)
        yield sagacity.journal
        sagacity.close()

    def test_a_refused_append_fails_alone_in_its_batch(self, journal: SideEffectJournal) -> None:
        """A conflicting conditional append and a fenced one taken over fail alone.

        The other appends of the same batch are committed, each saga's in order.
        """
        import datetime

        from sagacity import AppendConflictError, LeaseLostError
        from sagacity.journal._group import AppendRequest

        now = datetime.datetime.now(datetime.UTC)
        journal.append("a", Phase.INTENT)
        stale = journal.acquire_lease("b", "w1", now=now, expires_at=now)
        journal.acquire_lease("b", "w2", now=now, expires_at=now + datetime.timedelta(hours=1))
        results = journal._group._many(  # type: ignore[attr-defined]
            [
                AppendRequest("a", Phase.EXECUTED, ref_seq=1, expected_seq=1),
                AppendRequest("a", Phase.ENDED, expected_seq=1),  # seq 1 is no longer last
                AppendRequest("b", Phase.INTENT, fence=stale),
                AppendRequest("c", Phase.INTENT),
                AppendRequest("a", Phase.ENDED, expected_seq=2),
            ]
        )
        assert isinstance(results[1], AppendConflictError)
        assert (results[1].expected_seq, results[1].found_seq) == (1, 2)
        assert isinstance(results[2], LeaseLostError)
        assert [(e.saga_id, e.seq) for e in results if isinstance(e, JournalEntry)] == [
            ("a", 2),
            ("c", 1),
            ("a", 3),
        ]
        assert [e.phase for e in journal.entries("a")] == [
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.ENDED,
        ]
        assert journal.entries("b") == []
        assert verify(journal).ok
