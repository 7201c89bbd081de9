"""Lost connections, killed backends and a database that goes away while a saga runs."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from sagacity import (
    AppendConflictError,
    JournalError,
    Phase,
    Sagacity,
    SagaOutcome,
    compensable,
)
from sagacity.audit import verify
from sagacity.journal import JournalEntry, SideEffectJournal
from sagacity.journal.postgres import PostgresJournal
from tests._postgres import postgres_database_for, with_query
from tests.postgres._proxy import CuttingProxy

pytestmark = pytest.mark.postgres

Admin = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture(scope="module")
def own_database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of this module's own, which its tests take away and bring back."""
    yield from postgres_database_for(request)


def in_thread(append: Callable[[], JournalEntry]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `append` in a thread; its entry or error lands in the returned dict."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["entry"] = append()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.fixture(params=["sync", "loop"], ids=["sync", "on-the-loop"])
def edge(request: pytest.FixtureRequest) -> str:
    """Which path appends: a sync caller's, or an event loop's (its async connections)."""
    return str(request.param)


def appender(journal: PostgresJournal, edge: str) -> Callable[..., JournalEntry]:
    """`journal.append`, or the same append awaited on an event loop of its own."""
    if edge == "sync":
        return journal.append

    def append(saga_id: str, phase: Phase, **options: Any) -> JournalEntry:
        return asyncio.run(journal.aappend(saga_id, phase, **options))

    return append


def blocked_backend(admin: Admin) -> int:
    """Wait for the backend that waits on a lock `admin` holds, and return its pid."""
    for _ in range(500):
        # Inside `admin`'s transaction the statistics are a snapshot: take a new one.
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        ).fetchone()
        if row is not None:
            return int(row[0])
        time.sleep(0.01)
    raise AssertionError("no backend came to wait on the lock")


def terminate(admin: Admin, pid: int) -> None:
    """Kill one backend and wait until it is gone."""
    assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)


def database_down(admin: Admin, database: str) -> None:
    """What clients see of a restart: every session ended, new ones refused.

    Ended again until none is left: a session that was starting when connections were
    refused (a pool growing), or slow to end on a loaded machine, is ended too.
    """
    admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
    for _ in range(100):
        row = admin.execute(
            "SELECT count(*), bool_and(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchone()
        if row is not None and row[0] == 0:
            return
    raise AssertionError(f"the sessions of {database} did not end")


def database_up(admin: Admin, database: str) -> None:
    admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')


def serving_again(journal: SideEffectJournal) -> None:
    """Wait until the journal's pool hands out a connection to the database let back in.

    The pool reconnects on demand, each try bounded by the URL's `pool_timeout`: 1 s in
    these tests, so that an append refused while the database is away fails quickly,
    and a machine under load may take longer than that to start a backend. The
    connection a read gets is then kept aside for the next append, which needs none
    to be made (`PostgresDatabase.checkin`).
    """
    for _ in range(120):
        try:
            journal.list_sagas(limit=1)
            return
        except JournalError:
            continue  # each try waited its pool_timeout: no pause needed
    pytest.fail("the database let back in served no connection in 120 tries")


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def through_proxy(pg_url: str) -> tuple[CuttingProxy, str]:
    """A proxy to the server of `pg_url`, and the URL that goes through it."""
    parts = urlsplit(pg_url)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    netloc = parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{proxy.port}"
    return proxy, with_query(urlunsplit(parts._replace(netloc=netloc)), sslmode="disable")


class TestBackendKilledMidAppend:
    def test_killed_while_waiting_for_the_saga_lock(
        self, pg_url: str, admin: Admin, edge: str
    ) -> None:
        """A backend killed on the locked path: the append is redone once and written once."""
        journal = PostgresJournal(pg_url)
        append = appender(journal, edge)
        try:
            admin.execute("BEGIN")
            admin.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", journal.advisory_lock_key("order-1")
            )
            thread, outcome = in_thread(
                lambda: append("order-1", Phase.INTENT, payload={"sku": "A-1"})
            )
            terminate(admin, blocked_backend(admin))
            admin.execute("COMMIT")
            thread.join()
            entry = outcome["entry"]
            assert (entry.seq, entry.payload) == (1, {"sku": "A-1"})
            assert journal.entries("order-1") == [entry]
            assert journal.stats.reconnects == 1
        finally:
            journal.close()

    def test_killed_while_its_insert_waits(self, pg_url: str, admin: Admin, edge: str) -> None:
        """A backend killed on the fast path, its INSERT sent: the same entry is sent again."""
        journal = PostgresJournal(pg_url)
        append = appender(journal, edge)
        try:
            intent = journal.append("order-1", Phase.INTENT, tool_name="reserve", payload={})
            schema = dict(p.split("=") for p in urlsplit(pg_url).query.split("&"))["schema"]
            admin.execute("BEGIN")  # an uncommitted row at seq 2 makes the INSERT wait
            admin.execute(
                f'INSERT INTO "{schema}".sagacity_journal VALUES '
                "('order-1', 2, 'ENDED', NULL, NULL, NULL, 'null', 'now', %s, %s)",
                (intent.hash, "f" * 64),
            )
            thread, outcome = in_thread(
                lambda: append(
                    "order-1", Phase.EXECUTED, tool_name="reserve", ref_seq=1, payload="res-1"
                )
            )
            terminate(admin, blocked_backend(admin))
            admin.execute("ROLLBACK")
            thread.join()
            executed = outcome["entry"]
            assert journal.entries("order-1") == [intent, executed]
            assert (executed.seq, executed.prev_hash) == (2, intent.hash)
            assert journal.stats.reconnects == 1
            assert verify(journal, "order-1").ok
        finally:
            journal.close()

    @pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "locked-path"])
    def test_reply_lost_after_the_commit(self, pg_url: str, fast: bool, edge: str) -> None:
        """The server commits, the reply is lost: the retry finds its own row, not a twin."""
        proxy, url = through_proxy(pg_url)
        journal = PostgresJournal(url)
        append = appender(journal, edge)
        try:
            if fast:
                assert journal.entries("wire-1") == []  # the head is known: the fast path
            # The fast path's reply is an INSERT's; the locked path's, its function's row.
            proxy.cut_reply_containing(b"INSERT 0 1" if fast else b"SELECT 1")
            entry = append("wire-1", Phase.INTENT, payload={"amount": "10.00"})
            assert proxy.cuts == 1
            assert journal.entries("wire-1") == [entry]
            assert (journal.stats.reconnects, journal.stats.conflicts) == (1, 0)
        finally:
            journal.close()
            proxy.close()


class TestConditionalAppendRetried:
    @pytest.mark.parametrize("known", [True, False], ids=["head-known", "head-read"])
    def test_reply_lost_after_the_commit_is_not_a_conflict(
        self, pg_url: str, known: bool, edge: str
    ) -> None:
        """The conditional INSERT commits and its reply is lost: the retry returns that entry.

        The row at expected_seq + 1 is the entry itself, so it is no conflict.
        """
        writer = PostgresJournal(pg_url)
        proxy, url = through_proxy(pg_url)
        journal = PostgresJournal(url)
        try:
            first = writer.append("wire-1", Phase.AWAITING_APPROVAL, payload={"amount": "10"})
            if known:
                assert journal.entries("wire-1") == [first]  # the head is known: one INSERT
            proxy.cut_reply_containing(b"INSERT 0 1")
            entry = appender(journal, edge)(
                "wire-1", Phase.INTENT, tool_name="wire", payload={"amount": "10"}, expected_seq=1
            )
            assert proxy.cuts == 1
            assert (entry.seq, entry.prev_hash) == (2, first.hash)
            assert writer.entries("wire-1") == [first, entry]
            assert (journal.stats.reconnects, journal.stats.conflicts) == (1, 0)
        finally:
            journal.close()
            writer.close()
            proxy.close()

    @pytest.mark.parametrize("other_commits", [False, True], ids=["rolled-back", "committed"])
    def test_killed_while_its_insert_waits(
        self, pg_url: str, admin: Admin, other_commits: bool, edge: str
    ) -> None:
        """A conditional INSERT waits on another writer's row at its seq, and is killed.

        The entry is sent again: written if the other writer rolled back, a conflict naming
        the other's seq if it committed; never both, never a second copy.
        """
        journal = PostgresJournal(pg_url)
        try:
            intent = journal.append("order-1", Phase.INTENT, tool_name="reserve", payload={})
            schema = dict(p.split("=") for p in urlsplit(pg_url).query.split("&"))["schema"]
            admin.execute("BEGIN")  # an uncommitted row at seq 2 makes the INSERT wait
            admin.execute(
                f'INSERT INTO "{schema}".sagacity_journal VALUES '
                "('order-1', 2, 'ENDED', NULL, NULL, NULL, 'null', 'now', %s, %s)",
                (intent.hash, "f" * 64),
            )
            append = appender(journal, edge)
            thread, outcome = in_thread(
                lambda: append(
                    "order-1", Phase.EXECUTED, ref_seq=1, payload="res-1", expected_seq=1
                )
            )
            terminate(admin, blocked_backend(admin))
            admin.execute("COMMIT" if other_commits else "ROLLBACK")
            thread.join()
            entries = journal.entries("order-1")
            assert journal.stats.reconnects == 1
            if other_commits:
                error = outcome["error"]
                assert isinstance(error, AppendConflictError)
                assert (error.expected_seq, error.found_seq) == (1, 2)
                assert [(e.seq, e.phase, e.hash) for e in entries] == [
                    (1, Phase.INTENT, intent.hash),
                    (2, Phase.ENDED, "f" * 64),
                ]
            else:
                executed = outcome["entry"]
                assert entries == [intent, executed]
                assert (executed.seq, executed.prev_hash) == (2, intent.hash)
                assert verify(journal, "order-1").ok
        finally:
            journal.close()


class Shop:
    def __init__(self) -> None:
        self.calls: list[str] = []

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        """Reserve stock."""
        self.calls.append(f"reserve {sku}")
        return f"res-{sku}"

    def release(self) -> None:
        self.calls.append("release")

    @compensable(by="refund")
    def charge(self, amount: str) -> str:
        """Charge the card."""
        self.calls.append(f"charge {amount}")
        return f"ch-{amount}"

    def refund(self) -> None:
        self.calls.append("refund")


class TestDatabaseRestart:
    """A restart as clients see it, on the test's own database.

    The server itself is not restarted, since other tests share it: every session of
    the database is ended and new ones are refused, then let back in.
    """

    @pytest.mark.slow
    def test_a_tool_whose_intent_cannot_be_written_is_not_called(
        self, own_database_url: str, admin: Admin
    ) -> None:
        """While the database is away the tool is refused, with the reason.

        Afterwards the saga goes on over new connections and completes.
        """
        database = database_of(own_database_url)
        sagacity = Sagacity.from_url(with_query(own_database_url, pool_timeout="1"))
        shop = Shop()
        tools = {tool.name: tool for tool in sagacity.wrap(shop)}
        reserve, charge = tools["reserve"], tools["charge"]
        refused: list[JournalError] = []

        def work() -> str:
            reserve(sku="A-1")
            database_down(admin, database)
            try:
                charge(amount="10.00")
            except JournalError as error:
                refused.append(error)
            database_up(admin, database)
            serving_again(sagacity.journal)
            return str(charge(amount="10.00"))

        try:
            result = sagacity.saga("order-7", work)
            assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "ch-10.00")
            assert shop.calls == ["reserve A-1", "charge 10.00"]
            (error,) = refused
            message = str(error)
            assert message.startswith("saga 'order-7': cannot append INTENT of tool 'charge'")
            assert "is not currently accepting connections" in message
            assert message.endswith("the entry was not written")
            history = sagacity.history("order-7")
            assert [(e.phase, e.call_id) for e in history] == [
                (Phase.INTENT, "reserve#1"),
                (Phase.EXECUTED, "reserve#1"),
                (Phase.INTENT, "charge#2"),
                (Phase.EXECUTED, "charge#2"),
                (Phase.ENDED, None),
            ]
            assert verify(sagacity.journal).ok
        finally:
            database_up(admin, database)
            sagacity.close()

    @pytest.mark.slow
    def test_an_append_cut_off_in_flight_fails_loudly(
        self, own_database_url: str, admin: Admin, edge: str
    ) -> None:
        """An INSERT in flight when the database goes away fails loudly.

        The JournalError says the entry may have been written; it was not, and the chain
        still verifies.
        """
        database = database_of(own_database_url)
        saga = f"order-8-{edge}"  # the module's database serves both edges
        journal = PostgresJournal(with_query(own_database_url, pool_timeout="1"))
        closing = contextlib.ExitStack()
        try:
            intent = journal.append(saga, Phase.INTENT, tool_name="charge", payload={})
            blocker = psycopg.connect(own_database_url, autocommit=True)
            closing.callback(blocker.close)
            blocker.execute("BEGIN")
            blocker.execute(
                "INSERT INTO sagacity_journal VALUES "
                "(%s, 2, 'ENDED', NULL, NULL, NULL, 'null', 'now', %s, %s)",
                (saga, intent.hash, "f" * 64),
            )
            append = appender(journal, edge)
            thread, outcome = in_thread(
                lambda: append(saga, Phase.EXECUTED, ref_seq=1, payload="ch-1")
            )
            waiting = blocked_backend_of(admin, blocker)
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            terminate(admin, waiting)  # before the blocker, whose end would let it through
            database_down(admin, database)
            blocker.close()
            thread.join()
            message = str(outcome["error"])
            assert message.startswith(f"saga {saga!r}: cannot append EXECUTED to PostgreSQL")
            assert "may or may not have been committed at seq 2" in message
            database_up(admin, database)
            assert journal.entries(saga) == [intent]
            assert verify(journal, saga).ok
        finally:
            closing.close()
            database_up(admin, database)
            journal.close()


def blocked_backend_of(admin: Admin, blocker: Admin) -> int:
    """Wait for a backend blocked by `blocker`'s transaction; return its pid."""
    for _ in range(500):
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (blocker.info.backend_pid,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        time.sleep(0.01)
    raise AssertionError("no backend came to wait on the blocker")
