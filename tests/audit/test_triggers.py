"""Missing append-only triggers are reported by `verify`, and never re-created on open."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from sagacity import Phase
from sagacity._stores import open_stores
from sagacity.audit import verify
from sagacity.journal import SqliteJournal
from tests._postgres import admin_connection, postgres_url_for


def _journal(path: Path) -> None:
    journal = SqliteJournal(path)
    journal.append("order-1", Phase.INTENT, payload={"n": 1})
    journal.close()


def _triggers(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return [row[0] for row in rows]


class TestSqlite:
    def test_a_new_journal_has_both_triggers_and_no_store_problem(self, tmp_path: Path) -> None:
        """The triggers come with the table; verify finds nothing wrong."""
        path = tmp_path / "j.db"
        _journal(path)
        assert _triggers(path) == ["sagacity_journal_no_delete", "sagacity_journal_no_update"]
        journal = SqliteJournal(path)
        try:
            report = verify(journal)
        finally:
            journal.close()
        assert report.ok
        assert report.store_problems == []

    def test_a_dropped_trigger_is_reported_and_stays_dropped(self, tmp_path: Path) -> None:
        """Opening the file again (to write, or to read) does not erase the evidence."""
        path = tmp_path / "j.db"
        _journal(path)
        conn = sqlite3.connect(path)
        conn.execute("DROP TRIGGER sagacity_journal_no_update")
        conn.commit()
        conn.close()
        for create in (True, False):
            journal, approvals = open_stores(f"sqlite:///{path}", create=create)
            try:
                report = verify(journal)
            finally:
                journal.close()
                approvals.close()
            assert not report.ok
            assert report.problems == []  # the chain itself is intact
            (problem,) = report.store_problems
            assert problem.startswith("the append-only trigger sagacity_journal_no_update is")
        assert _triggers(path) == ["sagacity_journal_no_delete"]
        done = subprocess.run(
            [sys.executable, "-m", "sagacity.cli", "verify", "--database", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1
        assert done.stdout.splitlines()[0].startswith(
            "journal table: the append-only trigger sagacity_journal_no_update is missing"
        )
        assert done.stdout.splitlines()[-1] == "1 saga, 1 entry: 1 broken"

    def test_a_trigger_that_no_longer_refuses_counts_as_missing(self, tmp_path: Path) -> None:
        """Re-creating the trigger under its name with a harmless body does not hide it."""
        path = tmp_path / "j.db"
        _journal(path)
        conn = sqlite3.connect(path)
        conn.execute("DROP TRIGGER sagacity_journal_no_delete")
        conn.execute(
            "CREATE TRIGGER sagacity_journal_no_delete BEFORE DELETE ON sagacity_journal "
            "BEGIN SELECT 1; END"
        )
        conn.commit()
        conn.execute("DELETE FROM sagacity_journal")  # it no longer stops anything
        conn.commit()
        conn.close()
        journal = SqliteJournal(path)
        try:
            (problem,) = verify(journal).store_problems
        finally:
            journal.close()
        assert "sagacity_journal_no_delete" in problem


@pytest.mark.postgres
class TestPostgres:
    @pytest.mark.parametrize(
        "sabotage",
        [
            "ALTER TABLE {t} DISABLE TRIGGER sagacity_journal_no_update_delete",
            "DROP TRIGGER sagacity_journal_no_update_delete ON {t}",
        ],
    )
    def test_a_disabled_or_dropped_trigger_is_reported(
        self, request: pytest.FixtureRequest, sabotage: str
    ) -> None:
        """Verify names the trigger; reopening the database does not put it back."""
        for url in postgres_url_for(request):
            journal, approvals = open_stores(url)
            journal.append("order-1", Phase.INTENT, payload={"n": 1})
            assert verify(journal).store_problems == []
            journal.close()
            approvals.close()
            table = f'"{dict(parse_qsl(urlsplit(url).query))["schema"]}".sagacity_journal'
            with admin_connection() as admin:
                admin.execute(sabotage.format(t=table).encode())
            for create in (True, False):
                journal, approvals = open_stores(url, create=create)
                try:
                    report = verify(journal)
                finally:
                    journal.close()
                    approvals.close()
                assert report.problems == []
                (problem,) = report.store_problems
                assert problem.startswith(
                    "the append-only trigger sagacity_journal_no_update_delete is missing or "
                    "disabled"
                )
