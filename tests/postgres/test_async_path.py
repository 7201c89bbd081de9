"""PostgreSQL appends from async code: the loop's own async connections, and their lifetime."""

from __future__ import annotations

import asyncio
import datetime
import gc
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from sagacity import (
    JournalError,
    Phase,
    SagaBusyError,
    Sagacity,
    SagaOutcome,
    SagaResult,
    compensable,
    verify,
)
from sagacity.journal._group import CommittedThenCancelled
from sagacity.journal.postgres import PostgresJournal
from tests._postgres import admin_connection
from tests.postgres.test_faults import Admin, blocked_backend, in_thread

pytestmark = pytest.mark.postgres


@pytest.fixture
def journal(pg_url: str) -> Iterator[PostgresJournal]:
    journal = PostgresJournal(pg_url)
    yield journal
    journal.close()


def idle_pids(journal: PostgresJournal) -> list[int]:
    """The server pids of the journal's idle async connections."""
    return [lease.conn.info.backend_pid for lease in journal._async_idle._idle]


def wait_gone(admin: Admin, pids: list[int]) -> None:
    for _ in range(500):
        admin.execute("SELECT pg_stat_clear_snapshot()")
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
        ).fetchall()
        if not rows:
            return
        time.sleep(0.01)
    raise AssertionError(f"backends {pids} still connected")


@compensable(by="release")
async def reserve(sku: str) -> str:
    return f"res-{sku}"


def release(ctx: object) -> None:
    """Release stock."""


class TestOnTheLoop:
    def test_an_async_saga_uses_no_worker_thread(self, pg_url: str) -> None:
        """Lease, journal read, calls and end all go out on the loop's async connections.

        No writer thread, and no thread of the loop's executor.
        """
        sagacity = Sagacity.from_url(pg_url)
        (tool,) = sagacity.wrap(reserve)
        try:

            async def work() -> str:
                return str(await tool("A-1"))

            async def run() -> tuple[object, list[str]]:
                before = set(threading.enumerate())  # other tests' loops may have left some
                result = await sagacity.asaga("order-1", work)
                started = set(threading.enumerate()) - before
                return result, [t.name for t in started if "asyncio" in t.name]

            result, executor_threads = asyncio.run(run())
            assert isinstance(result, SagaResult)
            assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "res-A-1")
            assert executor_threads == []
            group = sagacity.journal._group  # type: ignore[attr-defined]
            assert group._writers == []  # no writer thread was ever started
            assert group.stats.commits >= 3  # INTENT, EXECUTED and ENDED, counted
            assert verify(sagacity.journal, "order-1").ok
        finally:
            sagacity.close()

    def test_one_journal_serves_loop_after_loop(self, journal: PostgresJournal) -> None:
        """Each `asyncio.run` is a new loop: each gets its own connections, the chain goes on."""
        for n in range(3):
            entry = asyncio.run(journal.aappend("order-1", Phase.INTENT, payload={"n": n}))
            assert entry.seq == n + 1
        assert [e.payload for e in journal.entries("order-1")] == [{"n": 0}, {"n": 1}, {"n": 2}]

    def test_appends_from_two_loops_on_two_threads_interleave_in_one_chain(
        self, journal: PostgresJournal
    ) -> None:
        def on_a_loop(tag: str) -> None:
            async def appends() -> None:
                for n in range(20):
                    await journal.aappend("shared", Phase.INTENT, payload=f"{tag}{n}")

            asyncio.run(appends())

        threads = [threading.Thread(target=on_a_loop, args=(tag,)) for tag in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        entries = journal.entries("shared")
        assert [e.seq for e in entries] == list(range(1, 41))
        for tag in "ab":  # each loop's appends in the order it made them
            assert [e.payload for e in entries if str(e.payload)[0] == tag] == [
                f"{tag}{n}" for n in range(20)
            ]
        assert verify(journal, "shared").ok


class TestConnectionsEnd:
    def test_with_the_journal(self, pg_url: str, admin: Admin) -> None:
        journal = PostgresJournal(pg_url)
        loop = asyncio.new_event_loop()
        try:

            async def append() -> list[int]:
                await journal.aappend("order-1", Phase.INTENT)
                return idle_pids(journal)

            pids = loop.run_until_complete(append())
            assert len(pids) == 1
            journal.close()  # from outside the loop, which still exists
            wait_gone(admin, pids)
            with pytest.raises(JournalError, match="closed"):
                loop.run_until_complete(journal.aappend("order-1", Phase.EXECUTED, ref_seq=1))
        finally:
            loop.close()
            journal.close()

    def test_not_with_their_loop_the_next_loop_reuses_them(
        self, journal: PostgresJournal, admin: Admin
    ) -> None:
        """A loop gone (its `asyncio.run` returned) leaves its connection to the next loop.

        One `asyncio.run` per request must not open a connection per request.
        """

        async def append(n: int) -> list[int]:
            await journal.aappend("order-1", Phase.INTENT, payload=n)
            return idle_pids(journal)

        first = asyncio.run(append(1))
        gc.collect()  # the first loop is unreachable, and so is its writer
        assert len(journal._loop_writers) == 0
        assert asyncio.run(append(2)) == first
        assert [e.payload for e in journal.entries("order-1")] == [1, 2]
        journal.close()
        wait_gone(admin, first)


class TestCancelledWhileAppendingAlone:
    """A lone append is committed by the caller's own task.

    Cancelled in flight, psycopg cancels its statement in the server, and the append goes
    on in doubt until its fate is known.
    """

    @pytest.mark.parametrize("cancels", [1, 2])
    async def test_the_entry_lands_once_and_the_caller_learns_it(
        self, journal: PostgresJournal, admin: Admin, cancels: int
    ) -> None:
        first = await journal.aappend("order-1", Phase.INTENT, tool_name="reserve")
        admin.execute("BEGIN")  # every INSERT into the journal waits for this lock
        admin.execute(f"LOCK TABLE {journal.database.tables.journal} IN SHARE MODE")
        try:
            appending = asyncio.create_task(
                journal.aappend("order-1", Phase.EXECUTED, tool_name="reserve", ref_seq=1)
            )
            for _ in range(cancels):  # the second while the first's redo waits again
                await asyncio.to_thread(blocked_backend, admin)
                appending.cancel()
                await asyncio.sleep(0.2)
            admin.execute("ROLLBACK")
            with pytest.raises(CommittedThenCancelled) as cut:
                await appending
        finally:
            if admin.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                admin.execute("ROLLBACK")
        assert journal.entries("order-1") == [first, cut.value.entry]
        assert cut.value.entry.seq == 2
        assert (await journal.aappend("order-1", Phase.ENDED)).seq == 3  # the loop goes on
        assert verify(journal).ok

    async def test_a_refused_redo_ends_the_task_cancelled(
        self, journal: PostgresJournal, admin: Admin
    ) -> None:
        """Its lease gone while its cancelled append waits to be redone: nothing is written.

        The redo checks the token, and the task ends plainly cancelled.
        """
        now = datetime.datetime.now(datetime.UTC)
        lease = journal.acquire_lease("order-1", "w1", now=now, expires_at=now)
        await journal.aappend("order-1", Phase.INTENT, fence=lease)
        admin.execute("BEGIN")
        admin.execute(f"LOCK TABLE {journal.database.tables.journal} IN SHARE MODE")
        try:
            appending = asyncio.create_task(
                journal.aappend("order-1", Phase.EXECUTED, ref_seq=1, fence=lease)
            )
            await asyncio.to_thread(blocked_backend, admin)
            appending.cancel()
            await asyncio.sleep(0.2)
            with admin_connection() as other:  # the lease moves on while the redo waits
                other.execute(f"UPDATE {journal.database.tables.lease} SET token = token + 1")
            admin.execute("ROLLBACK")
        finally:
            if admin.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                admin.execute("ROLLBACK")
        with pytest.raises(asyncio.CancelledError) as cut:
            await appending
        assert not isinstance(cut.value, CommittedThenCancelled)
        assert [e.phase for e in journal.entries("order-1")] == [Phase.INTENT]


class TestCancelledWhileTakingTheLease:
    async def test_the_lease_it_took_is_let_go(self, pg_url: str, admin: Admin) -> None:
        """Cancelled while its lease statement waits: the lease, once taken, is released.

        The saga ran nothing, and another worker takes the saga at once.
        """
        sagacity = Sagacity.from_url(pg_url)
        (tool,) = sagacity.wrap(reserve)
        ran: list[str] = []
        journal: PostgresJournal = sagacity.journal  # type: ignore[assignment]
        try:
            now = datetime.datetime.now(datetime.UTC)
            journal.release_lease(
                journal.acquire_lease("order-1", "earlier", now=now, expires_at=now)
            )
            admin.execute("BEGIN")  # the lease row locked: the next acquisition waits for it
            admin.execute(
                f"SELECT 1 FROM {journal.database.tables.lease} WHERE saga_id = %s FOR UPDATE",
                ("order-1",),
            )

            async def work() -> None:
                ran.append("work")
                await tool("A-1")

            running = asyncio.create_task(sagacity.asaga("order-1", work))
            await asyncio.to_thread(blocked_backend, admin)
            running.cancel()
            await asyncio.sleep(0.05)
            admin.execute("ROLLBACK")
            with pytest.raises(asyncio.CancelledError):
                await running
            assert ran == []
            assert journal.entries("order-1") == []
            later = datetime.datetime.now(datetime.UTC)
            taken = journal.acquire_lease(
                "order-1", "next", now=later, expires_at=later + datetime.timedelta(minutes=1)
            )
            assert taken.owner == "next"
        finally:
            if admin.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                admin.execute("ROLLBACK")
            sagacity.close()


class TestFirstAcquisitionsRacing:
    @pytest.mark.parametrize("on_the_loop", [False, True], ids=["sync", "on-the-loop"])
    def test_the_second_names_the_first_as_holder(
        self, journal: PostgresJournal, admin: Admin, on_the_loop: bool
    ) -> None:
        """A saga's first lease, taken by another worker while this one's statement waits.

        That statement's snapshot predates the other's row: the holder is read anew, and
        this worker is told who holds the saga.
        """
        now = datetime.datetime.now(datetime.UTC)
        later = now + datetime.timedelta(minutes=1)
        admin.execute("BEGIN")  # another worker's first acquisition, not yet committed
        admin.execute(
            f"INSERT INTO {journal.database.tables.lease} VALUES (%s, 'other', 1, %s, 0)",
            ("new-saga", later),
        )

        def acquire() -> object:
            if on_the_loop:
                return asyncio.run(
                    journal.aacquire_lease("new-saga", "me", now=now, expires_at=later)
                )
            return journal.acquire_lease("new-saga", "me", now=now, expires_at=later)

        thread, outcome = in_thread(acquire)  # type: ignore[arg-type]
        blocked_backend(admin)
        admin.execute("COMMIT")
        thread.join()
        error = outcome["error"]
        assert isinstance(error, SagaBusyError), repr(error)
        assert "is held by other until" in str(error)
