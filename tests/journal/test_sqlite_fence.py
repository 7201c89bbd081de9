"""The SQLite journal looks at a saga's lease only when a takeover could go unseen.

An append under a head its lease's token fences is one plain `INSERT` (the takeover
since would have journaled TAKEN_OVER at its seq); every other fenced append checks the
token in its statement. These attack the cases where nothing journals a takeover: a
row another writer appended, a release, an ENDED.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import LeaseLostError, Phase
from sagacity.journal import SagaLease, SqliteJournal

T0 = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)


def take(journal: SqliteJournal, owner: str, now: datetime.datetime = T0) -> SagaLease:
    return journal.acquire_lease("s", owner, now=now, expires_at=now + MINUTE)


@pytest.fixture
def journals(tmp_path: Path) -> Iterator[tuple[SqliteJournal, SqliteJournal]]:
    """Two journals on one file: a holder's, and another worker's."""
    holder, other = SqliteJournal(tmp_path / "j.db"), SqliteJournal(tmp_path / "j.db")
    yield holder, other
    holder.close()
    other.close()


def statements(journal: SqliteJournal) -> list[str]:
    """The SQL the journal's connection runs from now on (its appends and lease checks)."""
    seen: list[str] = []
    journal._conn.set_trace_callback(seen.append)
    return seen


class TestTheFenceIsCheckedOnlyWhenNeeded:
    def test_appends_under_a_fenced_head_do_not_read_the_lease(
        self, journals: tuple[SqliteJournal, SqliteJournal]
    ) -> None:
        """After the lease is taken, and after its saga's first (checked) append, none reads it."""
        holder, _ = journals
        lease = take(holder, "worker-a")
        seen = statements(holder)
        holder.append("s", Phase.INTENT, call_id="t#1", fence=lease)  # seq 0: checked
        checked = [sql for sql in seen if "sagacity_lease" in sql]
        assert len(checked) == 1
        for n in (2, 3, 4):
            holder.append("s", Phase.INTENT, call_id=f"t#{n}", fence=lease)
        assert [sql for sql in seen if "sagacity_lease" in sql] == checked
        assert [e.seq for e in holder.entries("s")] == [1, 2, 3, 4]

    def test_a_lease_taken_at_a_head_fences_it_at_once(
        self, journals: tuple[SqliteJournal, SqliteJournal]
    ) -> None:
        """A lease taken over, TAKEN_OVER journaled, fences its marker: no append reads it."""
        holder, other = journals
        old = take(other, "worker-a")
        other.append("s", Phase.INTENT, call_id="t#1", fence=old)
        new = take(holder, "worker-b", T0 + 2 * MINUTE)
        seen = statements(holder)
        holder.append("s", Phase.INTENT, call_id="t#2", fence=new)
        assert [sql for sql in seen if "sagacity_lease" in sql] == []
        assert [e.phase for e in holder.entries("s")] == [
            Phase.INTENT,
            Phase.TAKEN_OVER,
            Phase.INTENT,
        ]


class TestNoTakeoverGoesUnseen:
    def test_a_row_another_writer_appended_makes_the_holder_check_again(
        self, journals: tuple[SqliteJournal, SqliteJournal]
    ) -> None:
        """Another writer's ENDED frees the lease with no TAKEN_OVER: the holder is refused.

        Its append after the foreign row is checked (and passes: its token is still the
        saga's), but does not fence the head again, so once the next worker took the
        freed lease each of its appends is refused.
        """
        holder, other = journals
        old = take(holder, "worker-a")
        for n in (1, 2):
            holder.append("s", Phase.INTENT, call_id=f"t#{n}", fence=old)
        other.append("s", Phase.ENDED, payload={"outcome": "X"})  # not under the lease
        holder.append("s", Phase.EXECUTED, call_id="t#2", ref_seq=2, fence=old)
        new = take(other, "worker-b")  # free: ended since it was taken
        before = other.entries("s")
        assert new.token == old.token + 1
        assert [e.phase for e in before][-1] is Phase.EXECUTED

        for n in (3, 4):
            with pytest.raises(LeaseLostError, match="worker-a"):
                holder.append("s", Phase.INTENT, call_id=f"t#{n}", fence=old)
        assert other.entries("s") == before

    def test_a_straggler_after_the_release_never_goes_unchecked(
        self, journals: tuple[SqliteJournal, SqliteJournal]
    ) -> None:
        """After a release, the old token's appends are checked for good.

        One that comes before the next worker takes the saga passes (its token is still
        the saga's, as before this journal skipped checks); those after are refused.
        """
        holder, other = journals
        old = take(holder, "worker-a")
        holder.append("s", Phase.INTENT, call_id="t#1", fence=old)
        holder.append("s", Phase.INTENT, call_id="t#2", fence=old)
        holder.release_lease(old)
        holder.append("s", Phase.EXECUTED, call_id="t#2", ref_seq=2, fence=old)
        take(other, "worker-b")  # released: taken with no TAKEN_OVER
        with pytest.raises(LeaseLostError, match="worker-a"):
            holder.append("s", Phase.INTENT, call_id="t#3", fence=old)
        assert [e.phase for e in other.entries("s")] == [Phase.INTENT] * 2 + [Phase.EXECUTED]

    def test_an_ended_holder_is_refused_once_the_saga_is_taken_again(
        self, journals: tuple[SqliteJournal, SqliteJournal]
    ) -> None:
        """ENDED written under the lease lets it go: the holder's next appends are checked."""
        holder, other = journals
        old = take(holder, "worker-a")
        holder.append("s", Phase.INTENT, call_id="t#1", fence=old)
        holder.append("s", Phase.ENDED, payload={"outcome": "COMPLETED"}, fence=old)
        take(other, "worker-b")
        with pytest.raises(LeaseLostError, match="worker-a"):
            holder.append("s", Phase.COMPENSATING, call_id="t#1", fence=old)
