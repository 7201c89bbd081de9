"""docs/postgres.md's first example leaves the reader's journal as it found it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity
from tests._postgres import admin_connection, postgres_url_for
from tests.docs._blocks import DOCS, blocks, examples
from tests.docs._run import PageRunner, normalised

pytestmark = pytest.mark.postgres

PAGE = DOCS / "postgres.md"


@pytest.fixture
def journal_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A schema holding a real journal: one saga, in doubt, that nobody may touch."""
    for url in postgres_url_for(request):
        sagacity = Sagacity.from_url(url)
        sagacity.journal.append("order-1", Phase.INTENT, tool_name="charge", payload={"c": 9})
        sagacity.close()
        yield url


class TestPostgresPage:
    def test_the_example_writes_nothing_into_the_reader_s_journal(
        self,
        journal_url: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """It prints what the page shows, its own schema is dropped, the journal unchanged."""
        sagacity = Sagacity.from_url(journal_url)
        before = sagacity.journal.entries("order-1")
        sagacity.close()
        monkeypatch.setenv("SAGACITY_DATABASE_URL", journal_url)
        monkeypatch.chdir(tmp_path)
        first, *_ = examples(PAGE)
        with PageRunner("docs_postgres_alone", capfd, tmp_path) as runner:
            printed = runner.run(first)
            schema = getattr(runner.module, "schema", None)
        (shown,) = [b for b in blocks(PAGE) if b.checked and "test_docs.py" in b.checked]
        assert normalised(printed) == normalised(shown.code)
        assert shown.code.startswith("1 True\n")
        sagacity = Sagacity.from_url(journal_url)
        try:
            assert sagacity.journal.list_sagas() == ["order-1"]
            assert sagacity.journal.entries("order-1") == before
        finally:
            sagacity.close()
        assert isinstance(schema, str)
        assert schema.startswith("sagacity_try_")
        with admin_connection() as conn:
            left = conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()
        assert left == (None,)
