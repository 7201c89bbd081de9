"""How the CLI and the demo show journal entries and approval requests as text."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sagacity.journal import JournalEntry

__all__ = ["journal_table", "table"]


def journal_table(entries: Iterable[JournalEntry]) -> list[str]:
    """Format entries as an aligned table: seq, phase, tool, call id, ref, short hash."""
    return table(
        ("seq", "phase", "tool", "call id", "ref", "hash"),
        [
            (
                str(entry.seq),
                entry.phase.value,
                entry.tool_name or "",
                entry.call_id or "",
                "" if entry.ref_seq is None else str(entry.ref_seq),
                entry.hash[:12],
            )
            for entry in entries
        ],
    )


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Align rows of cells under a header, two spaces between columns."""
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
