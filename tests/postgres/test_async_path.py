"""PostgreSQL appends from async code: the loop's own async connections, and their lifetime."""

from __future__ import annotations

import asyncio
import datetime
import gc
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence

import psycopg
import pytest

from sagacity import (
    JournalError,
    LeaseLostError,
    Phase,
    SagaBusyError,
    Sagacity,
    SagaOutcome,
    SagaResult,
    compensable,
    verify,
)
from sagacity.journal import SagaLease
from sagacity.journal._group import CommittedThenCancelled, Slots
from sagacity.journal.postgres import PostgresJournal
from sagacity.journal.postgres._connections import AsyncLease
from sagacity.journal.postgres._leases import LeaseTake, Taken
from sagacity.journal.postgres._steps import Steps, _text_values, run_steps
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


def waiting_statement(
    admin: Admin, after: datetime.datetime | None = None
) -> tuple[int, datetime.datetime]:
    """The backend waiting on `admin`'s lock with a statement begun after `after`, and when."""
    for _ in range(500):
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute(
            "SELECT pid, query_start FROM pg_stat_activity "
            "WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid)) "
            "AND (%s::timestamptz IS NULL OR query_start > %s::timestamptz)",
            (after, after),
        ).fetchone()
        if row is not None:
            return int(row[0]), row[1]
        time.sleep(0.01)
    raise AssertionError("no statement came to wait on the lock")


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

    async def test_its_statement_is_cancelled_in_the_server_and_its_connection_kept(
        self, journal: PostgresJournal, admin: Admin
    ) -> None:
        """Cancelled, the waiting INSERT is cancelled in the server, not left running.

        The connection is then idle and healthy: the append's redo runs on the same
        backend. A connection left with its statement running would be closed instead.
        """
        await journal.aappend("order-1", Phase.INTENT, tool_name="reserve")
        admin.execute("BEGIN")
        admin.execute(f"LOCK TABLE {journal.database.tables.journal} IN SHARE MODE")
        try:
            appending = asyncio.create_task(
                journal.aappend("order-1", Phase.EXECUTED, tool_name="reserve", ref_seq=1)
            )
            pid, started = await asyncio.to_thread(waiting_statement, admin)
            appending.cancel()
            redo = await asyncio.to_thread(waiting_statement, admin, started)
            assert redo[0] == pid
        finally:
            admin.execute("ROLLBACK")
        with pytest.raises(CommittedThenCancelled) as cut:
            await appending
        assert cut.value.entry.seq == 2
        assert [e.seq for e in journal.entries("order-1")] == [1, 2]

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


class TestPreparedAppends:
    """An async append's INSERT goes as a statement prepared on its connection."""

    @staticmethod
    async def call_journaled(journal: PostgresJournal) -> AsyncLease:
        """Append a call's two entries; return the one connection they went on."""
        await journal.aappend("order-1", Phase.INTENT, tool_name="reserve")
        await journal.aappend("order-1", Phase.EXECUTED, tool_name="reserve", ref_seq=1)
        (lease,) = journal._async_idle._idle
        return lease

    @staticmethod
    async def prepared_on(journal: PostgresJournal) -> list[str]:
        (lease,) = journal._async_idle._idle
        cursor = await lease.conn.execute("SELECT name FROM pg_prepared_statements")
        rows = await cursor.fetchall()
        return sorted(name for (name,) in rows if name.startswith("sagacity_"))

    async def test_appends_are_chained_and_their_insert_prepared_once(
        self, journal: PostgresJournal
    ) -> None:
        entries = [await journal.aappend("order-1", Phase.INTENT, tool_name="reserve")]
        for seq in range(2, 6):
            entries.append(
                await journal.aappend("order-1", Phase.EXECUTED, tool_name="reserve", ref_seq=1)
            )
            assert entries[-1].seq == seq
        assert journal.entries("order-1") == entries
        assert verify(journal).ok
        (lease,) = journal._async_idle._idle
        (name,) = await self.prepared_on(journal)
        assert lease.prepared == {name.encode()}

    async def test_a_payload_larger_than_the_socket_takes_is_written_whole(
        self, journal: PostgresJournal
    ) -> None:
        """40 MB of result: the INSERT is sent over many waits for the socket to drain."""
        await journal.aappend("order-1", Phase.INTENT, tool_name="export")
        blob = "x" * 40_000_000
        async with asyncio.timeout(60):
            entry = await journal.aappend(
                "order-1", Phase.EXECUTED, tool_name="export", ref_seq=1, payload={"blob": blob}
            )
        (_, read) = journal.entries("order-1")
        assert read == entry
        assert read.payload == {"blob": blob}
        assert verify(journal).ok

    async def test_a_statement_the_server_forgot_is_prepared_again(
        self, journal: PostgresJournal
    ) -> None:
        """`DEALLOCATE ALL` on the connection: the next append is not lost, nor doubled."""
        lease = await self.call_journaled(journal)
        await lease.conn.execute("DEALLOCATE ALL")
        assert await self.prepared_on(journal) == []
        entry = await journal.aappend("order-1", Phase.INTENT, tool_name="charge")
        assert [e.seq for e in journal.entries("order-1")] == [1, 2, 3]
        assert entry.seq == 3
        assert len(await self.prepared_on(journal)) == 1
        assert verify(journal).ok

    async def test_a_statement_prepared_by_a_reply_lost_is_used(
        self, journal: PostgresJournal
    ) -> None:
        """A PREPARE cancelled after the server ran it: the next append uses its statement."""
        lease = await self.call_journaled(journal)
        lease.prepared.clear()  # the server has it; the connection's record does not
        entry = await journal.aappend("order-1", Phase.INTENT, tool_name="charge")
        assert entry.seq == 3
        assert journal.entries("order-1")[-1] == entry
        (name,) = await self.prepared_on(journal)
        assert lease.prepared == {name.encode()}

    def test_values_a_text_parameter_cannot_carry_are_left_to_psycopg(self) -> None:
        """Only str, int and None go as text; a NUL, a lone surrogate, a bool or a float not."""
        text = _text_values(("order-1", 7, None, "東京"))
        assert text == [b"order-1", b"7", None, "東京".encode()]
        for value in ("a\x00b", "\ud800", True, 1.5, b"raw"):
            assert _text_values(("order-1", value)) is None
        assert _text_values(["order-1"]) is None  # a statement's own parameters are a tuple

    async def test_a_value_a_text_parameter_cannot_carry_is_refused_as_before(
        self, journal: PostgresJournal
    ) -> None:
        """A NUL goes to psycopg, which refuses it: a JournalError naming the saga."""
        first = await journal.aappend("order-1", Phase.INTENT, tool_name="reserve")
        with pytest.raises(JournalError) as refused:
            await journal.aappend("order-1", Phase.EXECUTED, tool_name="bad\x00name", ref_seq=1)
        message = str(refused.value)
        assert message.startswith("saga 'order-1': cannot append EXECUTED of tool 'bad\\x00name'")
        assert message.endswith("the entry was not written")
        assert journal.entries("order-1") == [first]
        assert (await journal.aappend("order-1", Phase.ENDED)).seq == 2


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


class _Batches:
    """The batches of lease takes a journal sends: the sagas of each, as asked."""

    def __init__(self, journal: PostgresJournal, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sagas: list[list[str]] = []
        leases = journal._leases
        many = leases.acquire_many

        def counted(takes: Sequence[LeaseTake]) -> Steps[list[Taken | SagaBusyError]]:
            self.sagas.append([take.saga_id for take in takes])
            return many(takes)

        monkeypatch.setattr(leases, "acquire_many", counted)


def lease_times() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now, now + datetime.timedelta(minutes=1)


class TestLeaseTakesTogether:
    """Leases asked for while commits are in flight go together, in one statement.

    The first two take a commit slot each; the rest wait for one and go as a batch.
    """

    def test_sagas_started_together_each_run_once(
        self, pg_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Forty sagas started at once: most leases go in batches, each saga runs once.

        Takes in flight stay fresh however slow the machine is, so those behind them
        wait and go together rather than alone past a take gone stale.
        """
        monkeypatch.setattr(Slots, "STALE_AFTER", 3600.0)
        sagacity = Sagacity.from_url(pg_url)
        batches = _Batches(sagacity.journal, monkeypatch)  # type: ignore[arg-type]
        (tool,) = sagacity.wrap(reserve)
        ids = [f"order-{n:02}" for n in range(40)]

        async def main() -> list[SagaResult]:
            async def one(saga_id: str) -> SagaResult:
                return await sagacity.asaga(saga_id, lambda: tool(saga_id))

            return await asyncio.gather(*(one(saga_id) for saga_id in ids))

        try:
            results = asyncio.run(main())
            assert [r.outcome for r in results] == [SagaOutcome.COMPLETED] * len(ids)
            assert [r.value for r in results] == [f"res-{saga_id}" for saga_id in ids]
            batched = [saga for batch in batches.sagas for saga in batch]
            assert len(batched) >= len(ids) // 2  # most went together
            assert len(set(batched)) == len(batched)
            assert max(len(batch) for batch in batches.sagas) <= 32  # the rest waits its turn
            for saga_id in ids:
                assert [e.phase for e in sagacity.journal.entries(saga_id)] == [
                    Phase.INTENT,
                    Phase.EXECUTED,
                    Phase.ENDED,
                ]
            assert verify(sagacity.journal).ok
        finally:
            sagacity.close()

    async def test_each_take_in_a_batch_gets_its_own_answer(self, journal: PostgresJournal) -> None:
        """Free, held by another, asked for twice, or taken over with TAKEN_OVER: one statement."""
        now, later = lease_times()
        journal.acquire_lease("held", "other", now=now, expires_at=later)
        stalled = journal.acquire_lease("stalled", "gone", now=now, expires_at=now)
        journal.append("stalled", Phase.INTENT, tool_name="reserve", fence=stalled)

        ids = ["free", "held", "twice", "twice", "stalled"]
        takes = [journal._take(saga_id, f"me-{n}", now, later) for n, saga_id in enumerate(ids)]
        with admin_connection() as conn:
            answers = run_steps(conn.cursor(), journal._leases.acquire_many(takes))
        assert isinstance(answers[1], SagaBusyError)
        assert "held by other" in str(answers[1])
        assert [isinstance(answer, SagaBusyError) for answer in answers[2:4]] == [False, True]
        for index, head_seq in ((0, 0), (2, 0), (4, 2)):
            taken = answers[index]
            assert not isinstance(taken, SagaBusyError), repr(taken)
            lease, seq, _ = taken
            assert (lease.saga_id, lease.owner, lease.head_seq, seq) == (
                ids[index],
                f"me-{index}",
                head_seq,
                head_seq,
            )
        marker = journal.entries("stalled")[-1]
        assert (marker.seq, marker.phase, marker.payload) == (
            2,
            Phase.TAKEN_OVER,
            {"owner": "me-4"},
        )
        with pytest.raises(LeaseLostError):  # the former holder is fenced out
            await journal.aappend("stalled", Phase.EXECUTED, ref_seq=1, fence=stalled)
        assert verify(journal).ok

    async def test_a_batch_the_server_refuses_is_taken_lease_by_lease(
        self, journal: PostgresJournal, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The six takes queued behind the first two go as one batch, then each alone.

        The first two takes stay fresh however slow the machine is, so the rest wait for
        one of them to end and go together, not alone past a take gone stale.
        """
        monkeypatch.setattr(Slots, "STALE_AFTER", 3600.0)
        batches = _Batches(journal, monkeypatch)
        monkeypatch.setattr(journal._leases, "_sql_acquire_many", b"SELECT no_such_function()")
        now, later = lease_times()
        ids = [f"order-{n}" for n in range(8)]
        taken = await asyncio.gather(
            *(journal.aacquire_lease(saga_id, "me", now=now, expires_at=later) for saga_id in ids)
        )
        assert len(batches.sagas) == 1  # sent, refused, and each taken alone after
        assert [(lease.saga_id, lease.owner, lease.token) for lease in taken] == [
            (saga_id, "me", 1) for saga_id in ids
        ]

    def test_sagas_cancelled_while_their_takes_wait_leave_no_lease_held(
        self, pg_url: str, admin: Admin, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Cancelled while the server holds their lease statements: each lease taken is let go.

        Run again at once, with no wait for a busy saga, every saga runs its work.
        """
        sagacity = Sagacity.from_url(pg_url)
        batches = _Batches(sagacity.journal, monkeypatch)  # type: ignore[arg-type]
        (tool,) = sagacity.wrap(reserve)
        journal: PostgresJournal = sagacity.journal  # type: ignore[assignment]
        ids = [f"order-{n:02}" for n in range(12)]
        ran: list[str] = []

        def work(saga_id: str) -> Callable[[], Awaitable[object]]:
            async def run() -> object:
                ran.append(saga_id)
                return await tool(saga_id)

            return run

        async def cancelled_run() -> None:
            admin.execute("BEGIN")  # every lease statement waits for this lock
            admin.execute(f"LOCK TABLE {journal.database.tables.lease} IN EXCLUSIVE MODE")
            running = [asyncio.create_task(sagacity.asaga(s, work(s))) for s in ids]
            await asyncio.to_thread(blocked_backend, admin)
            await asyncio.sleep(0.05)  # the rest queue behind the two in the server
            for task in running:
                task.cancel()
            await asyncio.sleep(0.05)
            admin.execute("ROLLBACK")
            outcomes = await asyncio.gather(*running, return_exceptions=True)
            assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes

        try:
            asyncio.run(cancelled_run())
            assert ran == []
            assert batches.sagas  # a batch was sent

            async def run_again() -> list[SagaResult]:
                return await asyncio.gather(*(sagacity.asaga(s, work(s)) for s in ids))

            results = asyncio.run(run_again())
            assert [r.outcome for r in results] == [SagaOutcome.COMPLETED] * len(ids)
            assert sorted(ran) == ids
        finally:
            if admin.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                admin.execute("ROLLBACK")
            sagacity.close()

    async def test_a_taker_that_left_gets_its_lease_on_a_retry_of_the_same_take(
        self, journal: PostgresJournal, admin: Admin, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Takers that time out while their batch waits in the server: each take goes on.

        As a take whose reply was lost: a retry with the same owner and expiry is granted
        the lease the batch took (the same token), and is then released as any other.
        """
        batches = _Batches(journal, monkeypatch)
        now, later = lease_times()
        ids = [f"order-{n:02}" for n in range(12)]
        admin.execute("BEGIN")  # every lease statement waits for this lock
        admin.execute(f"LOCK TABLE {journal.database.tables.lease} IN EXCLUSIVE MODE")
        try:

            async def one(saga_id: str) -> SagaLease:
                async with asyncio.timeout(0.3):
                    return await journal.aacquire_lease(saga_id, "me", now=now, expires_at=later)

            outcomes = await asyncio.gather(*(one(s) for s in ids), return_exceptions=True)
            assert all(isinstance(o, TimeoutError) for o in outcomes), outcomes
            assert batches.sagas  # the rest went as a batch, which the server held
        finally:
            admin.execute("ROLLBACK")
        again = await asyncio.gather(
            *(journal.aacquire_lease(s, "me", now=now, expires_at=later) for s in ids)
        )
        held: dict[str, int] = dict(
            admin.execute(f"SELECT saga_id, token FROM {journal.database.tables.lease}").fetchall()
        )
        assert {lease.saga_id: lease.token for lease in again} == held
        for lease in again:
            journal.release_lease(lease)
        for saga_id in ids:  # released: another worker takes each at once
            assert journal.acquire_lease(saga_id, "next", now=now, expires_at=later).owner == "next"

    @pytest.mark.parametrize("pool", [1, 2])
    def test_sagas_appending_without_pause_never_keep_a_new_saga_from_starting(
        self, pg_url: str, pool: int
    ) -> None:
        """Appends and lease takes that both wait for a commit slot take turns."""
        sagacity = Sagacity.from_url(f"{pg_url}&pool_max_size={pool}")
        (tool,) = sagacity.wrap(reserve)
        stop = asyncio.Event()

        async def main() -> bool:
            async def busy() -> None:
                while not stop.is_set():
                    await tool("A-1")

            running = [asyncio.create_task(sagacity.asaga(f"busy-{n}", busy)) for n in range(8)]
            await asyncio.sleep(0.2)  # the busy sagas append, their queue never empty
            newcomer = asyncio.create_task(sagacity.asaga("new", lambda: tool("B-1")))
            done, _ = await asyncio.wait([newcomer], timeout=10)
            stop.set()
            await asyncio.gather(*running)
            return newcomer in done

        try:
            assert asyncio.run(main())  # it ran while the others still appended
            assert [e.phase for e in sagacity.journal.entries("new")] == [
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.ENDED,
            ]
        finally:
            sagacity.close()

    def test_batches_of_sagas_whose_lock_keys_collide_never_wait_for_each_other(
        self, journal: PostgresJournal, admin: Admin
    ) -> None:
        """Lock keys are 32-bit hashes, and ids can be chosen to collide: batches lock in key order.

        Two batches of two sagas, whose ids sort one way and whose keys the other, both held by
        the server once they took a lock: both are granted, neither refused as deadlocked.
        """
        first, second = crossing_batches(journal)
        now, later = lease_times()
        admin.execute("BEGIN")  # each take waits for this lock once it holds its saga's lock
        admin.execute(f"LOCK TABLE {journal.database.tables.journal} IN ACCESS EXCLUSIVE MODE")
        answers: dict[str, object] = {}

        def take_all(owner: str, ids: list[str]) -> None:
            takes = [journal._take(saga_id, owner, now, later) for saga_id in ids]
            try:
                with admin_connection() as conn:
                    answers[owner] = run_steps(conn.cursor(), journal._leases.acquire_many(takes))
            except psycopg.Error as error:
                answers[owner] = error

        threads = [
            threading.Thread(target=take_all, args=("w1", first)),
            threading.Thread(target=take_all, args=("w2", second)),
        ]
        try:
            for thread in threads:
                thread.start()
            blocked_backends(admin, 2)
            admin.execute("ROLLBACK")
            for thread in threads:
                thread.join()
        finally:
            if admin.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                admin.execute("ROLLBACK")
        for owner in ("w1", "w2"):
            taken = answers[owner]
            assert isinstance(taken, list), repr(taken)
            assert [lease.owner for lease, _, _ in taken] == [owner, owner]


def crossing_batches(journal: PostgresJournal) -> tuple[list[str], list[str]]:
    """Two batches of two saga ids whose orders by id and by lock key cross.

    One id of each pair per batch, the ids of a pair sharing a lock key.
    """
    seen: dict[int, str] = {}
    pairs: list[tuple[str, str]] = []
    n = 0
    while len(pairs) < 2:
        saga_id = f"order-{n}"
        key = journal._lock_key(saga_id)
        if key in seen and seen[key] not in [saga for pair in pairs for saga in pair]:
            pairs.append((seen[key], saga_id))
        seen.setdefault(key, saga_id)
        n += 1
    (a, b), (c, d) = pairs
    if (a < c) == (b < d):  # swap one pair between the batches: the orders then cross
        c, d = d, c
    return [a, c], [b, d]


def blocked_backends(admin: Admin, count: int) -> None:
    """Wait until `count` backends wait on a lock (`admin`'s, or one that waits on it)."""
    for _ in range(500):
        admin.execute("SELECT pg_stat_clear_snapshot()")
        (blocked,) = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE cardinality(pg_blocking_pids(pid)) > 0"
        ).fetchone()  # type: ignore[misc]
        if blocked >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"fewer than {count} backends came to wait on a lock")
