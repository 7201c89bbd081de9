"""Saga summaries and doubts (`sagacity._summary`), read from real journals."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity
from sagacity._summary import list_doubts, list_summaries, summarize
from sagacity.errors import SagaNotFoundError
from sagacity.journal import SideEffectJournal
from tests.server._bank import Bank, start_wire


def _done(journal: SideEffectJournal, saga_id: str, outcome: str = "COMPLETED") -> None:
    journal.append(saga_id, Phase.INTENT, tool_name="t", call_id="c", payload={"input": {}})
    journal.append(saga_id, Phase.EXECUTED, tool_name="t", call_id="c", ref_seq=1, payload={})
    journal.append(saga_id, Phase.ENDED, payload={"outcome": outcome})


class TestPaging:
    def test_pages_past_a_batch_boundary(self) -> None:
        """1,250 sagas of 3 entries (several read batches) page by 100 to each id once."""
        sagacity = Sagacity.from_url("memory://")
        ids = [f"saga-{n:05d}" for n in range(1250)]
        for saga_id in ids:
            _done(sagacity.journal, saga_id)
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = list_summaries(sagacity.journal, limit=100, cursor=cursor)
            pages += 1
            assert len(page.summaries) <= 100
            seen += [s.saga_id for s in page.summaries]
            assert all(s.entries == 3 and s.status == "COMPLETED" for s in page.summaries)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == ids
        assert pages == 13

    def test_a_new_saga_between_pages_is_not_lost(self) -> None:
        """A saga added behind the cursor appears on a later page; none is shown twice."""
        sagacity = Sagacity.from_url("memory://")
        for saga_id in ("a", "c", "e"):
            _done(sagacity.journal, saga_id)
        first = list_summaries(sagacity.journal, limit=2)
        assert [s.saga_id for s in first.summaries] == ["a", "c"]
        _done(sagacity.journal, "d")
        _done(sagacity.journal, "b")  # before the cursor: belongs to a page already read
        second = list_summaries(sagacity.journal, limit=2, cursor=first.next_cursor)
        assert [s.saga_id for s in second.summaries] == ["d", "e"]
        assert second.next_cursor is None

    def test_filters_and_scan_budget(self) -> None:
        """status/since filter; a scan budget ends a sparse page early with a cursor."""
        sagacity = Sagacity.from_url("memory://")
        for n in range(30):
            _done(sagacity.journal, f"s{n:02d}", "COMPENSATED" if n in (3, 27) else "COMPLETED")
        found = list_summaries(sagacity.journal, status="COMPENSATED")
        assert [s.saga_id for s in found.summaries] == ["s03", "s27"]
        short = list_summaries(sagacity.journal, status="COMPENSATED", scan=10)
        assert [s.saga_id for s in short.summaries] == ["s03"]
        assert short.next_cursor == "s09"
        rest = list_summaries(
            sagacity.journal, status="COMPENSATED", scan=100, cursor=short.next_cursor
        )
        assert [s.saga_id for s in rest.summaries] == ["s27"]
        assert list_summaries(sagacity.journal, since="2999-01-01T00:00:00.000000Z").summaries == []

    def test_bad_arguments(self) -> None:
        """An unknown status or a limit out of range is a ValueError naming it."""
        journal = Sagacity.from_url("memory://").journal
        with pytest.raises(ValueError, match="'DONE'"):
            list_summaries(journal, status="DONE")
        with pytest.raises(ValueError, match="limit"):
            list_summaries(journal, limit=0)
        with pytest.raises(SagaNotFoundError, match="'nope'"):
            summarize(journal, "nope")


class TestStates:
    def test_waiting_started_by_and_doubts(self, db_url: str, bank: Bank) -> None:
        """A waiting saga: AWAITING_APPROVAL, pending 1, its starter; an INTENT alone: in doubt."""
        sagacity = Sagacity.from_url(db_url)
        sagacity.wrap(bank)
        try:
            start_wire(sagacity, bank, "w-1", started_by="sam")
            sagacity.journal.append(
                "x-1", Phase.INTENT, tool_name="reserve", call_id="c-9", payload={"input": {}}
            )
            waiting = summarize(sagacity.journal, "w-1")
            assert (waiting.status, waiting.pending, waiting.started_by) == (
                "AWAITING_APPROVAL",
                1,
                "sam",
            )
            crashed = summarize(sagacity.journal, "x-1")
            assert (crashed.status, crashed.in_doubt) == ("OPEN", 1)
            doubts = list_doubts(sagacity.journal)
            assert [(d.saga_id, d.call_id, d.kind, d.saga_status) for d in doubts] == [
                ("x-1", "c-9", "call", "OPEN")
            ]
            assert "no outcome" in doubts[0].reason
        finally:
            sagacity.close()

    def test_a_compensation_in_doubt_is_listed(self) -> None:
        """A COMPENSATING with no outcome is a doubt of kind 'compensation'."""
        journal = Sagacity.from_url("memory://").journal
        journal.append("k", Phase.INTENT, tool_name="t", call_id="c", payload={"input": {}})
        journal.append("k", Phase.EXECUTED, tool_name="t", call_id="c", ref_seq=1, payload={})
        journal.append("k", Phase.COMPENSATING, tool_name="t", call_id="c", ref_seq=2, payload={})
        assert [(d.kind, d.seq) for d in list_doubts(journal)] == [("compensation", 3)]

    def test_an_edited_row_lists_its_saga_unreadable_and_the_others_as_usual(
        self, tmp_path: Path
    ) -> None:
        """A row made unreadable outside sagacity marks only its saga UNREADABLE."""
        path = tmp_path / "edited.db"
        sagacity = Sagacity.from_url(f"sqlite:///{path}")
        try:
            for saga_id in ("a", "b", "c"):
                _done(sagacity.journal, saga_id)
            with contextlib.closing(sqlite3.connect(path)) as db, db:
                db.execute("DROP TRIGGER sagacity_journal_no_update")  # as an intruder would
                db.execute("UPDATE sagacity_journal SET phase = 'BOGUS' WHERE saga_id = 'b'")
            page = list_summaries(sagacity.journal)
            by_id = {s.saga_id: s for s in page.summaries}
            assert list(by_id) == ["a", "b", "c"]
            assert by_id["a"].status == by_id["c"].status == "COMPLETED"
            assert by_id["b"].status == "UNREADABLE"
            assert by_id["b"].problem is not None
            assert "'b'" in by_id["b"].problem
        finally:
            sagacity.close()
