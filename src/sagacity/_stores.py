"""Building the journal and approval store from a URL."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from sagacity.approval import ApprovalStore, InMemoryApprovalStore, SqliteApprovalStore
from sagacity.errors import ConfigurationError
from sagacity.journal import InMemoryJournal, SideEffectJournal, SqliteJournal

__all__ = ["DEFAULT_URL", "default_url", "open_stores", "sqlite_path"]

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


def open_stores(url: str) -> tuple[SideEffectJournal, ApprovalStore]:
    """Open the journal and approval store a URL names; drivers are imported lazily."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return InMemoryJournal(), InMemoryApprovalStore()
    if scheme == "sqlite" and url.startswith("sqlite:///"):
        path = sqlite_path(url)
        return SqliteJournal(path), SqliteApprovalStore(path)
    if scheme in ("postgresql", "postgres"):
        from sagacity.journal.postgres import open_postgres_stores

        stores: tuple[SideEffectJournal, ApprovalStore] = open_postgres_stores(url)
        return stores
    raise ConfigurationError(
        f"database URL {url!r} is not one of memory://, sqlite:///path.db, postgresql://…"
    )
