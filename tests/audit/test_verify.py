"""`sagacity.audit.verify`: an untouched journal verifies; any tampering is named exactly."""

from __future__ import annotations

import dataclasses
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from sagacity.audit import (
    ChainHead,
    Problem,
    chain_heads,
    export_jsonl,
    read_jsonl,
    verify,
    verify_entries,
)
from sagacity.journal import (
    GENESIS_HASH,
    InMemoryJournal,
    JournalEntry,
    Phase,
    SideEffectJournal,
    SqliteJournal,
    canonical_bytes,
)
from sagacity.journal._entry import seal
from tests.audit._tamper import FIELDS, MemoryTamper, SqliteTamper, Tamper
from tests.journal.strategies import json_values, names, phases

saga_ids = st.text(
    st.one_of(st.characters(min_codepoint=0x30, max_codepoint=0x7A), st.sampled_from("éΩ東😀")),
    min_size=1,
    max_size=6,
)
entry_specs = st.fixed_dictionaries(
    {
        "phase": phases,
        "tool_name": names,
        "call_id": names,
        "ref_seq": st.one_of(st.none(), st.integers(min_value=1, max_value=9)),
        "payload": json_values(),
    }
)
sagas = st.dictionaries(saga_ids, st.lists(entry_specs, min_size=1, max_size=5), max_size=3)
hex_digests = st.text("0123456789abcdef", min_size=64, max_size=64)


def build(journal: SideEffectJournal, specs: dict[str, list[dict[str, Any]]]) -> None:
    """Append the sagas' entries round-robin, so that their appends interleave."""
    pending = {saga_id: list(entries) for saga_id, entries in specs.items()}
    while any(pending.values()):
        for saga_id, entries in pending.items():
            if entries:
                journal.append(saga_id, **entries.pop(0))


def snapshot(journal: SideEffectJournal) -> dict[str, list[JournalEntry]]:
    return {saga_id: journal.entries(saga_id) for saga_id in journal.list_sagas()}


def canonical(entry: JournalEntry) -> bytes:
    return canonical_bytes(entry.to_json())


def first_difference(now: list[JournalEntry], before: list[JournalEntry]) -> tuple[int, bool]:
    """Return the first seq where a stored chain differs from what was written.

    And whether the difference is only entries missing from the end (a tail truncation).
    """
    for index, (current, original) in enumerate(zip(now, before, strict=False)):
        if canonical(current) != canonical(original):
            return index + 1, False
    if len(now) == len(before):
        return 0, False
    return min(len(now), len(before)) + 1, len(now) < len(before)


def expected_problems(
    journal: SideEffectJournal, before: dict[str, list[JournalEntry]], *, with_heads: bool
) -> set[tuple[str, int]]:
    """What an exact verifier must report: per saga, the first seq that differs."""
    expected = set()
    for saga_id in set(before) | set(journal.list_sagas()):
        seq, truncated = first_difference(journal.entries(saga_id), before.get(saga_id, []))
        if seq and (with_heads or not truncated):
            expected.add((saga_id, seq))
    return expected


def reported(problems: list[Problem]) -> set[tuple[str, int]]:
    return {(problem.saga_id, problem.seq) for problem in problems}


@contextmanager
def sqlite_journal() -> Iterator[SqliteJournal]:
    with tempfile.TemporaryDirectory() as folder:
        journal = SqliteJournal(Path(folder) / "journal.db")
        try:
            yield journal
        finally:
            journal.close()


@contextmanager
def journal_and_tamper(backend: str) -> Iterator[tuple[SideEffectJournal, Tamper]]:
    if backend == "memory":
        journal = InMemoryJournal()
        yield journal, MemoryTamper(journal)
        return
    with sqlite_journal() as sqlite:
        tamper = SqliteTamper(sqlite)
        try:
            yield sqlite, tamper
        finally:
            tamper.close()


def other_value(
    data: st.DataObject, field: str, entry: JournalEntry, saga_ids_now: list[str]
) -> Any:
    """Draw a value for `field` whose canonical form differs from the entry's."""
    current = getattr(entry, field)
    strategy: st.SearchStrategy[Any] = {
        "saga_id": st.one_of(st.sampled_from(saga_ids_now), saga_ids),
        "seq": st.integers(min_value=-3, max_value=12),
        "phase": phases,
        "tool_name": names,
        "call_id": names,
        "ref_seq": st.one_of(st.none(), st.integers(min_value=-3, max_value=12)),
        "payload": json_values(),
        "recorded_at": st.sampled_from(
            ["2026-01-01T00:00:00.000000Z", "1999-12-31T23:59:59.999999Z", entry.recorded_at + " "]
        ),
        "prev_hash": st.one_of(st.just(GENESIS_HASH), hex_digests),
        "hash": st.one_of(st.just(GENESIS_HASH), hex_digests),
    }[field]
    value = data.draw(strategy, label=f"new {field}")
    as_json = value.value if isinstance(value, Phase) else value
    was_json = current.value if isinstance(current, Phase) else current
    assume(canonical_bytes(as_json) != canonical_bytes(was_json))
    return value


def tamper_once(data: st.DataObject, journal: SideEffectJournal, tamper: Tamper) -> None:
    """Apply one drawn tampering: a changed field, a deletion, a swap or a truncation."""
    targets = [s for s in journal.list_sagas() if journal.entries(s)]
    assume(targets)
    saga_id = data.draw(st.sampled_from(targets), label="saga")
    entries = journal.entries(saga_id)
    count = len(entries)
    kind = data.draw(st.sampled_from(["field", "delete", "swap", "truncate"]), label="kind")
    event(f"{type(journal).__name__}: {kind}")
    if kind == "field":
        position = data.draw(st.integers(min_value=1, max_value=count), label="position")
        field = data.draw(st.sampled_from(FIELDS), label="field")
        value = other_value(data, field, entries[position - 1], targets)
        assume(tamper.set_field(saga_id, position, field, value))
        event(f"{type(journal).__name__}: field {field}")
    elif kind == "delete":
        tamper.delete(saga_id, data.draw(st.integers(min_value=1, max_value=count)))
    elif kind == "swap":
        assume(count >= 2)
        first, second = data.draw(
            st.lists(st.integers(min_value=1, max_value=count), min_size=2, max_size=2, unique=True)
        )
        tamper.swap(saga_id, first, second)
    else:
        tamper.truncate(saga_id, data.draw(st.integers(min_value=0, max_value=count - 1)))


PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class TestUntouched:
    @PROPERTY
    @given(specs=sagas, backend=st.sampled_from(["memory", "sqlite"]))
    def test_an_untouched_journal_always_verifies(
        self, specs: dict[str, list[dict[str, Any]]], backend: str
    ) -> None:
        """Random sagas verify, whole and saga by saga, with and without their heads."""
        with journal_and_tamper(backend) as (journal, _):
            build(journal, specs)
            heads = chain_heads(journal)
            report = verify(journal, heads=heads)
            assert report.ok, report.problems
            assert (report.sagas, report.entries) == (
                len(specs),
                sum(len(entries) for entries in specs.values()),
            )
            for saga_id in specs:
                assert verify(journal, saga_id, heads=heads).ok

    def test_an_empty_journal_verifies(self) -> None:
        """Nothing to check is not a failure."""
        report = verify(InMemoryJournal())
        assert (report.ok, report.sagas, report.entries) == (True, 0, 0)


class TestTamperingProperty:
    @PROPERTY
    @given(specs=sagas, data=st.data(), backend=st.sampled_from(["memory", "sqlite"]))
    def test_verification_names_the_saga_and_first_bad_seq(
        self, specs: dict[str, list[dict[str, Any]]], data: st.DataObject, backend: str
    ) -> None:
        """After 1-3 random tamperings, verify names each altered saga and its first bad seq.

        Exactly: for each saga whose stored chain differs from what was written, the first
        differing seq; a tail truncation only against the heads recorded before.
        """
        assume(specs)
        with journal_and_tamper(backend) as (journal, tamper):
            build(journal, specs)
            before = snapshot(journal)
            heads = chain_heads(journal)
            for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="tamperings")):
                tamper_once(data, journal, tamper)
            without = expected_problems(journal, before, with_heads=False)
            assert reported(verify(journal).problems) == without
            assert reported(verify(journal, heads=heads).problems) == expected_problems(
                journal, before, with_heads=True
            )
            for saga_id, seq in without:
                single = verify(journal, saga_id).problems
                assert [(p.saga_id, p.seq) for p in single] == [(saga_id, seq)]


@pytest.fixture(params=["memory", "sqlite"])
def tampered(request: pytest.FixtureRequest) -> Iterator[tuple[SideEffectJournal, Tamper]]:
    """A journal with sagas `a` (5 entries) and `b` (3 entries), and a way to tamper."""
    with journal_and_tamper(request.param) as (journal, tamper):
        for n in range(5):
            journal.append("a", Phase.INTENT, tool_name="t", call_id=f"t#{n}", payload={"n": n})
        for n in range(3):
            journal.append("b", Phase.EXECUTED, ref_seq=n or None, payload=[n, 0.5])
        yield journal, tamper


class TestTamperingExamples:
    def test_a_changed_payload(self, tampered: tuple[SideEffectJournal, Tamper]) -> None:
        """Changing one payload: a hash mismatch at that seq, the other saga untouched."""
        journal, tamper = tampered
        tamper.set_field("a", 3, "payload", {"n": 300})
        (problem,) = verify(journal).problems
        assert (problem.saga_id, problem.seq) == ("a", 3)
        assert problem.reason.startswith("hash mismatch")

    def test_a_recomputed_hash_breaks_the_next_link(
        self, tampered: tuple[SideEffectJournal, Tamper]
    ) -> None:
        """Fixing the edited entry's own hash moves the break to the next entry's link."""
        journal, tamper = tampered
        forged = _forge(journal.entries("a")[1], payload={"n": 100})
        tamper.replace("a", 2, forged)
        (problem,) = verify(journal).problems
        assert (problem.saga_id, problem.seq) == ("a", 3)
        assert problem.reason.startswith("broken link")

    def test_a_deleted_entry(self, tampered: tuple[SideEffectJournal, Tamper]) -> None:
        """Deleting an entry in the middle leaves a gap at its seq."""
        journal, tamper = tampered
        tamper.delete("a", 2)
        (problem,) = verify(journal).problems
        assert (problem.saga_id, problem.seq) == ("a", 2)
        assert problem.reason == "gap: seq 2 is missing (next is 3)"

    def test_deleting_the_first_entries(self, tampered: tuple[SideEffectJournal, Tamper]) -> None:
        """Deleting from the start: the chain no longer starts at seq 1."""
        journal, tamper = tampered
        tamper.delete("b", 1)
        tamper.delete("b", 1)
        assert reported(verify(journal).problems) == {("b", 1)}

    def test_swapped_entries(self, tampered: tuple[SideEffectJournal, Tamper]) -> None:
        """Swapping two entries breaks the chain at the first of them."""
        journal, tamper = tampered
        tamper.swap("a", 2, 4)
        assert reported(verify(journal).problems) == {("a", 2)}

    def test_an_entry_moved_to_another_saga(
        self, tampered: tuple[SideEffectJournal, Tamper]
    ) -> None:
        """An entry relabelled to another saga breaks the chain it is stored in.

        In SQLite the row moves to the other saga's key and breaks that chain too.
        """
        journal, tamper = tampered
        tamper.set_field("a", 4, "saga_id", "b")
        problems = reported(verify(journal).problems)
        assert ("a", 4) in problems
        if isinstance(journal, SqliteJournal):
            assert problems == {("a", 4), ("b", 4)}  # the row now sits at b's seq 4
        else:
            assert problems == {("a", 4)}  # stored in a's chain, naming b

    def test_tail_truncation_needs_a_recorded_head(
        self, tampered: tuple[SideEffectJournal, Tamper]
    ) -> None:
        """Deleting the last entries leaves a chain that verifies; the head exposes it."""
        journal, tamper = tampered
        heads = chain_heads(journal)
        assert heads == [
            ChainHead(saga_id="a", seq=5, hash=journal.entries("a")[-1].hash),
            ChainHead(saga_id="b", seq=3, hash=journal.entries("b")[-1].hash),
        ]
        tamper.truncate("a", 3)
        assert verify(journal).ok
        (problem,) = verify(journal, heads=heads).problems
        assert (problem.saga_id, problem.seq) == ("a", 4)
        assert problem.reason.startswith("truncation: the chain ends at seq 3")

    def test_a_vanished_saga_needs_a_recorded_head(
        self, tampered: tuple[SideEffectJournal, Tamper]
    ) -> None:
        """Deleting a whole saga is seen only against its head."""
        journal, tamper = tampered
        heads = chain_heads(journal)
        tamper.truncate("b", 0)
        assert verify(journal).ok
        assert reported(verify(journal, heads=heads).problems) == {("b", 1)}
        assert reported(verify(journal, "b", heads=heads).problems) == {("b", 1)}

    def test_a_rewrite_with_recomputed_hashes_needs_a_recorded_head(
        self, tampered: tuple[SideEffectJournal, Tamper]
    ) -> None:
        """A forger who rebuilds the chain from seq 2 on passes verify; the head does not."""
        journal, tamper = tampered
        heads = chain_heads(journal)
        entries = journal.entries("a")
        prev_hash = entries[0].hash
        for position, entry in enumerate(entries[1:], start=2):
            forged = _forge(entry, payload={"n": -1}, prev_hash=prev_hash)
            tamper.replace("a", position, forged)
            prev_hash = forged.hash
        assert verify(journal).ok
        (problem,) = verify(journal, heads=heads).problems
        assert (problem.saga_id, problem.seq) == ("a", 5)
        assert problem.reason.startswith("rewritten")

    def test_a_grown_chain_still_matches_its_head(
        self, tampered: tuple[SideEffectJournal, Tamper]
    ) -> None:
        """Heads recorded earlier do not flag entries appended since."""
        journal, _ = tampered
        heads = chain_heads(journal)
        journal.append("a", Phase.ENDED, payload={"outcome": "COMPLETED"})
        assert verify(journal, heads=heads).ok


class TestSqliteTriggers:
    def test_update_and_delete_are_refused(self, tmp_path: Path) -> None:
        """With its triggers in place, sagacity_journal refuses UPDATE and DELETE."""
        journal = SqliteJournal(tmp_path / "journal.db")
        journal.append("a", Phase.INTENT, payload={"n": 1})
        conn = sqlite3.connect(journal.path, isolation_level=None)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE sagacity_journal SET payload = '{\"n\":2}'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM sagacity_journal")
        conn.close()
        assert journal.entries("a")[0].payload == {"n": 1}
        assert verify(journal).ok
        journal.close()

    def test_evidence_holds_without_the_triggers(self, tmp_path: Path) -> None:
        """Dropping the triggers lets the edit in, and verify names it."""
        journal = SqliteJournal(tmp_path / "journal.db")
        for n in range(3):
            journal.append("a", Phase.INTENT, payload={"n": n})
        tamper = SqliteTamper(journal)
        tamper.edit(
            "UPDATE sagacity_journal SET payload = '{\"n\":9}' WHERE saga_id = 'a' AND seq = 2"
        )
        tamper.close()
        assert reported(verify(journal).problems) == {("a", 2)}
        journal.close()

    def test_an_unreadable_row_names_the_saga_and_seq(self, tmp_path: Path) -> None:
        """A row edited beyond reading (payload not JSON) fails loudly, naming the row."""
        journal = SqliteJournal(tmp_path / "journal.db")
        journal.append("a", Phase.INTENT)
        tamper = SqliteTamper(journal)
        tamper.edit("UPDATE sagacity_journal SET payload = 'not json'")
        tamper.edit("UPDATE sagacity_journal SET phase = 'EXECUTED'")
        tamper.close()
        with pytest.raises(Exception, match=r"saga 'a' seq 1: the stored row cannot be read"):
            journal.entries("a")
        journal.close()


class TestExports:
    def test_verify_entries_checks_an_export(self, tmp_path: Path) -> None:
        """An export read back verifies; an edited line is named by saga and seq."""
        journal = InMemoryJournal()
        for n in range(3):
            journal.append("a", Phase.INTENT, payload={"amount": n + 0.25})
            journal.append("b", Phase.INTENT, payload={"amount": n})
        path = tmp_path / "journal.jsonl"
        with path.open("w", encoding="utf-8") as out:
            assert export_jsonl(journal, out) == 6
        lines = path.read_text(encoding="utf-8").splitlines()
        assert verify_entries(read_jsonl(lines)).ok
        lines[4] = lines[4].replace('"amount":1', '"amount":7')
        (problem,) = verify_entries(read_jsonl(lines)).problems
        assert (problem.saga_id, problem.seq) == ("b", 2)

    def test_verify_entries_accepts_interleaved_sagas(self) -> None:
        """Sagas may come interleaved; each is checked in its own order."""
        journal = InMemoryJournal()
        for n in range(3):
            journal.append("a", Phase.INTENT, payload=n)
            journal.append("b", Phase.INTENT, payload=n)
        interleaved = [
            e for pair in zip(journal.entries("a"), journal.entries("b"), strict=True) for e in pair
        ]
        assert verify_entries(interleaved).ok
        heads = chain_heads(journal)
        assert not verify_entries(interleaved[:-1], heads=heads).ok


def _forge(entry: JournalEntry, *, payload: Any, prev_hash: str | None = None) -> JournalEntry:
    """An entry with a new payload and a hash recomputed to match, as a forger would."""
    forged, _ = seal(
        entry.saga_id,
        entry.seq,
        entry.phase,
        tool_name=entry.tool_name,
        call_id=entry.call_id,
        ref_seq=entry.ref_seq,
        payload=payload,
        prev_hash=entry.prev_hash if prev_hash is None else prev_hash,
        recorded_at=entry.recorded_at,
    )
    return dataclasses.replace(forged)
