"""docs/postgres.md: its example runs against the test server and prints what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

DOC = Path(__file__).resolve().parents[2] / "docs" / "postgres.md"


class TestPostgresDoc:
    def test_the_example_prints_what_the_page_says(
        self, pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The example opens the URL, appends once, verifies, and prints the stated lines."""
        text = DOC.read_text(encoding="utf-8")
        (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
        printed = re.search(r"prints\n\n(?:<!--[^\n]*-->\n)?```\n(.*?)```", text, re.S)
        assert printed is not None
        monkeypatch.setenv("SAGACITY_DATABASE_URL", pg_url)
        exec(compile(code, str(DOC), "exec"), {"__name__": "postgres_doc"})
        assert capsys.readouterr().out == printed.group(1)
