"""Many threads appending through one PostgreSQL journal: group commit for sync callers.

Threads that append at once go in batches (`_threads.ThreadGroup`); a saga has at most one
commit in flight in a journal, so threads sharing a saga queue instead of colliding on its
primary key; a batch killed mid-commit loses nothing that was reported committed and
writes nothing twice; a pool too small says which setting to raise.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

import psycopg
import pytest

from sagacity import JournalError, Phase
from sagacity.audit import verify
from sagacity.journal import JournalEntry
from sagacity.journal._group import AppendRequest
from sagacity.journal.postgres import PostgresJournal
from tests._postgres import with_query
from tests.postgres.test_faults import Admin, blocked_backend, terminate

pytestmark = pytest.mark.postgres

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def schema_of(url: str) -> str:
    return dict(p.split("=") for p in urlsplit(url).query.split("&"))["schema"]


@pytest.fixture
def journal(pg_url: str) -> Iterator[PostgresJournal]:
    journal = PostgresJournal(pg_url)
    yield journal
    journal.close()


def run_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), "an append never returned"


class TestOneSagaManyThreads:
    def test_eight_fenced_threads_queue_instead_of_colliding(
        self, journal: PostgresJournal
    ) -> None:
        """8 threads under one lease: no conflict, no locked path, every append once, in order."""
        lease = journal.acquire_lease(
            "s", "w", now=NOW, expires_at=NOW + datetime.timedelta(hours=1)
        )
        journal.append("s", Phase.INTENT, payload="first", fence=lease)  # the head is known
        before = journal.stats
        start = threading.Barrier(8)
        returned: list[list[JournalEntry]] = [[] for _ in range(8)]

        def write(writer: int) -> None:
            start.wait()
            for n in range(40):
                returned[writer].append(
                    journal.append("s", Phase.INTENT, payload={"w": writer, "n": n}, fence=lease)
                )

        run_all([threading.Thread(target=write, args=(w,)) for w in range(8)])
        stats = journal.stats
        assert stats.conflicts == before.conflicts  # none met another on the key
        assert stats.locked == before.locked  # and none took the locked path
        entries = journal.entries("s")
        assert [e.seq for e in entries] == list(range(1, 322))
        assert verify(journal, "s").ok
        for writer, mine in enumerate(returned):
            assert [e.payload for e in mine] == [{"w": writer, "n": n} for n in range(40)]
            assert [e.seq for e in mine] == sorted(e.seq for e in mine)  # each in its order
            for entry in mine:
                assert entries[entry.seq - 1] == entry
        assert journal.group_stats.batched > 0  # they went together

    def test_threads_on_many_sagas_go_in_batches(self, journal: PostgresJournal) -> None:
        """16 threads on 16 sagas: fewer commits than appends, every chain whole."""
        start = threading.Barrier(16)

        def write(writer: int) -> None:
            journal.entries(f"s{writer}")
            start.wait()
            for n in range(30):
                journal.append(f"s{writer}", Phase.INTENT, payload=n)

        run_all([threading.Thread(target=write, args=(w,)) for w in range(16)])
        for writer in range(16):
            assert [e.payload for e in journal.entries(f"s{writer}")] == list(range(30))
        assert verify(journal).ok
        group = journal.group_stats
        assert group.commits < 16 * 30
        assert group.largest > 1


HOSTILE = [
    'a "quoted" word',
    'back\\slash and \\" both',
    "{braces},commas,",
    "NULL",
    "",
    " spaces ",
    "ünïcödé ✓ 𝄞",
    "'single' quotes; DROP TABLE x; --",
    "\\",
    '"',
    "{",
    "tab\tnew\nline",
]


class TestBatchValues:
    def test_hostile_strings_go_through_a_batch_exactly(self, journal: PostgresJournal) -> None:
        """Quotes, backslashes, braces, the word NULL, empty strings: stored as they came."""
        sagas = [f"s{i} {text}" for i, text in enumerate(HOSTILE)]
        for saga in sagas:
            journal.entries(saga)  # known heads: each append is sealed into the batch
        requests = [
            AppendRequest(saga, Phase.INTENT, tool_name=text, call_id=text, payload={text: [text]})
            for saga, text in zip(sagas, HOSTILE, strict=True)
        ]
        results = journal._group._many(requests)
        assert all(isinstance(result, JournalEntry) for result in results)
        assert journal.group_stats.commits == 0  # one statement, not counted as a commit
        for saga, text, result in zip(sagas, HOSTILE, results, strict=True):
            (entry,) = journal.entries(saga)
            assert entry == result
            assert (entry.tool_name, entry.call_id, entry.payload) == (text, text, {text: [text]})
        assert verify(journal).ok

    def test_a_value_a_text_parameter_cannot_carry_fails_alone(
        self, journal: PostgresJournal
    ) -> None:
        """A NUL in one tool name: that append is refused, the others are written."""
        for saga in ("a", "b"):
            journal.entries(saga)
        results = journal._group._many(
            [
                AppendRequest("a", Phase.INTENT, tool_name="bad\x00name"),
                AppendRequest("b", Phase.INTENT, tool_name="good"),
            ]
        )
        assert isinstance(results[0], JournalError)
        assert isinstance(results[1], JournalEntry)
        assert journal.entries("a") == []
        assert [e.tool_name for e in journal.entries("b")] == ["good"]


class TestKilledMidCommit:
    def test_a_batch_of_threads_killed_mid_commit(self, pg_url: str, admin: Admin) -> None:
        """The backend of a batch of 5 threads' appends is terminated while it commits.

        One commit in flight at most (`pool_max_size=2`): thread 0 holds it, waiting on an
        advisory lock an operator holds, while 5 threads queue; let go, the 5 go as one
        batch, whose INSERT waits on a row another session has not committed at one of its
        sagas' next seq; its backend is then killed. Each append returns its entry once the
        entry is committed, or raises: nothing reported committed is missing, nothing is
        written twice, every chain verifies.
        """
        journal = PostgresJournal(with_query(pg_url, pool_max_size="2", pool_timeout="30"))
        blocker = psycopg.connect(pg_url.split("?")[0], autocommit=True)
        try:
            sagas = [f"s{i}" for i in range(6)]
            firsts = [journal.append(saga, Phase.INTENT, payload="first") for saga in sagas]
            # Thread 0's saga is one the journal has not read: its append takes the lock.
            journal._appender.heads.pop("s0")
            k1, k2 = journal.advisory_lock_key("s0")
            admin.execute("BEGIN")
            admin.execute("SELECT pg_advisory_xact_lock(%s, %s)", (k1, k2))
            blocker.execute("BEGIN")
            blocker.execute(
                f'INSERT INTO "{schema_of(pg_url)}".sagacity_journal VALUES '
                "('s3', 2, 'ENDED', NULL, NULL, NULL, 'null', 'now', %s, %s)",
                (firsts[3].hash, "f" * 64),
            )
            outcomes: dict[int, Any] = {}

            def write(index: int) -> None:
                try:
                    outcomes[index] = journal.append(
                        sagas[index], Phase.EXECUTED, ref_seq=1, payload={"i": index}
                    )
                except BaseException as error:
                    outcomes[index] = error

            first = threading.Thread(target=write, args=(0,))
            first.start()
            blocked_backend(admin)  # thread 0's commit waits on the operator's lock
            group = journal._group
            others = [threading.Thread(target=write, args=(i,)) for i in range(1, 6)]
            for thread in others:
                thread.start()
            deadline = time.monotonic() + 30
            while len(group._queue) < 5:  # all five queued behind thread 0's commit
                assert time.monotonic() < deadline, "the appends did not queue"
                time.sleep(0.005)
            admin.execute("COMMIT")  # thread 0 commits; the five go as one batch
            first.join(timeout=30)
            batch_pid = blocked_by(admin, blocker)
            assert group.stats.largest == 5
            terminate(admin, batch_pid)
            # The batch failed: each of its appends is redone alone, in doubt; s3's waits
            # on the blocker's row again until it rolls back.
            blocked_by(admin, blocker)
            blocker.execute("ROLLBACK")
            for thread in others:
                thread.join(timeout=60)
                assert not thread.is_alive()
            assert journal.stats.reconnects >= 1
            for index, saga in enumerate(sagas):
                outcome = outcomes[index]
                assert isinstance(outcome, JournalEntry), outcome
                entries = journal.entries(saga)
                assert [e.payload for e in entries] == ["first", {"i": index}]  # once each
                assert entries[1] == outcome
            assert verify(journal).ok
        finally:
            blocker.close()
            journal.close()

    def test_threads_appending_while_backends_are_killed(self, pg_url: str, admin: Admin) -> None:
        """12 threads append in batches while their backends are killed again and again.

        What an append returned is in the journal, with that hash; what raised may or may
        not be; nothing is there twice.
        """
        url = with_query(pg_url, pool_max_size="3", pool_timeout="30", application_name="victim")
        journal = PostgresJournal(url)
        stop = threading.Event()
        killed = threading.Event()  # a commit was cut at least once: the test means something
        kills = 0
        attempts = [0] * 12
        returned: list[list[JournalEntry]] = [[] for _ in range(12)]
        failed: list[BaseException] = []
        deadline = time.monotonic() + 60

        def write(writer: int) -> None:
            journal.entries(f"w{writer}")
            # 40 appends each, and on until the killer cut one (a fast server can finish
            # 40 before the killer sees an INSERT in flight).
            while attempts[writer] < 40 or not (killed.is_set() or time.monotonic() > deadline):
                attempts[writer] += 1
                try:
                    returned[writer].append(
                        journal.append(f"w{writer}", Phase.INTENT, payload={"n": attempts[writer]})
                    )
                except JournalError as error:
                    failed.append(error)

        def kill() -> None:
            nonlocal kills
            while not stop.is_set():
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'victim' AND state = 'active' "
                    "AND query LIKE 'INSERT%%'"
                ).fetchall()
                kills += sum(1 for (done,) in rows if done)
                if kills:
                    killed.set()
                stop.wait(0.005)

        killer = threading.Thread(target=kill)
        killer.start()
        try:
            run_all([threading.Thread(target=write, args=(w,)) for w in range(12)])
        finally:
            stop.set()
            killer.join()
        try:
            assert kills > 0
            assert journal.group_stats.batched > 0
            for writer, mine in enumerate(returned):
                entries = journal.entries(f"w{writer}")
                payloads = [cast(dict[str, int], e.payload)["n"] for e in entries]
                assert len(payloads) == len(set(payloads))  # nothing twice
                assert payloads == sorted(payloads)
                for entry in mine:  # nothing reported committed is missing
                    assert entries[entry.seq - 1] == entry
            assert len(failed) <= sum(attempts) - sum(len(mine) for mine in returned)
            assert verify(journal).ok
        finally:
            journal.close()


def blocked_by(admin: Admin, blocker: psycopg.Connection[Any]) -> int:
    """Wait for a backend blocked by `blocker`'s transaction; return its pid."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (blocker.info.backend_pid,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        time.sleep(0.01)
    raise AssertionError("no backend came to wait on the blocker")


class TestPoolExhausted:
    def test_appends_that_find_no_connection_name_the_setting(self, pg_url: str) -> None:
        """Every connection of the pool held: an append fails within pool_timeout, naming it."""
        journal = PostgresJournal(with_query(pg_url, pool_max_size="2", pool_timeout="0.5"))
        held = [journal.database.checkout(time.monotonic() + 5) for _ in range(2)]
        try:
            started = time.monotonic()
            with pytest.raises(JournalError) as refused:
                journal.append("order-1", Phase.INTENT, tool_name="reserve")
            assert time.monotonic() - started < 10
            message = str(refused.value)
            assert "all 2 connections of the pool stayed busy for 0.5 s" in message
            assert "raise pool_max_size" in message
            assert message.endswith("the entry was not written")
        finally:
            for lease in held:
                journal.database.checkin(lease)
        assert journal.append("order-1", Phase.INTENT, tool_name="reserve").seq == 1
        journal.close()


class TestKeptAside:
    def test_connections_ended_while_kept_aside_are_not_used(
        self, pg_url: str, admin: Admin
    ) -> None:
        """Every connection given back waits aside; one whose backend ended is not used.

        The append goes on a new connection, with nothing sent on a dead one (no
        reconnect counted, the entry written once).
        """
        journal = PostgresJournal(with_query(pg_url, pool_max_size="4"))
        try:
            journal.append("order-1", Phase.INTENT)
            leases = [journal.database.checkout(time.monotonic() + 5) for _ in range(3)]
            for lease in leases:
                journal.database.checkin(lease)
            for lease in leases:
                terminate(admin, lease.conn.info.backend_pid)
            assert journal.append("order-1", Phase.EXECUTED, ref_seq=1).seq == 2
            assert journal.stats.reconnects == 0
            assert [e.phase for e in journal.entries("order-1")] == [
                Phase.INTENT,
                Phase.EXECUTED,
            ]
        finally:
            journal.close()
