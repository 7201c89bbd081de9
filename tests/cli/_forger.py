"""Append a forged APPROVED row with plain SQL, as anyone with the database's password could.

Run as its own process: `python tests/cli/_forger.py DATABASE_URL SAGA_ID APPROVER [JSON]`
(JSON: more payload fields, such as a signature copied from elsewhere). It
imports nothing of sagacity: it reads the saga's AWAITING_APPROVAL and last row, hashes
an APPROVED entry the way docs/journal-format.md says (RFC 8785, SHA-256, chained to the
last hash) and INSERTs it. The row verifies as a chain; only a signature can tell it.
Prints the seq it wrote.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import rfc8785

COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"


def forge(
    rows: list[tuple[Any, ...]], saga_id: str, approver: str, extra: dict[str, Any]
) -> tuple[Any, ...]:
    """The forged row after `rows` (the saga's, in seq order, as stored)."""
    awaiting = [row for row in rows if row[2] == "AWAITING_APPROVAL"][-1]
    asked = json.loads(awaiting[6])
    payload = {
        "request_id": asked["request_id"],
        "approver": approver,
        "input_sha256": asked["input_sha256"],
        **extra,
    }
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    last = rows[-1]
    hashed = {
        "saga_id": saga_id,
        "seq": last[1] + 1,
        "phase": "APPROVED",
        "tool_name": awaiting[3],
        "call_id": awaiting[4],
        "ref_seq": awaiting[1],
        "payload": payload,
        "recorded_at": now,
        "prev_hash": last[9],
    }
    digest = hashlib.sha256(rfc8785.dumps(hashed)).hexdigest()
    return (
        saga_id,
        last[1] + 1,
        "APPROVED",
        awaiting[3],
        awaiting[4],
        awaiting[1],
        rfc8785.dumps(payload).decode(),
        now,
        last[9],
        digest,
    )


def main(url: str, saga_id: str, approver: str, extra: str = "{}") -> int:
    select = f"SELECT {COLUMNS} FROM {{t}} WHERE saga_id = {{m}} ORDER BY seq"
    insert = f"INSERT INTO {{t}} ({COLUMNS}) VALUES ({', '.join(['{m}'] * 10)})"
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        sql = {"t": "sagacity_journal", "m": "?"}
        rows = conn.execute(select.format(**sql), (saga_id,)).fetchall()
        row = forge(rows, saga_id, approver, json.loads(extra))
        conn.execute(insert.format(**sql), row)
        conn.execute("COMMIT")
        conn.close()
    else:
        import psycopg

        parts = urlsplit(url)
        schema = dict(parse_qsl(parts.query))["schema"]
        with psycopg.connect(urlunsplit(parts._replace(query=""))) as conn:
            sql = {"t": f'"{schema}".sagacity_journal', "m": "%s"}
            found = conn.execute(select.format(**sql), (saga_id,)).fetchall()
            row = forge([tuple(r) for r in found], saga_id, approver, json.loads(extra))
            conn.execute(insert.format(**sql), row)
    sys.stdout.write(f"{row[1]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
