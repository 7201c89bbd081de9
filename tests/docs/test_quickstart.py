"""docs/quickstart.md runs again in the same folder: a reader runs a quick start twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.docs._blocks import DOCS
from tests.docs.test_pages import run_page

PAGE = DOCS / "quickstart.md"


class TestQuickStart:
    def test_runs_twice_in_a_row_on_the_same_journal(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """The second run, on the first run's sagacity.db, prints what the page shows too."""
        run_page(PAGE, tmp_path, monkeypatch, capfd)
        run_page(PAGE, tmp_path, monkeypatch, capfd)
        conn = sqlite3.connect(tmp_path / "sagacity.db")
        try:
            sagas = [
                row[0]
                for row in conn.execute(
                    "SELECT DISTINCT saga_id FROM sagacity_journal ORDER BY saga_id"
                )
            ]
        finally:
            conn.close()
        assert [saga.split("-")[0] for saga in sagas] == ["order", "order", "pay", "pay"]
