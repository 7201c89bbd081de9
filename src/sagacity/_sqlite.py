"""Connections and the versioned schema shared by the SQLite journal and approval store."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sagacity.errors import DatabaseNotFoundError, JournalError, SchemaVersionError

__all__ = ["SCHEMA_VERSION", "TRIGGERS", "connect"]

SCHEMA_VERSION = 2
"""1: journal and approval requests; 2: saga leases (added in place to a version 1 file)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sagacity_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sagacity_journal (
    saga_id     TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    phase       TEXT    NOT NULL,
    tool_name   TEXT,
    call_id     TEXT,
    ref_seq     INTEGER,
    payload     TEXT    NOT NULL,  -- canonical JSON, exactly the bytes that were hashed
    recorded_at TEXT    NOT NULL,
    prev_hash   TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    PRIMARY KEY (saga_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sagacity_approval_request (
    request_id   TEXT PRIMARY KEY,
    saga_id      TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    call_id      TEXT    NOT NULL,
    tool_name    TEXT    NOT NULL,
    input        TEXT    NOT NULL,
    input_sha256 TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    requested_at TEXT    NOT NULL,
    expires_at   TEXT
);
CREATE INDEX IF NOT EXISTS sagacity_approval_request_saga
    ON sagacity_approval_request (saga_id);
CREATE TABLE IF NOT EXISTS sagacity_lease (
    saga_id    TEXT    PRIMARY KEY,
    owner      TEXT    NOT NULL,
    token      INTEGER NOT NULL,  -- grows at every acquisition: appends are fenced by it
    expires_at TEXT    NOT NULL,  -- UTC, six fraction digits, Z: sorts as it compares
    since_seq  INTEGER NOT NULL   -- the saga's last seq when taken: a later ENDED frees it
) WITHOUT ROWID;
"""

# Created with the journal table only: re-creating them on every open would erase the
# evidence that someone dropped them (`verify` reports a missing one).
_TRIGGERS = """
CREATE TRIGGER sagacity_journal_no_update
    BEFORE UPDATE ON sagacity_journal
    BEGIN SELECT RAISE(ABORT, 'sagacity_journal is append-only'); END;
CREATE TRIGGER sagacity_journal_no_delete
    BEFORE DELETE ON sagacity_journal
    BEGIN SELECT RAISE(ABORT, 'sagacity_journal is append-only'); END;
"""
TRIGGERS = ("sagacity_journal_no_update", "sagacity_journal_no_delete")
"""The append-only triggers a SQLite journal must have."""


def connect(
    path: str | Path, *, busy_timeout_ms: int = 30_000, create: bool = True
) -> sqlite3.Connection:
    """Open `path` with the settings the journal's guarantees rest on, creating the schema.

    WAL lets readers run beside the one writer; `synchronous=FULL` makes every commit
    durable across power loss, not only across a process crash. A generous busy
    timeout rides out lock contention between processes rather than failing fast.

    With `create=False` nothing is created or changed: the file must exist and hold a
    sagacity schema this code reads (for the read commands, which must not leave a new
    database or re-created triggers behind).
    """
    if not create and not Path(path).is_file():
        raise DatabaseNotFoundError(f"no SQLite database at {str(path)!r}")
    conn: sqlite3.Connection | None = None
    try:
        if create:
            conn = sqlite3.connect(
                str(path),
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        else:
            conn = sqlite3.connect(
                Path(path).absolute().as_uri() + "?mode=rw",
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                uri=True,
            )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if not create:
            _check_schema(conn, path)
            return conn
        _set_wal(conn, busy_timeout_ms)
        conn.execute("PRAGMA synchronous = FULL")
        _ensure_schema(conn, path)
    except BaseException as error:
        # A file refused (not sagacity's, locked, a newer schema) is closed, not left to
        # the garbage collector with its file handle open.
        if conn is not None:
            conn.close()
        if isinstance(error, sqlite3.Error):
            raise JournalError(f"cannot open SQLite database {str(path)!r}: {error}") from error
        raise
    return conn


def _set_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Switch to WAL, waiting out another process that is creating the same file.

    Changing the journal mode of a new file does not wait on the busy timeout: two
    processes opening a new database at once would see "database is locked" at once.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _ensure_schema(conn: sqlite3.Connection, path: str | Path) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        new = _table_missing(conn, "sagacity_journal")
        # executescript() would commit on its own: run the statements one by one.
        for statement in _statements(_SCHEMA + (_TRIGGERS if new else "")):
            conn.execute(statement)
        row = conn.execute(
            "SELECT value FROM sagacity_meta WHERE key = 'schema_version'"
        ).fetchone()
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"SQLite database {str(path)!r} has schema version {row[0]}, but this "
                f"sagacity knows only up to {SCHEMA_VERSION}; upgrade sagacity to open it"
            )
        # The statements above created what a version 1 file lacked: record it, so that
        # an older sagacity, which would not honour leases, refuses the file.
        conn.execute(
            "INSERT INTO sagacity_meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _table_missing(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is None


_JOURNAL_COLUMNS = {
    "saga_id",
    "seq",
    "phase",
    "tool_name",
    "call_id",
    "ref_seq",
    "payload",
    "recorded_at",
    "prev_hash",
    "hash",
}


def _check_schema(conn: sqlite3.Connection, path: str | Path) -> None:
    """Refuse a file without a sagacity schema this code reads; change nothing."""
    if _table_missing(conn, "sagacity_journal"):
        raise DatabaseNotFoundError(
            f"SQLite database {str(path)!r} holds no sagacity journal (no sagacity_journal table)"
        )
    # A sagacity_journal table is there: from here on, one sagacity did not write is
    # another program's, which cannot be read as a journal (not a journal that is missing).
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sagacity_journal)")}
    if not columns >= _JOURNAL_COLUMNS:
        raise SchemaVersionError(
            f"SQLite database {str(path)!r}: its sagacity_journal table is not sagacity's "
            f"(it lacks {', '.join(sorted(_JOURNAL_COLUMNS - columns))})"
        )
    if _table_missing(conn, "sagacity_meta"):
        raise SchemaVersionError(
            f"SQLite database {str(path)!r}: its sagacity_journal table is not sagacity's "
            "(there is no sagacity_meta table beside it)"
        )
    row = conn.execute("SELECT value FROM sagacity_meta WHERE key = 'schema_version'").fetchone()
    if row is None or int(row[0]) > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"SQLite database {str(path)!r} has schema version {None if row is None else row[0]}, "
            f"but this sagacity knows only up to {SCHEMA_VERSION}; upgrade sagacity to open it"
        )


def _statements(script: str) -> list[str]:
    """Split the schema script on the statements' final semicolons (triggers hold inner ones)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines():
        line = line.split("--", 1)[0].rstrip()
        if not line:
            continue
        current += line + "\n"
        if sqlite3.complete_statement(current):
            statements.append(current)
            current = ""
    return statements
