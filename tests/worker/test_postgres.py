"""LISTEN/NOTIFY on PostgreSQL: sent by the commit that journals a decision, and only then."""

from __future__ import annotations

import logging
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
        """A decision in another schema's journal neither wakes the listener nor names a saga.

        One in its own journal then does.
        """
        other_urls = postgres_url_for(request)
        other_url = next(other_urls)
        watch = open_watch(paused.journal)
        try:
            with Sagacity.from_url(other_url) as other:
                other.wrap(Shop())
                pause(other, "elsewhere-1")
                other.approve("elsewhere-1", approver="alice")
            assert not watch.wait(3)
            assert watch.changed() == set()
            paused.approve(HOSTILE, approver="alice")
            assert watch.wait(30)
            assert watch.changed() == {HOSTILE}
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

    def test_many_watchers_opened_at_once_all_listen_on_one_trigger(
        self, url: str, paused: Sagacity
    ) -> None:
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


def _trigger_and_index(schema: str) -> tuple[int, int]:
    with admin_connection() as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = "
            "'sagacity_journal_decision' AND tgrelid = %s::regclass), "
            "(SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND c.relname = 'sagacity_journal_decided' "
            "AND i.indisvalid)",
            (f'"{schema}".sagacity_journal',) * 2,
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


class TestTheTriggerInTheSchema:
    def test_a_new_journal_has_the_trigger_and_the_index_before_any_worker(self, url: str) -> None:
        """Schema version 4 makes the decision trigger and its index with the tables."""
        Sagacity.from_url(url).close()
        schema = url.rpartition("schema=")[2]
        assert _trigger_and_index(schema) == (1, 1)
        with admin_connection() as conn:
            version = conn.execute(
                f"SELECT value FROM \"{schema}\".sagacity_meta WHERE key = 'schema_version'"
            ).fetchone()
        assert version == ("4",)

    def test_a_version_3_journal_is_upgraded_and_notifies(self, url: str) -> None:
        """A version 3 journal gains the trigger when opened, a watch builds the index.

        A decision then wakes the watch.
        """
        Sagacity.from_url(url).close()
        schema = url.rpartition("schema=")[2]
        with admin_connection() as conn:
            conn.execute(f'DROP TRIGGER sagacity_journal_decision ON "{schema}".sagacity_journal')
            conn.execute(f'DROP FUNCTION "{schema}".sagacity_journal_notify_decision')
            conn.execute(f'DROP INDEX "{schema}".sagacity_journal_decided')
            conn.execute(
                f"UPDATE \"{schema}\".sagacity_meta SET value = '3' WHERE key = 'schema_version'"
            )
        assert _trigger_and_index(schema) == (0, 0)
        instance = Sagacity.from_url(url)
        try:
            assert _trigger_and_index(schema) == (1, 0)
            instance.wrap(Shop())
            pause(instance, HOSTILE)
            watch = open_watch(instance.journal)
            try:
                assert _trigger_and_index(schema) == (1, 1)
                assert watch.wakeup == "listen"
                instance.approve(HOSTILE, approver="alice")
                assert watch.wait(30)
                assert watch.changed() == {HOSTILE}
            finally:
                watch.close()
        finally:
            instance.close()

    def test_a_trigger_an_older_worker_made_does_not_stop_the_upgrade(self, url: str) -> None:
        """A version 3 journal whose trigger an older sagacity's worker made upgrades.

        The trigger is made again (one, of the schema's function), and a decision
        notifies through it.
        """
        Sagacity.from_url(url).close()
        schema = url.rpartition("schema=")[2]
        with admin_connection() as conn:
            conn.execute(
                f"UPDATE \"{schema}\".sagacity_meta SET value = '3' WHERE key = 'schema_version'"
            )
        instance = Sagacity.from_url(url)
        try:
            assert _trigger_and_index(schema) == (1, 1)
            with admin_connection() as conn:
                version = conn.execute(
                    f"SELECT value FROM \"{schema}\".sagacity_meta WHERE key = 'schema_version'"
                ).fetchone()
            assert version == ("4",)
            instance.wrap(Shop())
            pause(instance, HOSTILE)
            with admin_connection() as listener:
                listener.execute("LISTEN sagacity_decisions")
                instance.approve(HOSTILE, approver="alice")
                ours = next(
                    n.payload
                    for n in listener.notifies(timeout=30)
                    if f'"schema" : "{schema}"' in n.payload
                )
            assert '"saga_id" : ' in ours
        finally:
            instance.close()

    def test_a_dropped_trigger_is_polled_with_a_warning(
        self, url: str, paused: Sagacity, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Without the trigger the watch polls, says why, and still finds the decision."""
        schema = url.rpartition("schema=")[2]
        with admin_connection() as conn:
            conn.execute(f'DROP TRIGGER sagacity_journal_decision ON "{schema}".sagacity_journal')
        with caplog.at_level(logging.WARNING, logger="sagacity.worker"):
            watch = open_watch(paused.journal)
        try:
            assert watch.wakeup == "poll"
            assert "no enabled decision trigger" in caplog.text
            assert "version 4" in caplog.text
            assert watch.changed() == set()
            with Sagacity.from_url(url) as elsewhere:
                elsewhere.approve(HOSTILE, approver="alice")
            assert watch.changed() == {HOSTILE}
        finally:
            watch.close()
