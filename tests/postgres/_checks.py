"""What every concurrency test checks afterwards, against what the journal holds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from sagacity.audit import verify
from sagacity.journal import JournalEntry, SideEffectJournal


@dataclasses.dataclass(frozen=True)
class Acked:
    """One acknowledged append: when it began and returned (CLOCK_MONOTONIC, ns), and what."""

    began: int
    returned: int
    seq: int
    hash: str


def timed_append(append: Callable[[], JournalEntry]) -> Acked:
    """Run `append()` and record when it began and returned."""
    began = time.monotonic_ns()
    entry = append()
    return Acked(began, time.monotonic_ns(), entry.seq, entry.hash)


def assert_sound(journal: SideEffectJournal, saga_id: str, acked: list[Acked]) -> None:
    """No lost append, no duplicate or missing seq, the chain verifies, real-time order holds."""
    stored = journal.entries(saga_id)
    assert [entry.seq for entry in stored] == list(range(1, len(acked) + 1))
    by_seq = {entry.seq: entry.hash for entry in stored}
    assert sorted(a.seq for a in acked) == list(range(1, len(acked) + 1))
    for append in acked:
        assert by_seq[append.seq] == append.hash, f"seq {append.seq} holds another entry"
    report = verify(journal, saga_id)
    assert report.ok, report.problems
    assert_real_time_order(acked)


def assert_real_time_order(acked: list[Acked]) -> None:
    """An append acknowledged before another began has the smaller seq."""
    by_return = sorted(acked, key=lambda a: a.returned)
    highest_done = 0
    done = 0
    for later in sorted(acked, key=lambda a: a.began):
        while done < len(by_return) and by_return[done].returned < later.began:
            highest_done = max(highest_done, by_return[done].seq)
            done += 1
        assert highest_done < later.seq, (
            f"seq {later.seq} began after an append acknowledged with seq {highest_done}"
        )
