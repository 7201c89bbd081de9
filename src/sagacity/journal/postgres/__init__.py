"""The PostgreSQL journal and approval store: many workers on many machines, one database.

Install with `pip install 'sagacity[postgres]'` (psycopg 3 and its pool), then
`Sagacity.from_url("postgresql://user@host:5432/db")`. See docs/postgres.md.
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401  # imported for the guard only
    import psycopg_pool  # noqa: F401  # imported for the guard only
except ImportError as error:  # pragma: no cover - exercised with the extra blocked
    raise ImportError(
        "the PostgreSQL backend needs psycopg 3 and psycopg-pool: pip install 'sagacity[postgres]'"
    ) from error

from sagacity.journal.postgres._append import AppendStats
from sagacity.journal.postgres._approval import PostgresApprovalStore
from sagacity.journal.postgres._database import SCHEMA_VERSION, PostgresDatabase
from sagacity.journal.postgres._journal import PostgresJournal

__all__ = [
    "SCHEMA_VERSION",
    "AppendStats",
    "PostgresApprovalStore",
    "PostgresDatabase",
    "PostgresJournal",
    "open_postgres_stores",
]


def open_postgres_stores(
    url: str, *, create: bool = True
) -> tuple[PostgresJournal, PostgresApprovalStore]:
    """Open the journal and approval store of a `postgresql://` URL on one connection pool.

    The pool is closed when both stores are closed. The URL's sagacity options
    (`schema`, `pool_min_size`, `pool_max_size`, `pool_timeout`) are described in
    docs/postgres.md; every other parameter goes to libpq.

    Raises:
        JournalError: The server cannot be reached or the schema cannot be created.
        SchemaVersionError: The database holds a newer schema than this sagacity knows.
        ConfigurationError: The URL's sagacity options are malformed.
        DatabaseNotFoundError: `create=False` and there is no sagacity schema there.
    """
    database = PostgresDatabase(url, create=create)
    try:
        return PostgresJournal(database), PostgresApprovalStore(database)
    finally:
        database.release()  # the two stores hold their own references now
