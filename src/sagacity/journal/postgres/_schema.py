"""The versioned PostgreSQL schema: created on first use, refused when newer than the code."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg

from sagacity.errors import JournalError, SchemaVersionError

__all__ = ["LEASE_LOST", "LOCK_CLASS", "SCHEMA_VERSION", "advisory_key", "ensure_schema"]

SCHEMA_VERSION = 2
"""The schema version this code writes and reads. 1: journal and approval requests;
2: saga leases, and appends fenced by them (a version 1 schema is upgraded in place)."""

LEASE_LOST = "SG001"
"""The SQLSTATE the locked path raises for an append whose lease was taken over."""

LOCK_CLASS = int.from_bytes(b"saga", "big")
"""The first key of every advisory lock sagacity takes (the second names the saga)."""


def advisory_key(text: str) -> int:
    """The second advisory-lock key for `text`: a stable signed 32-bit hash."""
    digest = hashlib.blake2b(text.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


# {s} is the quoted schema followed by a dot, or nothing.
# COLLATE "C": ids sort by code point, as in Python and the other backends, whatever the
# database's locale; it is also the cheapest comparison for the primary key.
_SCHEMA_V1 = [
    """
    CREATE TABLE {s}sagacity_meta (
        key   text PRIMARY KEY,
        value text NOT NULL
    )
    """,
    """
    CREATE TABLE {s}sagacity_journal (
        saga_id     text COLLATE "C" NOT NULL,
        seq         bigint NOT NULL CHECK (seq > 0),
        phase       text   NOT NULL,
        tool_name   text,
        call_id     text,
        ref_seq     bigint,
        payload     text   NOT NULL,
        recorded_at text   NOT NULL,
        prev_hash   text   NOT NULL,
        hash        text   NOT NULL,
        PRIMARY KEY (saga_id, seq)
    )
    """,
    "COMMENT ON COLUMN {s}sagacity_journal.payload IS "
    "'canonical JSON (RFC 8785), exactly the bytes that were hashed; never jsonb'",
    """
    CREATE FUNCTION {s}sagacity_journal_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'sagacity_journal is append-only: % refused', TG_OP
            USING HINT = 'journal entries are evidence; append a new entry instead';
    END
    $$
    """,
    """
    CREATE TRIGGER sagacity_journal_no_update_delete
        BEFORE UPDATE OR DELETE ON {s}sagacity_journal
        FOR EACH ROW EXECUTE FUNCTION {s}sagacity_journal_refuse_change()
    """,
    """
    CREATE TRIGGER sagacity_journal_no_truncate
        BEFORE TRUNCATE ON {s}sagacity_journal
        FOR EACH STATEMENT EXECUTE FUNCTION {s}sagacity_journal_refuse_change()
    """,
    # The locked path of an append, in one statement: lock the saga, read its last row
    # (each statement of a plpgsql function takes a new snapshot, so the read sees every
    # append committed before the lock was granted), hash and insert. The caller sends
    # the entry's canonical JSON in three pieces, around the two values only the head
    # decides (prev_hash and seq); the journal checks the returned hash with `seal`.
    # With p_find_own, an entry identical to this one (an earlier try whose reply was
    # lost) is returned instead of being written twice.
    """
    CREATE TABLE {s}sagacity_approval_request (
        request_id   text COLLATE "C" PRIMARY KEY,
        saga_id      text COLLATE "C" NOT NULL,
        seq          bigint NOT NULL,
        call_id      text   NOT NULL,
        tool_name    text   NOT NULL,
        input        text   NOT NULL,
        input_sha256 text   NOT NULL,
        reason       text   NOT NULL,
        requested_at timestamptz NOT NULL,
        expires_at   timestamptz
    )
    """,
    """
    CREATE INDEX sagacity_approval_request_saga
        ON {s}sagacity_approval_request (saga_id, requested_at, seq)
    """,
]


_SCHEMA_V2 = [
    """
    CREATE TABLE IF NOT EXISTS {s}sagacity_lease (
        saga_id    text COLLATE "C" PRIMARY KEY,
        owner      text   NOT NULL,
        token      bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        since_seq  bigint NOT NULL
    )
    """,
    "DROP FUNCTION IF EXISTS {s}sagacity_append_locked("
    "integer, text, text, text, text, bigint, text, text, bytea, bytea, bytea, boolean)",
    """
    CREATE OR REPLACE FUNCTION {s}sagacity_append_locked(
        p_lock_key integer, p_saga_id text, p_phase text, p_tool_name text, p_call_id text,
        p_ref_seq bigint, p_payload text, p_recorded_at text,
        p_before_prev bytea, p_before_seq bytea, p_after_seq bytea, p_find_own boolean,
        p_fence bigint,
        OUT seq bigint, OUT prev_hash text, OUT hash text, OUT lost integer)
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock({lock_class}, p_lock_key);
        lost := 0;
        -- A holder taken over writes nothing; FOR SHARE keeps a takeover waiting until
        -- this append commits, so that the new holder reads it.
        IF p_fence IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM {s}sagacity_lease l
            WHERE l.saga_id = p_saga_id AND l.token = p_fence FOR SHARE
        ) THEN
            RAISE EXCEPTION 'saga %: lease token % no longer holds the saga', p_saga_id, p_fence
                USING ERRCODE = 'SG001';
        END IF;
        IF p_find_own THEN
            SELECT j.seq, j.prev_hash, j.hash INTO seq, prev_hash, hash
            FROM {s}sagacity_journal j
            WHERE j.saga_id = p_saga_id AND j.recorded_at = p_recorded_at
              AND j.phase = p_phase AND j.payload = p_payload
              AND j.tool_name IS NOT DISTINCT FROM p_tool_name
              AND j.call_id IS NOT DISTINCT FROM p_call_id
              AND j.ref_seq IS NOT DISTINCT FROM p_ref_seq;
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        LOOP
            SELECT j.seq, j.hash INTO seq, prev_hash
            FROM {s}sagacity_journal j WHERE j.saga_id = p_saga_id
            ORDER BY j.seq DESC LIMIT 1;
            seq := coalesce(seq, 0) + 1;
            prev_hash := coalesce(prev_hash, repeat('0', 64));
            hash := encode(sha256(p_before_prev || convert_to(prev_hash, 'UTF8')
                || p_before_seq || convert_to(seq::text, 'UTF8') || p_after_seq), 'hex');
            INSERT INTO {s}sagacity_journal
                (saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at,
                 prev_hash, hash)
            VALUES (p_saga_id, seq, p_phase, p_tool_name, p_call_id, p_ref_seq, p_payload,
                    p_recorded_at, prev_hash, hash)
            ON CONFLICT ON CONSTRAINT sagacity_journal_pkey DO NOTHING;
            IF FOUND THEN
                RETURN;
            END IF;
            -- A writer on the fast path took the seq: read the head again.
            lost := lost + 1;
            IF lost >= 1000 THEN
                RAISE EXCEPTION 'saga %: % appends took the seq first', p_saga_id, lost;
            END IF;
        END LOOP;
    END
    $$
    """,
]
"""What version 2 adds to version 1: the lease table, and the fenced locked path."""


def ensure_schema(conn: psycopg.Connection[Any], schema: str | None, where: str) -> None:
    """Create the tables on first use, or check that their version is one this code reads.

    Runs in one transaction under an advisory lock, so processes starting together
    create the schema once.

    Raises:
        SchemaVersionError: The schema is newer than `SCHEMA_VERSION`.
        JournalError: The database does not store text as UTF-8.
    """
    prefix = "" if schema is None else '"' + schema.replace('"', '""') + '".'
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)",
            (LOCK_CLASS, advisory_key(f"schema:{schema or ''}")),
            prepare=False,
        )
        encoding = _scalar(conn, "SELECT current_setting('server_encoding')")
        if encoding != "UTF8":
            raise JournalError(
                f"{where} stores text as {encoding}, not UTF8: journal payloads could not be "
                "stored exactly as hashed; create the database with ENCODING 'UTF8'"
            )
        if schema is not None and _scalar(conn, "SELECT to_regnamespace(%s)", (schema,)) is None:
            conn.execute(f"CREATE SCHEMA {prefix[:-1]}", prepare=False)
        meta = prefix + "sagacity_meta"
        if _scalar(conn, "SELECT to_regclass(%s)", (meta,)) is None:
            _run(conn, [*_SCHEMA_V1, *_SCHEMA_V2], prefix)
            conn.execute(
                f"INSERT INTO {meta} (key, value) VALUES ('schema_version', %s)",
                (str(SCHEMA_VERSION),),
                prepare=False,
            )
            return
        found = _scalar(conn, f"SELECT value FROM {meta} WHERE key = 'schema_version'")
        if found is None or int(str(found)) > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{where} has sagacity schema version {found}, but this sagacity knows only "
                f"up to {SCHEMA_VERSION}; upgrade sagacity to open it"
            )
        if int(str(found)) == 1:
            _run(conn, _SCHEMA_V2, prefix)
            conn.execute(
                f"UPDATE {meta} SET value = %s WHERE key = 'schema_version'",
                (str(SCHEMA_VERSION),),
                prepare=False,
            )


def check_schema(conn: psycopg.Connection[Any], schema: str | None, where: str) -> None:
    """Refuse a database without a sagacity schema this code reads; create nothing.

    Raises:
        DatabaseNotFoundError: There is no sagacity schema there.
        SchemaVersionError: The schema is newer than `SCHEMA_VERSION`, or not sagacity's.
    """
    from sagacity.errors import DatabaseNotFoundError

    prefix = "" if schema is None else '"' + schema.replace('"', '""') + '".'
    meta = prefix + "sagacity_meta"
    journal = prefix + "sagacity_journal"
    if schema is not None and _scalar(conn, "SELECT to_regnamespace(%s)", (schema,)) is None:
        raise DatabaseNotFoundError(f"{where}: no schema {schema!r} (nothing was created)")
    if (
        _scalar(conn, "SELECT to_regclass(%s)", (meta,)) is None
        or _scalar(conn, "SELECT to_regclass(%s)", (journal,)) is None
    ):
        raise DatabaseNotFoundError(f"{where} holds no sagacity journal (nothing was created)")
    found = _scalar(conn, f"SELECT value FROM {meta} WHERE key = 'schema_version'")
    if found is None or int(str(found)) > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where} has sagacity schema version {found}, but this sagacity knows only "
            f"up to {SCHEMA_VERSION}; upgrade sagacity to open it"
        )


def _run(conn: psycopg.Connection[Any], statements: list[str], prefix: str) -> None:
    for statement in statements:
        sql = statement.format(s=prefix, lock_class=LOCK_CLASS)
        conn.execute(sql.encode(), prepare=False)


def _scalar(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql.encode(), params, prepare=False).fetchone()
    return None if row is None else row[0]
