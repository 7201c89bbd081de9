"""DBOS on the suite's PostgreSQL, launched once per test process.

Its system tables go in a schema of their own, dropped at the end. Without a server the
tests skip loudly, and fail under CI=true.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests._postgres import admin_connection, require_server, server_url


@pytest.fixture(scope="session")
def dbos_schema() -> Iterator[str]:
    """A launched DBOS whose system schema is yielded; destroyed after the session."""
    require_server()
    from dbos import DBOS

    import tests.integrations.dbos._workflows  # noqa: F401  (registers the workflows)

    schema = f"sagacity_dbos_{uuid.uuid4().hex[:10]}"
    DBOS(config=dbos_config(schema))
    DBOS.launch()
    try:
        yield schema
    finally:
        DBOS.destroy()
        with admin_connection() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def dbos_config(schema: str) -> dict[str, str]:
    return {
        "name": "sagacity-tests",
        "system_database_url": server_url(),
        "dbos_system_schema": schema,
        "log_level": "WARNING",
    }
