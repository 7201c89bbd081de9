"""Fixtures for the PostgreSQL backend's own tests: a schema or a database per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests._postgres import admin_connection, postgres_url_for


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to a fresh schema, dropped after the test."""
    yield from postgres_url_for(request)


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """An autocommit superuser connection to the test server, for setup and sabotage."""
    with admin_connection() as conn:
        yield conn
