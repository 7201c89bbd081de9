"""The contract every journal backend keeps, run against each one (`store_url`)."""

from __future__ import annotations

import datetime
import itertools
import pickle
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import (
    AppendConflictError,
    ApprovalRequest,
    ApprovalStore,
    JournalError,
    Phase,
    Sagacity,
    SchemaVersionError,
    SerializationError,
    SideEffectJournal,
    verify,
)
from sagacity.journal import GENESIS_HASH, JournalEntry, canonical_bytes, sha256_hex
from tests.journal._awaited import EDGES, driven

RFC3339_UTC_MICROS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

PAYLOADS: list[Any] = [
    None,
    {"input": {"sku": "SKU-1", "qty": 2}, "reversibility": "COMPENSATABLE"},
    {"floats": [0.1, 1e-7, 1e21, 1.7976931348623157e308, 5e-324, -2.5, 333333333.3333333]},
    {"unicode": 'Grüße, 東京, emoji 😀, rtl עברית, controls \x00\x1f\n\t, quote " \\'},
    {"😀": 1, "\ufb33": 2, "é": 3, "": 4, "a": {"b": {"c": [1, [2, [3, {"d": None}]]]}}},
    ["a list", True, False, None, -(2**53) + 1, 2**53 - 1],
    {"big doubles": [2.0**53, -(2.0**60), 1e19, 123456789012345680000.0, 1e21]},
    "just a string",
    42,
]


@pytest.fixture
def sagacity(store_url: str) -> Iterator[Sagacity]:
    """A Sagacity on each backend."""
    instance = Sagacity.from_url(store_url)
    yield instance
    instance.close()


@pytest.fixture(params=EDGES)
def journal(sagacity: Sagacity, request: pytest.FixtureRequest) -> Iterator[SideEffectJournal]:
    """The journal of each backend, appended to directly, awaited, or in a batch."""
    yield from driven(sagacity.journal, request.param)


def fill(journal: SideEffectJournal, saga_id: str, count: int) -> list[Any]:
    return [
        journal.append(
            saga_id,
            Phase.INTENT if seq % 2 else Phase.EXECUTED,
            tool_name="reserve",
            call_id=f"reserve#{(seq + 1) // 2}",
            ref_seq=None if seq % 2 else seq - 1,
            payload={"n": seq},
        )
        for seq in range(1, count + 1)
    ]


class TestAppend:
    def test_seq_counts_from_one_without_gaps_and_links_each_entry(
        self, journal: SideEffectJournal
    ) -> None:
        """Append assigns seq 1..n and chains each prev_hash to the previous entry's hash."""
        appended = fill(journal, "order-1", 7)
        assert [e.seq for e in appended] == [1, 2, 3, 4, 5, 6, 7]
        assert appended[0].prev_hash == GENESIS_HASH
        for before, after in itertools.pairwise(appended):
            assert after.prev_hash == before.hash
        assert len({e.hash for e in appended}) == 7

    def test_the_returned_entry_is_what_was_asked(self, journal: SideEffectJournal) -> None:
        """Fields come back as given; recorded_at is RFC 3339 UTC with microseconds."""
        entry = journal.append(
            "order-1",
            Phase.EXECUTED,
            tool_name="charge",
            call_id="call_abc",
            ref_seq=7,
            payload={"result": "ch_1"},
        )
        assert (entry.saga_id, entry.seq, entry.phase) == ("order-1", 1, Phase.EXECUTED)
        assert (entry.tool_name, entry.call_id, entry.ref_seq) == ("charge", "call_abc", 7)
        assert entry.payload == {"result": "ch_1"}
        assert RFC3339_UTC_MICROS.match(entry.recorded_at)
        now = datetime.datetime.now(datetime.UTC)
        recorded = datetime.datetime.fromisoformat(entry.recorded_at.replace("Z", "+00:00"))
        assert abs((now - recorded).total_seconds()) < 60

    def test_the_hash_is_sha256_of_the_canonical_entry(self, journal: SideEffectJournal) -> None:
        """Hash = sha256(JCS of the nine hashed members), computed independently here."""
        entry = journal.append("order-1", Phase.INTENT, tool_name="t", payload={"b": 1.5, "a": 1})
        assert entry.hash == sha256_hex(
            {
                "saga_id": "order-1",
                "seq": 1,
                "phase": "INTENT",
                "tool_name": "t",
                "call_id": None,
                "ref_seq": None,
                "payload": {"a": 1, "b": 1.5},
                "recorded_at": entry.recorded_at,
                "prev_hash": GENESIS_HASH,
            }
        )

    def test_a_payload_without_canonical_form_appends_nothing(
        self, journal: SideEffectJournal
    ) -> None:
        """A refused payload raises SerializationError and takes no seq."""
        journal.append("order-1", Phase.INTENT)
        with pytest.raises(SerializationError):
            journal.append("order-1", Phase.EXECUTED, payload={"amount": float("nan")})
        with pytest.raises(SerializationError):
            journal.append("order-1", Phase.EXECUTED, payload={"too_big": 2**60})
        assert journal.append("order-1", Phase.EXECUTED).seq == 2
        assert [e.seq for e in journal.entries("order-1")] == [1, 2]

    def test_threads_appending_to_one_saga(self, journal: SideEffectJournal) -> None:
        """Concurrent appends from 8 threads: seq 1..800, no gap, no duplicate, one chain."""

        def append_many(worker: int) -> None:
            for n in range(100):
                journal.append("shared", Phase.INTENT, payload={"worker": worker, "n": n})

        threads = [threading.Thread(target=append_many, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        entries = journal.entries("shared")
        assert [e.seq for e in entries] == list(range(1, 801))
        assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(entries))
        written = sorted((e.payload["worker"], e.payload["n"]) for e in entries)
        assert written == [(w, n) for w in range(8) for n in range(100)]


def race(
    journals: list[SideEffectJournal], saga_id: str, expected_seq: int, per_journal: int
) -> tuple[list[JournalEntry], list[AppendConflictError]]:
    """Append from `per_journal` threads on each journal at once, all with `expected_seq`."""
    workers = [(journal, n) for journal in journals for n in range(per_journal)]
    barrier = threading.Barrier(len(workers))
    won: list[JournalEntry] = []
    lost: list[AppendConflictError] = []

    def append(journal: SideEffectJournal, worker: int) -> None:
        barrier.wait()
        try:
            won.append(
                journal.append(
                    saga_id,
                    Phase.INTENT,
                    tool_name="send_wire_transfer",
                    call_id="send_wire_transfer#1",
                    payload={"worker": worker},
                    expected_seq=expected_seq,
                )
            )
        except AppendConflictError as error:
            lost.append(error)

    threads = [threading.Thread(target=append, args=worker) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won, lost


class TestConditionalAppend:
    def test_the_expected_seq_places_the_entry_right_after_it(
        self, journal: SideEffectJournal
    ) -> None:
        """expected_seq=n appends seq n+1 chained to seq n; 0 starts a saga at the genesis."""
        first = journal.append("order-1", Phase.INTENT, tool_name="t", expected_seq=0)
        second = journal.append("order-1", Phase.EXECUTED, ref_seq=1, expected_seq=1)
        third = journal.append("order-1", Phase.INTENT)
        fourth = journal.append("order-1", Phase.EXECUTED, payload={"r": 1}, expected_seq=3)
        assert [e.seq for e in (first, second, third, fourth)] == [1, 2, 3, 4]
        assert (first.prev_hash, second.prev_hash) == (GENESIS_HASH, first.hash)
        assert (third.prev_hash, fourth.prev_hash) == (second.hash, third.hash)
        assert journal.entries("order-1") == [first, second, third, fourth]
        assert all(e.computed_hash() == e.hash for e in journal.entries("order-1"))

    @pytest.mark.parametrize("wrong", [0, 1, 3, 9, -1])
    def test_a_wrong_expected_seq_writes_nothing(
        self, journal: SideEffectJournal, wrong: int
    ) -> None:
        """A last seq other than expected raises AppendConflictError naming both seqs.

        Nothing is written, and the saga's next appends, conditional or not, go on from
        its real head.
        """
        written = fill(journal, "order-1", 2)
        with pytest.raises(AppendConflictError) as caught:
            journal.append("order-1", Phase.INTENT, payload="late", expected_seq=wrong)
        error = caught.value
        assert (error.saga_id, error.expected_seq, error.found_seq) == ("order-1", wrong, 2)
        assert str(error).startswith(
            f"saga 'order-1': the append expected seq {wrong} as the saga's last entry, "
            "but found seq 2"
        )
        assert journal.entries("order-1") == written
        right = journal.append("order-1", Phase.ENDED, expected_seq=2)
        assert (right.seq, right.prev_hash) == (3, written[1].hash)
        assert journal.append("order-1", Phase.ENDED).seq == 4
        assert verify(journal, "order-1").ok

    def test_a_saga_with_no_entries_has_last_seq_zero(self, journal: SideEffectJournal) -> None:
        """Expecting seq 1 of an unknown saga conflicts (found 0) and does not create it."""
        with pytest.raises(AppendConflictError, match=r"expected seq 1 .* found seq 0"):
            journal.append("order-9", Phase.INTENT, expected_seq=1)
        assert journal.entries("order-9") == []
        assert journal.list_sagas() == []
        assert journal.append("order-9", Phase.INTENT, expected_seq=0).seq == 1

    def test_the_conflict_is_a_journal_error_that_survives_pickling(
        self, journal: SideEffectJournal
    ) -> None:
        """It is a JournalError with status 409, and crosses a process boundary intact."""
        journal.append("order-1", Phase.INTENT)
        with pytest.raises(AppendConflictError) as caught:
            journal.append("order-1", Phase.INTENT, expected_seq=0)
        error = caught.value
        assert isinstance(error, JournalError)
        assert error.status_code == 409
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy)) == (AppendConflictError, str(error))
        assert (copy.saga_id, copy.expected_seq, copy.found_seq) == ("order-1", 0, 1)

    @pytest.mark.parametrize("start", [0, 3], ids=["new-saga", "after-3"])
    def test_threads_racing_with_one_expected_seq(
        self, journal: SideEffectJournal, start: int
    ) -> None:
        """Of 8 threads appending with the same expected_seq, exactly one wins, each round.

        The others see the winner's seq; the chain has one entry per round and verifies.
        """
        fill(journal, "wire-1", start)
        for last in range(start, start + 5):
            won, lost = race([journal], "wire-1", last, per_journal=8)
            assert [e.seq for e in won] == [last + 1]
            assert [(e.expected_seq, e.found_seq) for e in lost] == [(last, last + 1)] * 7
            assert journal.entries("wire-1")[-1] == won[0]
        entries = journal.entries("wire-1")
        assert [e.seq for e in entries] == list(range(1, start + 6))
        assert verify(journal, "wire-1").ok


@pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
class TestConditionalAppendAcrossJournals:
    """Two journals on one database, as two processes have, each with its own cached head."""

    @pytest.fixture
    def other(self, store_url: str) -> Iterator[SideEffectJournal]:
        """A second journal on the same database."""
        instance = Sagacity.from_url(store_url)
        yield instance.journal
        instance.close()

    def test_an_entry_written_by_the_other_journal_is_chained_to(
        self, journal: SideEffectJournal, other: SideEffectJournal
    ) -> None:
        """A journal whose cached head is stale appends after the real head, not its own.

        And expecting the seq it cached, now stale, conflicts without writing.
        """
        mine = journal.append("order-1", Phase.INTENT)
        theirs = other.append("order-1", Phase.EXECUTED, ref_seq=1, expected_seq=1)
        with pytest.raises(AppendConflictError) as caught:
            journal.append("order-1", Phase.EXECUTED, ref_seq=1, expected_seq=1)
        assert (caught.value.expected_seq, caught.value.found_seq) == (1, 2)
        entry = journal.append("order-1", Phase.ENDED, expected_seq=2)
        assert (entry.seq, entry.prev_hash) == (3, theirs.hash)
        assert other.entries("order-1") == [mine, theirs, entry]
        assert verify(other, "order-1").ok

    @pytest.mark.parametrize("known", ["both", "one", "none"])
    def test_two_journals_racing_with_one_expected_seq(
        self, store_url: str, journal: SideEffectJournal, other: SideEffectJournal, known: str
    ) -> None:
        """4 threads on each journal race with the same expected_seq: exactly one wins.

        Before each round a third journal appends, so the racing journals' cached heads
        are stale unless they read the saga again: with both heads known (one INSERT
        each, the key decides), one, or none (the head read first), each round has one
        winner, the losers see its seq, and the chain verifies.
        """
        third = Sagacity.from_url(store_url)
        winners: list[JournalEntry] = []
        try:
            for round_ in range(4):
                last = third.journal.append("wire-1", Phase.ENDED, payload=round_).seq
                if known in ("both", "one"):
                    assert journal.entries("wire-1")[-1].seq == last
                if known == "both":
                    assert other.entries("wire-1")[-1].seq == last
                won, lost = race([journal, other], "wire-1", last, per_journal=4)
                assert [e.seq for e in won] == [last + 1]
                assert [(e.expected_seq, e.found_seq) for e in lost] == [(last, last + 1)] * 7
                winners += won
            entries = third.journal.entries("wire-1")
        finally:
            third.close()
        assert [e.seq for e in entries] == list(range(1, 9))
        assert entries[1::2] == winners
        assert verify(journal, "wire-1").ok


class TestReadBack:
    @pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
    def test_entries_come_back_exactly_as_appended(
        self, journal: SideEffectJournal, payload: Any
    ) -> None:
        """Read back, an entry equals the one append returned, payload encoding included."""
        appended = [
            journal.append("order-1", Phase.INTENT, tool_name="t", call_id="t#1"),
            journal.append(
                "order-1", Phase.EXECUTED, tool_name="t", call_id="t#1", ref_seq=1, payload=payload
            ),
        ]
        read = journal.entries("order-1")
        assert read == appended
        assert [canonical_bytes(e.payload) for e in read] == [
            canonical_bytes(e.payload) for e in appended
        ]
        assert all(e.computed_hash() == e.hash for e in read)

    def test_the_caller_changing_its_payload_later_changes_nothing(
        self, journal: SideEffectJournal
    ) -> None:
        """What was appended is what is read back, even if the caller's dict changes after."""
        payload: dict[str, Any] = {"input": {"items": ["a"]}}
        journal.append("order-1", Phase.INTENT, payload=payload)
        payload["input"]["items"].append("b")
        payload["extra"] = True
        (entry,) = journal.entries("order-1")
        assert entry.payload == {"input": {"items": ["a"]}}
        assert entry.computed_hash() == entry.hash

    def test_an_unknown_saga_has_no_entries(self, journal: SideEffectJournal) -> None:
        """entries() of a saga never appended to is empty, not an error."""
        assert journal.entries("nobody") == []


class TestListing:
    def test_list_sagas_pages_in_ascending_order(self, journal: SideEffectJournal) -> None:
        """list_sagas returns ids in order, `limit` at a time, strictly after `after`."""
        for saga_id in ["c", "a", "e", "b", "d"]:
            journal.append(saga_id, Phase.INTENT)
            journal.append(saga_id, Phase.EXECUTED, ref_seq=1)
        assert journal.list_sagas() == ["a", "b", "c", "d", "e"]
        assert journal.list_sagas(limit=2) == ["a", "b"]
        assert journal.list_sagas(after="b", limit=2) == ["c", "d"]
        assert journal.list_sagas(after="d", limit=2) == ["e"]
        assert journal.list_sagas(after="e") == []

    def test_every_saga_id_is_listed(self, journal: SideEffectJournal) -> None:
        """Ids with spaces and beyond ASCII sort and page like the rest, from any position."""
        ids = ["!", "a", "a b", "é", "東京", "😀"]
        for saga_id in reversed(ids):
            journal.append(saga_id, Phase.INTENT)
        assert journal.list_sagas() == ids
        assert journal.list_sagas(after="", limit=2) == ["!", "a"]
        assert journal.list_sagas(after="a a", limit=2) == ["a b", "é"]
        assert [(e.saga_id, e.seq) for e in journal.list_entries(limit=2)] == [("!", 1), ("a", 1)]

    def test_list_entries_pages_by_saga_then_seq(self, journal: SideEffectJournal) -> None:
        """list_entries walks (saga_id, seq) in order; a page may end inside a saga."""
        fill(journal, "b", 3)
        fill(journal, "a", 2)
        fill(journal, "c", 1)
        everything = journal.list_entries()
        assert [(e.saga_id, e.seq) for e in everything] == [
            ("a", 1),
            ("a", 2),
            ("b", 1),
            ("b", 2),
            ("b", 3),
            ("c", 1),
        ]
        pages = []
        after = None
        while True:
            page = journal.list_entries(after=after, limit=4)
            pages.append([(e.saga_id, e.seq) for e in page])
            if len(page) < 4:
                break
            after = (page[-1].saga_id, page[-1].seq)
        assert pages == [[("a", 1), ("a", 2), ("b", 1), ("b", 2)], [("b", 3), ("c", 1)]]
        assert journal.list_entries(after=("b", 1), limit=2) == everything[3:5]
        assert journal.list_entries(after=("c", 1)) == []

    def test_separate_sagas_are_independent_chains(self, journal: SideEffectJournal) -> None:
        """Interleaved appends: each saga counts from 1 and starts at the genesis hash."""
        for n in range(3):
            journal.append("left", Phase.INTENT, payload=n)
            journal.append("right", Phase.INTENT, payload=n)
        for saga_id in ("left", "right"):
            entries = journal.entries(saga_id)
            assert [e.seq for e in entries] == [1, 2, 3]
            assert [e.payload for e in entries] == [0, 1, 2]
            assert entries[0].prev_hash == GENESIS_HASH
            assert {e.saga_id for e in entries} == {saga_id}
        assert journal.entries("left")[0].hash != journal.entries("right")[0].hash


def request(
    request_id: str, saga_id: str, seq: int, minute: int, **changes: Any
) -> ApprovalRequest:
    fields: dict[str, Any] = {
        "request_id": request_id,
        "saga_id": saga_id,
        "seq": seq,
        "call_id": f"wire#{seq}",
        "tool_name": "send_wire_transfer",
        "input": {"amount": "1200.00", "to": "DE89 3704 0044 0532 0130 00", "memo": "Grüße 😀"},
        "input_sha256": "ab" * 32,
        "reason": "send_wire_transfer is IRREVERSIBLE",
        "requested_at": datetime.datetime(2026, 1, 1, 9, minute, tzinfo=datetime.UTC),
        "expires_at": None,
    }
    fields.update(changes)
    return ApprovalRequest(**fields)


class TestApprovalStore:
    @pytest.fixture
    def approvals(self, sagacity: Sagacity) -> ApprovalStore:
        return sagacity.approvals

    def test_save_get_round_trip(self, approvals: ApprovalStore) -> None:
        """A saved request comes back field for field, expiry and nested input included."""
        expiring = request(
            "r1",
            "order-1",
            3,
            0,
            expires_at=datetime.datetime(2026, 1, 2, 9, 0, 0, 123456, tzinfo=datetime.UTC),
            input={"nested": {"list": [1, 2.5, None, True, 2.0**60]}, "text": "東京"},
        )
        approvals.save(expiring)
        approvals.save(request("r2", "order-1", 5, 1))
        assert approvals.get("r1") == expiring
        assert approvals.get("r2") == request("r2", "order-1", 5, 1)
        assert approvals.get("missing") is None

    def test_pending_lists_oldest_first_per_saga_or_all(self, approvals: ApprovalStore) -> None:
        """pending() is ordered by request time; pending(saga) keeps that saga's only."""
        approvals.save(request("late", "order-2", 1, 30))
        approvals.save(request("early", "order-1", 2, 10))
        approvals.save(request("middle", "order-1", 4, 20))
        assert [r.request_id for r in approvals.pending()] == ["early", "middle", "late"]
        assert [r.request_id for r in approvals.pending("order-1")] == ["early", "middle"]
        assert approvals.pending("order-3") == []

    def test_delete_consumes_and_is_idempotent(self, approvals: ApprovalStore) -> None:
        """A deleted request is gone; deleting it again is not an error."""
        approvals.save(request("r1", "order-1", 1, 0))
        approvals.save(request("r2", "order-1", 2, 1))
        approvals.delete("r1")
        approvals.delete("r1")
        assert approvals.get("r1") is None
        assert [r.request_id for r in approvals.pending("order-1")] == ["r2"]


class TestSchemaVersion:
    def test_a_newer_sqlite_schema_refuses_to_open(self, tmp_path: Path) -> None:
        """A database written by a newer sagacity is refused with a clear error, unchanged."""
        path = tmp_path / "newer.db"
        Sagacity.from_url(f"sqlite:///{path}").close()
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE sagacity_meta SET value = '99' WHERE key = 'schema_version'")
        conn.close()
        with pytest.raises(SchemaVersionError, match=r"schema version 99.*upgrade sagacity"):
            Sagacity.from_url(f"sqlite:///{path}")
        with sqlite3.connect(path) as conn:
            (version,) = conn.execute(
                "SELECT value FROM sagacity_meta WHERE key = 'schema_version'"
            ).fetchone()
        conn.close()
        assert version == "99"

    def test_the_current_schema_reopens(self, tmp_path: Path) -> None:
        """Reopening a database of the current version keeps its journal."""
        url = f"sqlite:///{tmp_path / 'same.db'}"
        first = Sagacity.from_url(url)
        first.journal.append("order-1", Phase.INTENT)
        first.close()
        second = Sagacity.from_url(url)
        assert [e.seq for e in second.journal.entries("order-1")] == [1]
        second.close()
