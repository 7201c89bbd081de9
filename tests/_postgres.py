"""Finding the test PostgreSQL server: skip loudly on a laptop, fail in CI.

The server is `SAGACITY_TEST_DATABASE_URL` (default `postgresql://postgres@127.0.0.1:5432/test`).
Each test gets a schema of its own, named in the URL with sagacity's `schema=` query
parameter (`postgresql://…/test?schema=sagacity_t_…`): sagacity creates it on first use,
and it is dropped with everything in it when the test ends.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    import psycopg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"

_reachable: str | None = None  # "" once the server answered, else why it did not


def server_url() -> str:
    """The test server's URL."""
    return os.environ.get("SAGACITY_TEST_DATABASE_URL") or DEFAULT_URL


def with_query(url: str, **params: str) -> str:
    """Return `url` with query parameters added or replaced."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(params)
    return urlunsplit(parts._replace(query=urlencode(query)))


def with_database(url: str, database: str) -> str:
    """Return `url` naming another database on the same server."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def require_server() -> None:
    """Skip the test when no server answers, loudly; in CI (`CI=true`) fail instead."""
    global _reachable
    if _reachable is None:
        try:
            import psycopg

            with psycopg.connect(server_url(), connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _reachable = ""
        except Exception as error:  # ImportError included: psycopg is the `postgres` extra
            _reachable = f"{type(error).__name__}: {error}".strip()
    if _reachable:
        reason = (
            f"PostgreSQL tests NOT RUN: no server at {server_url()} ({_reachable}); start "
            "one or set SAGACITY_TEST_DATABASE_URL"
        )
        from tests.conftest import in_ci

        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


def admin_connection(url: str | None = None) -> psycopg.Connection[tuple[Any, ...]]:
    """An autocommit connection to the test server (or `url`), for setup and sabotage."""
    import psycopg

    require_server()
    return psycopg.connect(url or server_url(), autocommit=True)


def _name_for(request: pytest.FixtureRequest, prefix: str) -> str:
    test = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")
    return f"{prefix}_{test[:30]}_{uuid.uuid4().hex[:10]}"


def postgres_url_for(request: pytest.FixtureRequest) -> Iterator[str]:
    """Yield a URL to a fresh schema of the test server, and drop the schema afterwards."""
    require_server()
    schema = _name_for(request, "sagacity_t")
    yield with_query(server_url(), schema=schema)
    with admin_connection() as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_database_for(request: pytest.FixtureRequest) -> Iterator[str]:
    """Yield a URL to a fresh database of the test server, and drop it afterwards.

    For tests that cut every connection to their database: a schema would share its
    database with other tests.
    """
    require_server()
    name = _name_for(request, "sagacity_d")
    with admin_connection() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server_url(), name)
    finally:
        with admin_connection() as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
