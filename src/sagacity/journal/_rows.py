"""A journal entry as a row of the SQL backends' `sagacity_journal` table, and back."""

from __future__ import annotations

from typing import Any

from sagacity.errors import JournalError
from sagacity.journal._canonical import decode_canonical
from sagacity.journal._entry import JournalEntry, Phase, new_entry

__all__ = ["entry_from_row", "row_of"]


def row_of(entry: JournalEntry, payload_bytes: bytes) -> tuple[Any, ...]:
    """The row to insert: the payload as the canonical text that was hashed."""
    return (
        entry.saga_id,
        entry.seq,
        entry.phase._value_,  # not .value: a Python-level property
        entry.tool_name,
        entry.call_id,
        entry.ref_seq,
        payload_bytes.decode(),
        entry.recorded_at,
        entry.prev_hash,
        entry.hash,
    )


def entry_from_row(row: tuple[Any, ...]) -> JournalEntry:
    """The entry a stored row holds; a row edited until it cannot be read is a JournalError."""
    try:
        phase = Phase(row[2])
        payload = decode_canonical(row[6])
    except (ValueError, TypeError) as error:
        raise JournalError(
            f"saga {row[0]!r} seq {row[1]!r}: the stored row cannot be read ({error}); "
            "sagacity_journal was edited outside sagacity: audit it"
        ) from error
    return new_entry(row[0], row[1], phase, row[3], row[4], row[5], payload, row[7], row[8], row[9])
