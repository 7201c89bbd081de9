"""Fixtures of the server's tests: a real SQLite Sagacity with the bank's tools, and its app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sagacity import Sagacity
from sagacity.server import create_app
from tests.server._bank import Bank, token_auth


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A SQLite database URL in the test's folder."""
    return f"sqlite:///{tmp_path / 'sagacity.db'}"


@pytest.fixture
def bank() -> Bank:
    """The tools' log."""
    return Bank()


@pytest.fixture
def sagacity(db_url: str, bank: Bank) -> Iterator[Sagacity]:
    """A Sagacity on SQLite with the bank's tools wrapped."""
    instance = Sagacity.from_url(db_url)
    instance.wrap(bank)
    yield instance
    instance.close()


@pytest.fixture
def client(sagacity: Sagacity) -> Iterator[TestClient]:
    """A client of the app over `sagacity`, the test principals' tokens accepted."""
    app = create_app(sagacity, token_auth(), ui=False)
    with TestClient(app) as test_client:
        yield test_client
