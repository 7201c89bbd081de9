"""`with Sagacity.from_url(...) as sagacity:` closes the journal and the approval store."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from sagacity import (
    ConfigurationError,
    DatabaseNotFoundError,
    JournalError,
    Sagacity,
    SagaOutcome,
    SchemaVersionError,
)
from sagacity._stores import open_stores
from tests._shop import Shop, phases, tools_of


def _order(sagacity: Sagacity, saga_id: str) -> SagaOutcome:
    tools = tools_of(sagacity, Shop())
    return sagacity.saga(saga_id, lambda: tools["reserve_inventory"]("SKU-1", 2)).outcome


class TestContextManager:
    def test_block_gives_the_instance_and_keeps_what_it_journaled(
        self, shared_store_url: str
    ) -> None:
        """The block's target is the Sagacity itself; a later one reads the saga it ran."""
        sagacity = Sagacity.from_url(shared_store_url)
        with sagacity as entered:
            assert entered is sagacity
            assert _order(entered, "order-1") is SagaOutcome.COMPLETED
        with Sagacity.from_url(shared_store_url) as reopened:
            assert phases(reopened.history("order-1")) == [
                ("INTENT", "reserve_inventory", None),
                ("EXECUTED", "reserve_inventory", 1),
                ("ENDED", None, None),
            ]

    def test_stores_are_closed_after_the_block(self, shared_store_url: str) -> None:
        """After the block, the journal and the approval store refuse to be used."""
        with Sagacity.from_url(shared_store_url) as sagacity:
            _order(sagacity, "order-1")
        with pytest.raises(JournalError):
            sagacity.journal.entries("order-1")
        with pytest.raises(JournalError):
            sagacity.approvals.pending()
        sagacity.close()  # closing again, as a finally might, is harmless

    def test_an_error_in_the_block_propagates_and_closes(self, shared_store_url: str) -> None:
        """An exception raised in the block is not swallowed, and the stores still close."""
        with pytest.raises(KeyError, match="boom"), Sagacity.from_url(shared_store_url) as sagacity:
            raise KeyError("boom")
        with pytest.raises(JournalError):
            sagacity.journal.entries("order-1")

    def test_memory_stores_work_in_a_block(self) -> None:
        """A memory:// Sagacity runs sagas in a block like the others."""
        with Sagacity.from_url("memory://") as sagacity:
            assert _order(sagacity, "order-1") is SagaOutcome.COMPLETED
            assert [e.phase.value for e in sagacity.history("order-1")] == [
                "INTENT",
                "EXECUTED",
                "ENDED",
            ]


def _open_files(database: Path) -> list[str]:
    """The files of `database` (the file, its -wal and -shm) this process holds open."""
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed between the listing and the look
            continue
        if target.startswith(str(database)):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")
class TestNothingLeftOpen:
    """A closed Sagacity, or one refused while opening, holds no file of its database.

    Each check looks while everything that could still hold a connection (the instance,
    the exception and its frames) is alive: a connection left to the garbage collector
    shows here, on every Python, not only where 3.13 warns of an unclosed database.
    """

    def test_a_block_leaves_no_file_open(self, tmp_path: Path) -> None:
        """After a block that ran a saga, the journal, its WAL and the approvals are closed."""
        database = tmp_path / "sagacity.db"
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            assert _order(sagacity, "order-1") is SagaOutcome.COMPLETED
            assert _open_files(database)  # the check sees the files while they are open
        assert _open_files(database) == []

    def test_a_refused_option_closes_the_stores_it_opened(self, tmp_path: Path) -> None:
        """from_url with an option the constructor refuses closes both stores it opened."""
        database = tmp_path / "sagacity.db"
        with pytest.raises(ConfigurationError, match="lease_ttl must be positive") as refused:
            Sagacity.from_url(f"sqlite:///{database}", lease_ttl=-1)
        assert refused.value.__traceback__ is not None  # its frames are still alive
        assert _open_files(database) == []

    def test_a_file_refused_as_not_a_journal_is_closed(self, tmp_path: Path) -> None:
        """A read-only open of a file that is not a sagacity journal closes it as it refuses."""
        database = tmp_path / "other.db"
        other = sqlite3.connect(database)
        try:
            with other:
                other.execute("CREATE TABLE notes (body TEXT)")
        finally:
            other.close()
        with pytest.raises(DatabaseNotFoundError, match="holds no sagacity journal") as refused:
            open_stores(f"sqlite:///{database}", create=False)
        assert refused.value.__traceback__ is not None
        assert _open_files(database) == []

    def test_a_newer_schema_is_refused_and_closed(self, tmp_path: Path) -> None:
        """A file of a newer schema version is refused, and the connection that read it closed."""
        database = tmp_path / "sagacity.db"
        Sagacity.from_url(f"sqlite:///{database}").close()
        newer = sqlite3.connect(database)
        try:
            with newer:
                newer.execute("UPDATE sagacity_meta SET value = '999' WHERE key = 'schema_version'")
        finally:
            newer.close()
        with pytest.raises(SchemaVersionError, match="schema version 999") as refused:
            Sagacity.from_url(f"sqlite:///{database}")
        assert refused.value.__traceback__ is not None
        assert _open_files(database) == []

    def test_a_journal_that_fails_to_close_still_closes_the_approvals(self, tmp_path: Path) -> None:
        """close() closes the approval store even when closing the journal raises."""
        database = tmp_path / "sagacity.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        journal_close = sagacity.journal.close

        def failing_close() -> None:
            journal_close()
            raise OSError("disk gone")

        sagacity.journal.close = failing_close  # type: ignore[method-assign]
        with pytest.raises(OSError, match="disk gone"):
            sagacity.close()
        assert _open_files(database) == []
