"""The versioned PostgreSQL schema: created on first use, refused when newer than the code."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg

from sagacity.errors import JournalError, SchemaVersionError

__all__ = ["LEASE_LOST", "LOCK_CLASS", "SCHEMA_VERSION", "advisory_key", "ensure_schema"]

SCHEMA_VERSION = 4
"""The schema version this code writes and reads. 1: journal and approval requests;
2: saga leases, and appends fenced by them; 3: a takeover journals TAKEN_OVER with the
lease it takes; 4: a decision notifies the workers (an older schema is upgraded in place)."""

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


_SCHEMA_V3 = [
    """
    CREATE OR REPLACE FUNCTION {s}sagacity_take_lease(
        p_lock_key integer, p_saga_id text, p_owner text, p_expires timestamptz,
        p_now timestamptz, p_payload text, p_recorded_at text,
        p_before_prev bytea, p_before_seq bytea, p_after_seq bytea,
        OUT owner text, OUT token bigint, OUT expires_at timestamptz,
        OUT head_seq bigint, OUT head_hash text)
    LANGUAGE plpgsql AS $$
    DECLARE
        held record;
        had_lease boolean;
        live boolean;
        marker_hash text;
        taken integer := 0;
    BEGIN
        -- The saga's lock, as the locked path takes it: the heads read below are real,
        -- and a fenced append on the locked path waits, then finds the new token.
        PERFORM pg_advisory_xact_lock({lock_class}, p_lock_key);
        SELECT l.owner, l.token, l.expires_at, l.since_seq INTO held
        FROM {s}sagacity_lease l WHERE l.saga_id = p_saga_id FOR UPDATE;
        had_lease := FOUND;
        SELECT j.seq, j.hash INTO head_seq, head_hash
        FROM {s}sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
        head_seq := coalesce(head_seq, 0);
        head_hash := coalesce(head_hash, repeat('0', 64));
        IF NOT had_lease THEN
            INSERT INTO {s}sagacity_lease AS l (saga_id, owner, token, expires_at, since_seq)
            VALUES (p_saga_id, p_owner, 1, p_expires, head_seq)
            ON CONFLICT (saga_id) DO NOTHING;
            IF NOT FOUND THEN  -- taken meanwhile by a worker that did not take the lock
                SELECT l.owner, l.token, l.expires_at INTO owner, token, expires_at
                FROM {s}sagacity_lease l WHERE l.saga_id = p_saga_id;
                RETURN;
            END IF;
            owner := p_owner; token := 1; expires_at := p_expires;
            RETURN;
        END IF;
        -- A saga ended since the lease was taken is free: its holder has nothing left.
        live := NOT EXISTS (
            SELECT 1 FROM {s}sagacity_journal j
            WHERE j.saga_id = p_saga_id AND j.phase = 'ENDED' AND j.seq > held.since_seq);
        IF live AND held.expires_at > p_now THEN
            owner := held.owner; token := held.token; expires_at := held.expires_at;
            RETURN;  -- busy (or this acquisition's own, when a try lost its reply)
        END IF;
        -- An expired lease that was never released: its holder may still be running, and
        -- append after the head it knows. TAKEN_OVER takes that seq first.
        live := live AND held.expires_at > 'epoch'::timestamptz AND head_seq > 0;
        WHILE live LOOP
            marker_hash := encode(sha256(p_before_prev || convert_to(head_hash, 'UTF8')
                || p_before_seq || convert_to((head_seq + 1)::text, 'UTF8') || p_after_seq),
                'hex');
            INSERT INTO {s}sagacity_journal
                (saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at,
                 prev_hash, hash)
            VALUES (p_saga_id, head_seq + 1, 'TAKEN_OVER', NULL, NULL, NULL, p_payload,
                    p_recorded_at, head_hash, marker_hash)
            ON CONFLICT ON CONSTRAINT sagacity_journal_pkey DO NOTHING;
            IF FOUND THEN
                head_seq := head_seq + 1;
                head_hash := marker_hash;
                EXIT;
            END IF;
            -- The former holder's fast path took the seq first: its entry is before.
            taken := taken + 1;
            IF taken >= 1000 THEN
                RAISE EXCEPTION 'saga %: % appends took the seq first', p_saga_id, taken;
            END IF;
            SELECT j.seq, j.hash INTO head_seq, head_hash
            FROM {s}sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
            live := NOT EXISTS (
                SELECT 1 FROM {s}sagacity_journal j
                WHERE j.saga_id = p_saga_id AND j.phase = 'ENDED' AND j.seq > held.since_seq);
        END LOOP;
        -- The head again: an ENDED its holder's fast path wrote meanwhile is before the
        -- lease taken now, which it does not free.
        SELECT j.seq, j.hash INTO head_seq, head_hash
        FROM {s}sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
        head_seq := coalesce(head_seq, 0);
        head_hash := coalesce(head_hash, repeat('0', 64));
        UPDATE {s}sagacity_lease l SET owner = p_owner, token = held.token + 1,
            expires_at = p_expires, since_seq = head_seq
        WHERE l.saga_id = p_saga_id;
        owner := p_owner; token := held.token + 1; expires_at := p_expires;
    END
    $$
    """,
]
"""What version 3 adds: a takeover journals TAKEN_OVER in the transaction that takes the
lease, so that appends of the former holder's fast path meet the primary key."""


_SCHEMA_V4 = [
    # Each APPROVED or REJECTED row notifies `sagacity.worker`'s channel when, and only
    # if, its transaction commits. A payload is at most 8000 bytes: a longer saga id is
    # left out (the watcher then looks at every recent decision instead).
    """
    CREATE OR REPLACE FUNCTION {s}sagacity_journal_notify_decision() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('sagacity_decisions', json_build_object(
            'schema', TG_TABLE_SCHEMA,
            'saga_id', CASE WHEN octet_length(NEW.saga_id) <= 7000 THEN NEW.saga_id END
        )::text);
        RETURN NULL;
    END
    $$
    """,
    # A worker of an older sagacity may have made it already.
    "DROP TRIGGER IF EXISTS sagacity_journal_decision ON {s}sagacity_journal",
    """
    CREATE TRIGGER sagacity_journal_decision
        AFTER INSERT ON {s}sagacity_journal
        FOR EACH ROW WHEN (NEW.phase IN ('APPROVED', 'REJECTED'))
        EXECUTE FUNCTION {s}sagacity_journal_notify_decision()
    """,
]
"""What version 4 adds: the NOTIFY of each decision a worker waits on (`sagacity.worker`)."""

_DECIDED_INDEX = """
    CREATE INDEX sagacity_journal_decided ON {s}sagacity_journal (recorded_at)
        WHERE phase IN ('APPROVED', 'REJECTED')
"""
"""The decision rows by time, for a worker's quick looks; made with a new schema only. On
an upgraded journal the worker builds it without blocking appends (CONCURRENTLY, which
cannot run in the upgrade's transaction)."""


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
        # to_regnamespace reads an identifier as SQL does: quoted, or it folds case.
        if (
            schema is not None
            and _scalar(conn, "SELECT to_regnamespace(%s)", (prefix[:-1],)) is None
        ):
            conn.execute(f"CREATE SCHEMA {prefix[:-1]}", prepare=False)
        meta = prefix + "sagacity_meta"
        if _scalar(conn, "SELECT to_regclass(%s)", (meta,)) is None:
            _run(conn, [*_SCHEMA_V1, *_SCHEMA_V2, *_SCHEMA_V3, *_SCHEMA_V4, _DECIDED_INDEX], prefix)
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
        upgrades = {
            1: [*_SCHEMA_V2, *_SCHEMA_V3, *_SCHEMA_V4],
            2: [*_SCHEMA_V3, *_SCHEMA_V4],
            3: _SCHEMA_V4,
        }.get(int(str(found)))
        if upgrades:
            _run(conn, upgrades, prefix)
            conn.execute(
                f"UPDATE {meta} SET value = %s WHERE key = 'schema_version'",
                (str(SCHEMA_VERSION),),
                prepare=False,
            )


_JOURNAL_COLUMNS = frozenset(
    {
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
    if schema is not None and _scalar(conn, "SELECT to_regnamespace(%s)", (prefix[:-1],)) is None:
        raise DatabaseNotFoundError(f"{where}: no schema {schema!r} (nothing was created)")
    if _scalar(conn, "SELECT to_regclass(%s)", (journal,)) is None:
        raise DatabaseNotFoundError(f"{where} holds no sagacity journal (nothing was created)")
    # A sagacity_journal table is there: one sagacity did not write is another program's,
    # which cannot be read as a journal (not a journal that is missing).
    rows = conn.execute(
        b"SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        b"AND NOT attisdropped",
        (journal,),
        prepare=False,
    ).fetchall()
    lacking = sorted(_JOURNAL_COLUMNS - {row[0] for row in rows})
    if lacking:
        raise SchemaVersionError(
            f"{where}: its sagacity_journal table is not sagacity's (it lacks {', '.join(lacking)})"
        )
    if _scalar(conn, "SELECT to_regclass(%s)", (meta,)) is None:
        raise SchemaVersionError(
            f"{where}: its sagacity_journal table is not sagacity's (there is no "
            "sagacity_meta table beside it)"
        )
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
