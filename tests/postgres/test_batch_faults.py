"""A group-commit batch cut off mid-flight, on the sync path and on the event loop's.

A batch is one multi-row INSERT. Whatever becomes of it (its backend killed while it
waits, its reply lost after the server committed it, a lease taken over under one of
its sagas), every entry ends up written exactly once, each chain valid.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import pytest

from sagacity import JournalError, LeaseLostError, Phase, SerializationError
from sagacity.audit import verify
from sagacity.journal import JournalEntry
from sagacity.journal._group import AppendRequest
from sagacity.journal.postgres import PostgresJournal
from tests.postgres.test_faults import Admin, blocked_backend, in_thread, terminate, through_proxy

pytestmark = pytest.mark.postgres

Results = list[JournalEntry | BaseException]


@pytest.fixture(params=["sync", "loop"], ids=["sync-batch", "loop-batch"])
def driver(request: pytest.FixtureRequest) -> str:
    """Which batch path commits: a sync caller's, or an event loop's (async connections)."""
    return str(request.param)


def commit_batch(
    journal: PostgresJournal, requests: Sequence[AppendRequest], driver: str
) -> Results:
    """Commit `requests` as one batch on `driver`'s path; each one's entry or error."""
    if driver == "sync":
        results: Results = journal._group._many(requests)  # type: ignore[attr-defined]
        return results

    async def on_the_loop() -> Results:
        return await journal._new_loop_writer()._many(list(requests))

    return asyncio.run(on_the_loop())


def entries_of(results: Results) -> list[JournalEntry]:
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [result for result in results if isinstance(result, JournalEntry)]


@pytest.fixture
def journal(pg_url: str) -> Iterator[PostgresJournal]:
    journal = PostgresJournal(pg_url)
    yield journal
    journal.close()


def executed(saga_id: str) -> AppendRequest:
    return AppendRequest(saga_id, Phase.EXECUTED, tool_name="reserve", ref_seq=1, payload="ok")


class TestCutOff:
    def test_killed_while_its_statement_waits(
        self, journal: PostgresJournal, pg_url: str, admin: Admin, driver: str
    ) -> None:
        """Its backend killed, nothing written: each append is redone alone, once."""
        intents = [journal.append(s, Phase.INTENT, tool_name="reserve") for s in ("a-1", "b-1")]
        schema = dict(p.split("=") for p in urlsplit(pg_url).query.split("&"))["schema"]
        admin.execute("BEGIN")  # an uncommitted row at a-1's seq 2 makes the INSERT wait
        admin.execute(
            f'INSERT INTO "{schema}".sagacity_journal VALUES '
            "('a-1', 2, 'ENDED', NULL, NULL, NULL, 'null', 'now', %s, %s)",
            (intents[0].hash, "f" * 64),
        )
        thread, outcome = in_thread(
            lambda: commit_batch(journal, [executed("a-1"), executed("b-1")], driver)  # type: ignore[arg-type, return-value]
        )
        terminate(admin, blocked_backend(admin))
        admin.execute("ROLLBACK")
        thread.join()
        written = entries_of(outcome["entry"])
        assert [(e.saga_id, e.seq, e.prev_hash) for e in written] == [
            ("a-1", 2, intents[0].hash),
            ("b-1", 2, intents[1].hash),
        ]
        for intent, entry in zip(intents, written, strict=True):
            assert journal.entries(intent.saga_id) == [intent, entry]
        assert journal.stats.reconnects >= 1
        assert verify(journal).ok

    def test_reply_lost_after_the_commit(self, pg_url: str, driver: str) -> None:
        """The server committed the batch and its reply was lost: no entry is written twice."""
        proxy, url = through_proxy(pg_url)
        journal = PostgresJournal(url)
        try:
            intents = [journal.append(s, Phase.INTENT, tool_name="reserve") for s in ("a", "b")]
            proxy.cut_reply_containing(b"INSERT 0 2")  # the batch's two rows, committed
            written = entries_of(commit_batch(journal, [executed("a"), executed("b")], driver))
            assert proxy.cuts == 1
            for intent, entry in zip(intents, written, strict=True):
                assert journal.entries(intent.saga_id) == [intent, entry]
                assert entry.seq == 2
            assert journal.stats.conflicts == 0
            assert verify(journal).ok
        finally:
            journal.close()
            proxy.close()


class TestLeaseInABatch:
    @pytest.mark.parametrize("taker", ["this journal", "another journal"])
    def test_a_saga_taken_over_writes_none_of_its_rows_and_the_others_land(
        self, journal: PostgresJournal, pg_url: str, driver: str, taker: str
    ) -> None:
        """The stale holder's rows are refused, the other saga's land.

        Taken over by this journal, the batch knows the new token and commits the stale
        rows alone, where the lease refuses them. Taken over by another journal, the
        batch seals them on the head it knows: its statement meets TAKEN_OVER at that
        seq, fails whole, and each append is redone alone.
        """
        now = datetime.datetime.now(datetime.UTC)
        later = now + datetime.timedelta(hours=1)
        stale = journal.acquire_lease("taken", "w1", now=now, expires_at=now)
        held = journal.acquire_lease("kept", "w1", now=now, expires_at=later)
        journal.append("taken", Phase.INTENT, tool_name="reserve", fence=stale)  # heads known
        journal.append("kept", Phase.INTENT, tool_name="reserve", fence=held)
        other = journal if taker == "this journal" else PostgresJournal(pg_url)
        try:
            other.acquire_lease("taken", "w2", now=now, expires_at=later)  # takes it over
        finally:
            if other is not journal:
                other.close()
        results = commit_batch(
            journal,
            [
                executed("taken")._replace(fence=stale),
                AppendRequest("taken", Phase.ENDED, fence=stale),
                executed("kept")._replace(fence=held),
                AppendRequest("kept", Phase.ENDED, fence=held),
            ],
            driver,
        )
        assert [type(r) for r in results[:2]] == [LeaseLostError, LeaseLostError]
        kept: list[Any] = results[2:]
        assert [(e.seq, e.phase) for e in kept] == [(2, Phase.EXECUTED), (3, Phase.ENDED)]
        taken = journal.entries("taken")
        assert [(e.seq, e.phase) for e in taken] == [(1, Phase.INTENT), (2, Phase.TAKEN_OVER)]
        assert taken[1].payload == {"owner": "w2"}
        assert journal.entries("kept")[1:] == kept
        assert verify(journal).ok


class TestARowThatCannotBeSealed:
    def test_is_refused_alone_and_the_batch_lands(
        self, journal: PostgresJournal, driver: str
    ) -> None:
        """A payload with no canonical form (a float NaN) is refused with its reason.

        The batch's other appends, of its own saga and of another, are written.
        """
        intents = [journal.append(s, Phase.INTENT, tool_name="reserve") for s in ("a", "b")]
        hostile = executed("a")._replace(payload=float("nan"))
        refused, after, landed = commit_batch(
            journal, [hostile, executed("a")._replace(ref_seq=None), executed("b")], driver
        )
        assert isinstance(refused, SerializationError)
        assert isinstance(after, JournalEntry)
        assert isinstance(landed, JournalEntry)
        assert [e.seq for e in journal.entries("a")] == [1, 2]
        assert journal.entries("b") == [intents[1], landed]
        assert verify(journal).ok


class TestARowTheServerRefuses:
    def test_fails_alone_and_the_others_land(self, journal: PostgresJournal, driver: str) -> None:
        """A call id PostgreSQL cannot store (a NUL) fails the whole statement.

        Redone alone, only that append fails, with the reason; the other saga's lands.
        """
        intents = [journal.append(s, Phase.INTENT, tool_name="reserve") for s in ("a", "b")]
        hostile = executed("a")._replace(call_id="reserve\x00#1")
        refused, landed = commit_batch(journal, [hostile, executed("b")], driver)
        assert isinstance(refused, JournalError)
        assert "cannot append EXECUTED of tool 'reserve'" in str(refused)
        assert "the entry was not written" in str(refused)
        assert isinstance(landed, JournalEntry)
        assert (landed.saga_id, landed.seq, landed.prev_hash) == ("b", 2, intents[1].hash)
        assert journal.entries("a") == [intents[0]]
        assert verify(journal).ok
