"""A stored row edited until it cannot be read is a problem of its saga, not a crash.

The SQL backends store each column as text or an integer, so an edit outside sagacity
can leave a row no entry corresponds to: an unknown phase, a payload that is not JSON,
and in SQLite (whose columns take any type) a non-integer `ref_seq` or text that is not
UTF-8. The in-memory journal stores entries, never rows: nothing is parsed when it is
read, so it has no unreadable row to report.
"""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from sagacity.audit import Problem, chain_heads, export_jsonl, verify
from sagacity.errors import JournalError
from sagacity.journal import InMemoryJournal, Phase, SideEffectJournal, SqliteJournal
from sagacity.journal._rows import UnreadableRowError
from tests._postgres import admin_connection, postgres_url_for
from tests.audit._tamper import MemoryTamper

Edit = Callable[[str, int, str], None]
"""Run `UPDATE … SET <column expression> WHERE saga_id = ? AND seq = ?` on the journal."""


class StoredJournal:
    """A SQL journal with three sagas, and raw SQL access to its table past the triggers.

    `broken` has 5 entries, `forged` 4 and `clean` 3.
    """

    def __init__(
        self, journal: SideEffectJournal, edit: Edit, delete: Callable[[str, int], None]
    ) -> None:
        self.journal = journal
        self.set = edit
        """Set columns of one row to SQL expressions: `set("broken", 3, "phase = 'BOGUS'")`."""
        self.delete = delete
        """Delete one row."""
        for n in range(5):
            journal.append(
                "broken", Phase.INTENT, tool_name="t", call_id=f"t#{n}", payload={"n": n}
            )
        for n in range(4):
            journal.append("forged", Phase.EXECUTED, ref_seq=n or None, payload=[n, 0.5])
        for n in range(3):
            journal.append("clean", Phase.INTENT, payload={"n": n})


def _sqlite(tmp_path: Path) -> Iterator[StoredJournal]:
    journal = SqliteJournal(tmp_path / "journal.db")
    conn = sqlite3.connect(journal.path, isolation_level=None)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()

    def unguarded(sql: str, params: tuple[object, ...]) -> None:
        # Dropped for the edit and put back after it: the missing-trigger check sees nothing.
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        try:
            conn.execute(sql, params)
        finally:
            for _, create in triggers:
                conn.execute(create)

    def edit(saga_id: str, seq: int, assignment: str) -> None:
        unguarded(
            f"UPDATE sagacity_journal SET {assignment} WHERE saga_id = ? AND seq = ?",
            (saga_id, seq),
        )

    def delete(saga_id: str, seq: int) -> None:
        unguarded("DELETE FROM sagacity_journal WHERE saga_id = ? AND seq = ?", (saga_id, seq))

    try:
        yield StoredJournal(journal, edit, delete)
    finally:
        conn.close()
        journal.close()


def _postgres(request: pytest.FixtureRequest) -> Iterator[StoredJournal]:
    for url in postgres_url_for(request):  # one URL; its schema is dropped afterwards
        yield from _postgres_at(url)


def _postgres_at(url: str) -> Iterator[StoredJournal]:
    from sagacity.journal.postgres import PostgresJournal

    table = f'"{dict(parse_qsl(urlsplit(url).query))["schema"]}".sagacity_journal'
    journal = PostgresJournal(url)
    with admin_connection() as admin:
        trigger = "TRIGGER sagacity_journal_no_update_delete"

        def unguarded(sql: str, params: tuple[object, ...]) -> None:
            # Disabled for the edit and enabled after it: the missing-trigger check sees nothing.
            admin.execute(f"ALTER TABLE {table} DISABLE {trigger}".encode())
            try:
                admin.execute(sql.encode(), params)
            finally:
                admin.execute(f"ALTER TABLE {table} ENABLE {trigger}".encode())

        def edit(saga_id: str, seq: int, assignment: str) -> None:
            unguarded(
                f"UPDATE {table} SET {assignment} WHERE saga_id = %s AND seq = %s",
                (saga_id, seq),
            )

        def delete(saga_id: str, seq: int) -> None:
            unguarded(f"DELETE FROM {table} WHERE saga_id = %s AND seq = %s", (saga_id, seq))

        try:
            yield StoredJournal(journal, edit, delete)
        finally:
            journal.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoredJournal]:
    """The three sagas in SQLite, then in PostgreSQL (a schema of its own)."""
    if request.param == "sqlite":
        yield from _sqlite(tmp_path)
    else:
        yield from _postgres(request)


@pytest.fixture
def sqlite_stored(tmp_path: Path) -> Iterator[StoredJournal]:
    """The three sagas in SQLite, whose columns hold values of any type."""
    yield from _sqlite(tmp_path)


UNREADABLE = [
    pytest.param("phase = 'BOGUS'", "phase 'BOGUS' is not a phase", id="phase"),
    pytest.param("payload = 'not json'", "payload 'not json' is not JSON: ", id="payload"),
    pytest.param("payload = '{\"n\":'", "payload '{\"n\":' is not JSON: ", id="cut-payload"),
]


class TestVerify:
    @pytest.mark.parametrize(("assignment", "why"), UNREADABLE)
    def test_an_unreadable_row_is_its_sagas_problem(
        self, stored: StoredJournal, assignment: str, why: str
    ) -> None:
        """The row is reported at its saga and seq; the other sagas are verified as usual.

        `forged` keeps its own hash mismatch at seq 2, `clean` is counted and verifies;
        the entries after the unreadable row are not read.
        """
        stored.set("broken", 3, assignment)
        stored.set("forged", 2, "payload = '[1,0.75]'")
        report = verify(stored.journal)
        assert [(p.saga_id, p.seq) for p in report.problems] == [("broken", 3), ("forged", 2)]
        broken, forged = report.problems
        assert broken.reason.startswith(f"unreadable row: {why}")
        assert forged.reason.startswith("hash mismatch: ")
        assert report.sagas == 3
        assert report.entries == 3 + 4 + 3  # broken: seqs 1, 2 and the unreadable 3
        assert not report.ok

    def test_only_the_unreadable_saga_is_broken(self, stored: StoredJournal) -> None:
        """With no other tampering, the one unreadable row is the report's only problem."""
        stored.set("broken", 5, "phase = 'BOGUS'")
        report = verify(stored.journal)
        assert report.problems == [
            Problem(saga_id="broken", seq=5, reason="unreadable row: phase 'BOGUS' is not a phase")
        ]
        assert (report.sagas, report.entries) == (3, 12)
        assert verify(stored.journal, "clean").ok
        assert verify(stored.journal, "broken").problems == report.problems

    def test_an_earlier_problem_comes_first(self, stored: StoredJournal) -> None:
        """A hash mismatch before the unreadable row is the saga's first bad seq."""
        stored.set("broken", 2, "payload = '{\"n\":100}'")
        stored.set("broken", 4, "phase = 'BOGUS'")
        (problem,) = verify(stored.journal).problems
        assert (problem.saga_id, problem.seq) == ("broken", 2)
        assert problem.reason.startswith("hash mismatch: ")

    def test_a_gap_before_the_unreadable_row(self, stored: StoredJournal) -> None:
        """A deleted seq just before the row: the problem is at the missing seq."""
        stored.delete("broken", 3)
        stored.set("broken", 4, "payload = 'not json'")
        (problem,) = verify(stored.journal).problems
        assert (problem.saga_id, problem.seq) == ("broken", 3)
        assert problem.reason.startswith(
            "unreadable row stored at seq 4 where 3 was expected: payload 'not json' is not JSON"
        )

    def test_a_recorded_head_does_not_hide_the_row(self, stored: StoredJournal) -> None:
        """Against heads recorded before the edit, the row is reported, not a truncation."""
        heads = chain_heads(stored.journal)
        stored.set("broken", 3, "phase = 'BOGUS'")
        report = verify(stored.journal, heads=heads)
        assert report.problems == [
            Problem(saga_id="broken", seq=3, reason="unreadable row: phase 'BOGUS' is not a phase")
        ]
        assert report.sagas == 3


class TestReading:
    def test_entries_raise_a_journal_error_naming_the_row(self, stored: StoredJournal) -> None:
        """`entries` and `list_entries` raise a JournalError naming the saga and seq.

        It carries the entries read before the row; the other sagas read as usual.
        """
        before = stored.journal.entries("broken")
        stored.set("broken", 3, "phase = 'BOGUS'")
        message = r"^saga 'broken' seq 3: the stored row cannot be read \(phase 'BOGUS' is not"
        with pytest.raises(JournalError, match=message) as raised:
            stored.journal.entries("broken")
        assert isinstance(raised.value, UnreadableRowError)
        assert (raised.value.saga_id, raised.value.seq) == ("broken", 3)
        assert raised.value.readable == tuple(before[:2])
        with pytest.raises(JournalError, match=message):
            stored.journal.list_entries(after=("broken", 1))
        assert len(stored.journal.entries("clean")) == 3
        assert len(stored.journal.list_entries(after=("broken", 5))) == 7

    def test_a_payload_that_is_not_json(self, stored: StoredJournal) -> None:
        """A payload that is not JSON is a JournalError, not the JSON parser's error."""
        stored.set("forged", 4, "payload = 'nope'")
        with pytest.raises(
            JournalError, match=r"^saga 'forged' seq 4: the stored row cannot be read \(payload"
        ):
            stored.journal.entries("forged")

    def test_export_fails_naming_the_row(self, stored: StoredJournal) -> None:
        """An export stops at the row with a JournalError naming it: it has no entry to write."""
        stored.set("broken", 3, "phase = 'BOGUS'")
        with pytest.raises(JournalError, match=r"^saga 'broken' seq 3: "):
            export_jsonl(stored.journal, io.StringIO())
        with pytest.raises(JournalError, match=r"^saga 'broken' seq 3: "):
            export_jsonl(stored.journal, io.StringIO(), "broken")
        assert export_jsonl(stored.journal, io.StringIO(), "clean") == 3

    def test_the_error_crosses_a_process(self, stored: StoredJournal) -> None:
        """Pickled and back, the error keeps its saga, seq, reason and entries."""
        import pickle

        stored.set("broken", 2, "phase = 'BOGUS'")
        with pytest.raises(UnreadableRowError) as raised:
            stored.journal.entries("broken")
        copy = pickle.loads(pickle.dumps(raised.value))
        assert str(copy) == str(raised.value)
        assert (copy.saga_id, copy.seq, copy.reason) == ("broken", 2, raised.value.reason)
        assert copy.readable == raised.value.readable


class TestSqliteColumns:
    @pytest.mark.parametrize(
        ("assignment", "reason"),
        [
            pytest.param(
                "ref_seq = 'x'", "unreadable row: ref_seq 'x' is not an integer", id="ref_seq"
            ),
            pytest.param(
                "ref_seq = 1.5", "unreadable row: ref_seq 1.5 is not an integer", id="real-ref_seq"
            ),
            pytest.param(
                "payload = CAST(x'ff' AS TEXT)",
                "unreadable row: payload holds b'\\xff', not text",
                id="not-utf8",
            ),
            pytest.param(
                "payload = x'7b7d'", "unreadable row: payload holds b'{}', not text", id="blob"
            ),
            pytest.param(
                "call_id = x'61'", "unreadable row: call_id holds b'a', not text", id="blob-id"
            ),
            pytest.param(
                "recorded_at = CAST(x'c328' AS TEXT)",
                "unreadable row: recorded_at holds b'\\xc3(', not text",
                id="not-utf8-time",
            ),
        ],
    )
    def test_a_column_of_the_wrong_type(
        self, sqlite_stored: StoredJournal, assignment: str, reason: str
    ) -> None:
        """SQLite stores any type in any column: each such row is named by saga and seq."""
        sqlite_stored.set("broken", 4, assignment)
        sqlite_stored.set("forged", 3, "hash = '" + "0" * 64 + "'")
        report = verify(sqlite_stored.journal)
        assert report.problems[0] == Problem(saga_id="broken", seq=4, reason=reason)
        assert [(p.saga_id, p.seq) for p in report.problems] == [("broken", 4), ("forged", 3)]
        assert (report.sagas, report.entries) == (3, 4 + 4 + 3)
        with pytest.raises(JournalError, match=r"^saga 'broken' seq 4: the stored row cannot"):
            sqlite_stored.journal.entries("broken")

    def test_a_non_integer_seq_is_a_gap(self, sqlite_stored: StoredJournal) -> None:
        """A seq made text sorts after the integers: its saga has a gap where it was."""
        sqlite_stored.set("broken", 2, "seq = 'two'")
        report = verify(sqlite_stored.journal)
        assert report.problems == [
            Problem(saga_id="broken", seq=2, reason="gap: seq 2 is missing (next is 3)")
        ]
        assert (report.sagas, report.entries) == (3, 12)

    def test_a_saga_id_stored_as_a_blob(self, sqlite_stored: StoredJournal) -> None:
        """A saga id made a BLOB is another saga to SQLite: both are reported, no crash."""
        sqlite_stored.set("broken", 2, "saga_id = CAST('broken' AS BLOB)")
        report = verify(sqlite_stored.journal)
        assert [(p.saga_id, p.seq) for p in report.problems] == [
            ("broken", 2),
            (b"broken", 1),
        ]
        assert report.problems[0].reason == "gap: seq 2 is missing (next is 3)"
        assert report.problems[1].reason == (
            "unreadable row stored at seq 2 where 1 was expected: saga_id holds b'broken', not text"
        )
        assert report.sagas == 4


class TestMemory:
    def test_an_entry_changed_in_place_is_a_problem(self) -> None:
        """In memory, an entry whose phase is no Phase can only be planted in its storage.

        It is reported as unhashable at its seq; the other sagas verify.
        """
        journal = InMemoryJournal()
        for saga_id in ("a", "b"):
            for n in range(3):
                journal.append(saga_id, Phase.INTENT, payload={"n": n})
        MemoryTamper(journal).set_field("a", 2, "phase", "BOGUS")
        report = verify(journal)
        assert [(p.saga_id, p.seq) for p in report.problems] == [("a", 2)]
        assert report.problems[0].reason.startswith("unhashable entry: ")
        assert (report.sagas, report.entries) == (2, 6)
