"""Editing one journal row's payload in storage, as someone with database access would.

Memory edits the live chain, SQLite drops and re-creates the append-only triggers, and
PostgreSQL disables its trigger for one UPDATE. The entry's hash is left as it was.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sagacity import InMemoryJournal, Sagacity, SqliteJournal
from sagacity.journal import JsonValue, canonical_bytes
from tests._postgres import admin_connection
from tests.audit._tamper import MemoryTamper, SqliteTamper


def edit_payload(
    sagacity: Sagacity, store_url: str, saga_id: str, seq: int, payload: JsonValue
) -> None:
    """Store `payload` as entry `seq`'s, without touching its hash."""
    journal: Any = sagacity.journal
    position = next(i for i, e in enumerate(journal.entries(saga_id), 1) if e.seq == seq)
    if isinstance(journal, InMemoryJournal):
        MemoryTamper(journal).set_field(saga_id, position, "payload", payload)
    elif isinstance(journal, SqliteJournal):
        tamper = SqliteTamper(journal)
        try:
            assert tamper.set_field(saga_id, position, "payload", payload)
        finally:
            tamper.close()
    else:
        schema = dict(parse_qsl(urlsplit(store_url).query))["schema"]
        table = f'"{schema}".sagacity_journal'
        with admin_connection() as conn, conn.transaction():
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            conn.execute(
                f"UPDATE {table} SET payload = %s WHERE saga_id = %s AND seq = %s",
                (canonical_bytes(payload).decode(), saga_id, seq),
            )
            conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
