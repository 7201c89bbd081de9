"""A journal entry as a row of the SQL backends' `sagacity_journal` table, and back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sagacity.errors import JournalError
from sagacity.journal._canonical import decode_canonical
from sagacity.journal._entry import JournalEntry, Phase, new_entry

__all__ = ["UnreadableRowError", "entries_from_rows", "entry_from_row", "row_of"]

_PHASES = {phase._value_: phase for phase in Phase}
_COLUMNS = (
    ("saga_id", "text"),
    ("seq", "integer"),
    ("phase", "phase"),
    ("tool_name", "text or null"),
    ("call_id", "text or null"),
    ("ref_seq", "integer or null"),
    ("payload", "text"),
    ("recorded_at", "text"),
    ("prev_hash", "text"),
    ("hash", "text"),
)
"""Each column of a row, in order, and what it must hold."""


class UnreadableRowError(JournalError):
    """A stored row cannot be read as an entry: it was edited outside sagacity.

    Raised by the SQL backends' reads. The message names the saga and seq as stored;
    `readable` holds the entries the same read returned before the row, in order, so
    that a verifier can check them and report the row as the chain's problem.
    """

    def __init__(
        self, saga_id: object, seq: object, reason: str, readable: Sequence[JournalEntry] = ()
    ) -> None:
        super().__init__(
            f"saga {saga_id!r} seq {seq!r}: the stored row cannot be read ({reason}); "
            "sagacity_journal was edited outside sagacity: audit it"
        )
        self.saga_id = saga_id
        """The row's saga id, as stored (not necessarily text)."""
        self.seq = seq
        """The row's seq, as stored (not necessarily an integer)."""
        self.reason = reason
        """What cannot be read."""
        self.readable = tuple(readable)
        """The entries read before the row, in the order the read returned them."""

    def __reduce__(
        self,
    ) -> tuple[type[UnreadableRowError], tuple[object, object, str, tuple[JournalEntry, ...]]]:
        # Rebuilt from its fields, not from the message, when it crosses a process.
        return type(self), (self.saga_id, self.seq, self.reason, self.readable)


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


def entry_from_row(row: Sequence[Any]) -> JournalEntry:
    """The entry a stored row holds.

    Raises:
        UnreadableRowError: The row was edited until it cannot be read: an unknown
            phase, a payload that is not JSON, a column of the wrong type.
    """
    (
        saga_id,
        seq,
        phase_text,
        tool_name,
        call_id,
        ref_seq,
        payload_text,
        recorded_at,
        prev_hash,
        hash,
    ) = row
    phase = _PHASES.get(phase_text)  # every value a database returns is hashable
    if (
        phase is None
        or type(saga_id) is not str
        or type(seq) is not int
        or (tool_name is not None and type(tool_name) is not str)
        or (call_id is not None and type(call_id) is not str)
        or (ref_seq is not None and type(ref_seq) is not int)
        or type(payload_text) is not str
        or type(recorded_at) is not str
        or type(prev_hash) is not str
        or type(hash) is not str
    ):
        raise UnreadableRowError(saga_id, seq, _wrong_column(row))
    try:
        payload = decode_canonical(payload_text)
    except (ValueError, TypeError) as error:
        raise UnreadableRowError(
            saga_id, seq, f"payload {_short(payload_text)} is not JSON: {error}"
        ) from error
    return new_entry(
        saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash
    )


def entries_from_rows(rows: Sequence[Sequence[Any]]) -> list[JournalEntry]:
    """The entries rows hold, in their order.

    Raises:
        UnreadableRowError: For the first row that cannot be read, with the entries of
            the rows before it as `readable`.
    """
    try:
        return [entry_from_row(row) for row in rows]
    except UnreadableRowError as error:
        readable = []
        for row in rows:
            try:
                readable.append(entry_from_row(row))
            except UnreadableRowError:
                break
        error.readable = tuple(readable)
        raise


def _wrong_column(row: Sequence[Any]) -> str:
    """Say which column of a row holds what it must not, the first in column order."""
    for (name, kind), value in zip(_COLUMNS, row, strict=True):
        if value is None and kind.endswith(" or null"):
            continue
        if kind == "phase":
            if type(value) is not str or value not in _PHASES:
                return f"phase {_short(value)} is not a phase"
        elif kind.startswith("integer"):
            if type(value) is not int:
                return f"{name} {_short(value)} is not an integer"
        elif type(value) is not str:
            return f"{name} holds {_short(value)}, not text"
    return "a column is not of its type"  # not reached: entry_from_row found one


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}…"
