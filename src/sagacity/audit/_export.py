"""Exports of the journal: JSON Lines (verifiable on its own) and CSV (for reading)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from typing import IO

import orjson

from sagacity.audit._verify import iter_entries
from sagacity.journal import JournalEntry, SideEffectJournal

__all__ = ["CSV_FIELDS", "csv_row", "export_csv", "export_jsonl", "read_jsonl"]

CSV_FIELDS = [
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
]


def csv_row(entry: JournalEntry) -> list[object]:
    """One entry as a CSV row in `CSV_FIELDS` order, the payload as JSON text."""
    row = entry.to_json()
    row["payload"] = orjson.dumps(row["payload"]).decode()
    return [row[field] for field in CSV_FIELDS]


def _source(journal: SideEffectJournal, saga_id: str | None) -> Iterable[JournalEntry]:
    return journal.entries(saga_id) if saga_id is not None else iter_entries(journal)


def export_jsonl(
    journal: SideEffectJournal,
    out: IO[str],
    saga_id: str | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write one JSON object per entry, in (saga_id, seq) order; return how many.

    Each line holds the hashed fields and `hash`: enough to verify the chain with no
    sagacity at hand (docs/journal-format.md). `progress` is called with 1 as each saga
    is begun (a progress bar).
    """
    count = 0
    for entry in _counted(_source(journal, saga_id), progress):
        out.write(orjson.dumps(entry.to_json()).decode())
        out.write("\n")
        count += 1
    return count


def _counted(
    entries: Iterable[JournalEntry], progress: Callable[[int], None] | None
) -> Iterator[JournalEntry]:
    if progress is None:
        yield from entries
        return
    current = None
    for entry in entries:
        if entry.saga_id != current:
            current = entry.saga_id
            progress(1)
        yield entry


def read_jsonl(lines: Iterable[str]) -> Iterator[JournalEntry]:
    """Read back what `export_jsonl` wrote."""
    for line in lines:
        if line.strip():
            yield JournalEntry.from_json(orjson.loads(line))


def export_csv(
    journal: SideEffectJournal,
    out: IO[str],
    saga_id: str | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write entries as CSV with a header row, the payload as JSON text; return how many.

    `progress` is as for `export_jsonl`.
    """
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS)
    count = 0
    for entry in _counted(_source(journal, saga_id), progress):
        writer.writerow(csv_row(entry))
        count += 1
    return count
