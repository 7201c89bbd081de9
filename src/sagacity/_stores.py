"""Building the journal and approval store from a URL."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from sagacity.approval import ApprovalStore, InMemoryApprovalStore, SqliteApprovalStore
from sagacity.errors import ConfigurationError, DatabaseNotFoundError
from sagacity.journal import InMemoryJournal, SideEffectJournal, SqliteJournal

__all__ = ["DEFAULT_URL", "default_url", "open_stores", "redact", "sqlite_path"]

DEFAULT_URL = "sqlite:///sagacity.db"


def default_url() -> str:
    """`SAGACITY_DATABASE_URL`, or the SQLite file `sagacity.db` in the working directory."""
    return os.environ.get("SAGACITY_DATABASE_URL") or DEFAULT_URL


def sqlite_path(url: str) -> str:
    """The file a `sqlite:///relative` or `sqlite:////absolute` URL names."""
    path = url[len("sqlite:///") :]
    if not path:
        raise ConfigurationError(f"database URL {url!r} names no file: use sqlite:///path.db")
    return path


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def open_stores(url: str, *, create: bool = True) -> tuple[SideEffectJournal, ApprovalStore]:
    """Open the journal and approval store a URL names; drivers are imported lazily.

    With `create=False` (the command line), nothing is created: the database must exist
    and hold a sagacity schema, else `DatabaseNotFoundError`; a PostgreSQL URL is tried
    with one direct connection first, so that a hopeless URL fails at once with the
    server's reason. `memory://` is always new and empty, so it is refused.
    """
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        if not create:
            raise DatabaseNotFoundError(
                "memory:// is a new, empty journal each time: there is nothing to read"
            )
        return InMemoryJournal(), InMemoryApprovalStore()
    if scheme == "sqlite" and url.startswith("sqlite:///"):
        path = sqlite_path(url)
        journal = SqliteJournal(path, create=create)
        try:
            return journal, SqliteApprovalStore(path, create=create)
        except BaseException:
            journal.close()
            raise
    if scheme in ("postgresql", "postgres"):
        from sagacity.journal.postgres import open_postgres_stores

        if not create:
            from sagacity.journal.postgres._probe import probe

            probe(url)
        stores: tuple[SideEffectJournal, ApprovalStore] = open_postgres_stores(url, create=create)
        return stores
    raise ConfigurationError(
        f"database URL {redact(url)!r} is not one of memory://, sqlite:///path.db, postgresql://…"
    )
