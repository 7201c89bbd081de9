"""LISTEN/NOTIFY on PostgreSQL: sent by the commit that journals a decision, and only then."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from sagacity import Sagacity
from sagacity.worker import DecisionEvents
from sagacity.worker._watch import open_watch
from tests._postgres import admin_connection, postgres_url_for
from tests.worker._shop import Shop, pause

HOSTILE = "order \"'; NOTIFY x; -- \\ 💸"


@pytest.fixture
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from postgres_url_for(request)


@pytest.fixture
def paused(url: str) -> Iterator[Sagacity]:
    instance = Sagacity.from_url(url)
    instance.wrap(Shop())
    pause(instance, HOSTILE)
    yield instance
    instance.close()


class TestListen:
    def test_a_commit_elsewhere_wakes_the_listener_naming_the_saga(
        self, url: str, paused: Sagacity
    ) -> None:
        """The NOTIFY carries the saga id, whatever characters it holds."""
        watch = open_watch(paused.journal)
        try:
            assert watch.wakeup == "listen"
            assert watch.changed() == set()
            with Sagacity.from_url(url) as elsewhere:
                elsewhere.approve(HOSTILE, approver="alice")
            assert watch.wait(30)
            assert watch.changed() == {HOSTILE}
        finally:
            watch.close()

    def test_a_decision_rolled_back_notifies_nobody(self, url: str, paused: Sagacity) -> None:
        """An APPROVED row inserted in a transaction that rolls back sends no NOTIFY."""
        watch = open_watch(paused.journal)
        schema = url.rpartition("schema=")[2]
        try:
            with admin_connection() as conn, conn.transaction(force_rollback=True):
                conn.execute(
                    f'INSERT INTO "{schema}".sagacity_journal (saga_id, seq, phase, payload, '
                    "recorded_at, prev_hash, hash) VALUES (%s, 99, 'APPROVED', '{}', "
                    "'2026-01-01T00:00:00.000000Z', '', '')",
                    (HOSTILE,),
                )
            assert not watch.wait(0.5)  # nothing came: the row never committed
            paused.approve(HOSTILE, approver="alice")
            assert watch.wait(30)  # the real one comes through
            assert watch.changed() == {HOSTILE}
        finally:
            watch.close()

    def test_another_schema_in_the_database_is_not_named(
        self, url: str, paused: Sagacity, request: pytest.FixtureRequest
    ) -> None:
        """A decision in another schema's journal wakes the listener but names no saga here."""
        other_urls = postgres_url_for(request)
        other_url = next(other_urls)
        watch = open_watch(paused.journal)
        try:
            with Sagacity.from_url(other_url) as other:
                other.wrap(Shop())
                pause(other, "elsewhere-1")
                other.approve("elsewhere-1", approver="alice")
            watch.wait(5)
            assert "elsewhere-1" not in watch.changed()
        finally:
            watch.close()
            next(other_urls, None)

    def test_polling_when_listen_is_off(self, url: str, paused: Sagacity) -> None:
        """listen=False (PgBouncer in transaction mode): the reader polls, and still hears."""
        with DecisionEvents(paused, listen=False, poll_interval=0.05) as events:
            assert events.watch.wakeup == "poll"
            with Sagacity.from_url(url) as elsewhere:
                elsewhere.approve(HOSTILE, approver="alice")
            assert events.wait(HOSTILE, timeout=30).decided_by == "alice"

    def test_many_watchers_set_up_the_trigger_once(self, url: str, paused: Sagacity) -> None:
        """Eight watchers opened at once: one trigger, every one listening."""
        watches = []
        errors: list[BaseException] = []

        def open_one() -> None:
            try:
                watches.append(open_watch(paused.journal))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=open_one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        try:
            assert errors == []
            assert [w.wakeup for w in watches] == ["listen"] * 8
            schema = url.rpartition("schema=")[2]
            with admin_connection() as conn:
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_trigger WHERE tgname = 'sagacity_journal_decision' "
                    "AND tgrelid = %s::regclass",
                    (f'"{schema}".sagacity_journal',),
                ).fetchone()
            assert count == 1
        finally:
            for watch in watches:
                watch.close()
