"""tests/_postgres.py: without a server, a laptop skips loudly and CI fails."""

from __future__ import annotations

import pytest

from tests import _postgres
from tests._postgres import require_server, with_database, with_query

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nowhere"


class TestRequireServer:
    @pytest.fixture(autouse=True)
    def no_server(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SAGACITY_TEST_DATABASE_URL", UNREACHABLE)
        monkeypatch.setattr(_postgres, "_reachable", None)

    def test_a_laptop_skips_and_says_why(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without CI, an unreachable server skips with a reason naming the URL."""
        monkeypatch.delenv("CI", raising=False)
        with pytest.raises(pytest.skip.Exception, match=r"PostgreSQL tests NOT RUN: no server"):
            require_server()

    def test_ci_fails(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With CI=true, an unreachable server fails the test instead of skipping it."""
        monkeypatch.setenv("CI", "true")
        with pytest.raises(pytest.fail.Exception, match=r"127\.0\.0\.1:1/nowhere"):
            require_server()


class TestUrls:
    def test_query_parameters_are_added_and_replaced(self) -> None:
        """with_query keeps the URL's own parameters and sets the given ones."""
        url = with_query("postgresql://u@h:5432/db?sslmode=disable&schema=a", schema="b")
        assert url == "postgresql://u@h:5432/db?sslmode=disable&schema=b"

    def test_another_database(self) -> None:
        """with_database swaps the path and keeps the rest."""
        assert with_database("postgresql://u@h:5432/db?x=1", "other") == (
            "postgresql://u@h:5432/other?x=1"
        )
