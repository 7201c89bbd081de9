"""Signed checkpoints: what a chain alone cannot show, against real SQLite and PostgreSQL rows."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from sagacity import Phase
from sagacity._stores import open_stores
from sagacity.audit import make_checkpoint, read_checkpoint, verify
from sagacity.audit._keys import PrivateKey, generate_key
from sagacity.errors import CheckpointError
from sagacity.journal import GENESIS_HASH, JournalEntry, SideEffectJournal
from sagacity.journal._entry import seal
from sagacity.journal._rows import row_of
from tests._postgres import admin_connection, postgres_url_for

COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"


class Rows:
    """Plain SQL on the journal table, as someone with the database's password would."""

    def __init__(self, execute: Callable[[str, tuple[Any, ...]], None], mark: str) -> None:
        self.execute = execute
        self.mark = mark  # the driver's parameter mark

    def edit_call_id(self, saga_id: str, seq: int, call_id: str) -> None:
        """Change one row in place, its hash left as it was."""
        m = self.mark
        self.execute(
            f"UPDATE {{t}} SET call_id = {m} WHERE saga_id = {m} AND seq = {m}",
            (call_id, saga_id, seq),
        )

    def delete(self, saga_id: str, after_seq: int = 0) -> None:
        m = self.mark
        self.execute(f"DELETE FROM {{t}} WHERE saga_id = {m} AND seq > {m}", (saga_id, after_seq))

    def rewrite(self, entries: list[JournalEntry], change: dict[int, Any]) -> None:
        """Rebuild a saga's chain with other payloads at `change`, every hash recomputed.

        A consistent rewrite: it verifies on its own.
        """
        saga_id = entries[0].saga_id
        self.delete(saga_id)
        prev_hash = GENESIS_HASH
        for old in entries:
            entry, payload_bytes = seal(
                saga_id,
                old.seq,
                old.phase,
                tool_name=old.tool_name,
                call_id=old.call_id,
                ref_seq=old.ref_seq,
                payload=change.get(old.seq, old.payload),
                prev_hash=prev_hash,
            )
            marks = ", ".join([self.mark] * 10)
            self.execute(
                f"INSERT INTO {{t}} ({COLUMNS}) VALUES ({marks})", row_of(entry, payload_bytes)
            )
            prev_hash = entry.hash


def _fill(journal: SideEffectJournal) -> None:
    for saga_id, count in (("order 1", 6), ('wire "2"', 3), ("zürich-3", 2)):
        for n in range(count):
            journal.append(saga_id, Phase.INTENT, tool_name="t", call_id=f"t#{n}", payload={"n": n})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stored(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[SideEffectJournal, Rows]]:
    """A journal of three sagas (ids with a space, quotes, non-ASCII) and raw access to it."""
    if request.param == "sqlite":
        path = tmp_path / "journal.db"
        journal, approvals = open_stores(f"sqlite:///{path}")
        _fill(journal)
        conn = sqlite3.connect(path, isolation_level=None)

        def run(sql: str, params: tuple[Any, ...]) -> None:
            conn.execute("DROP TRIGGER IF EXISTS sagacity_journal_no_delete")
            conn.execute("DROP TRIGGER IF EXISTS sagacity_journal_no_update")
            conn.execute(sql.replace("{t}", "sagacity_journal"), params)

        try:
            yield journal, Rows(run, "?")
        finally:
            conn.close()
            journal.close()
            approvals.close()
        return
    for url in postgres_url_for(request):
        yield from _postgres_at(url)


def _postgres_at(url: str) -> Iterator[tuple[SideEffectJournal, Rows]]:
    journal, approvals = open_stores(url)
    _fill(journal)
    table = f'"{dict(parse_qsl(urlsplit(url).query))["schema"]}".sagacity_journal'
    trigger = "TRIGGER sagacity_journal_no_update_delete"
    with admin_connection() as admin:

        def run(sql: str, params: tuple[Any, ...]) -> None:
            admin.execute(f"ALTER TABLE {table} DISABLE {trigger}")
            admin.execute(sql.replace("{t}", table).encode(), params)
            admin.execute(f"ALTER TABLE {table} ENABLE {trigger}")

        try:
            yield journal, Rows(run, "%s")
        finally:
            journal.close()
            approvals.close()


@pytest.fixture(scope="module")
def key() -> PrivateKey:
    return generate_key()


class TestAgainstTheJournal:
    def test_an_untouched_journal_verifies_against_its_checkpoint(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """Every head read back exactly, odd saga ids included; later appends are fine."""
        journal, _ = stored
        checkpoint = read_checkpoint(make_checkpoint(journal, key).text, key.public)
        assert [(h.saga_id, h.seq) for h in checkpoint.heads] == [
            ("order 1", 6),
            ('wire "2"', 3),
            ("zürich-3", 2),
        ]
        assert checkpoint.entries == 11
        journal.append("order 1", Phase.ENDED, payload={"outcome": "COMPLETED"})
        journal.append("new-saga", Phase.INTENT)
        assert verify(journal, heads=checkpoint.heads).ok

    def test_tail_truncation_is_named(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """Deleting a chain's last entries verifies alone; the checkpoint names saga and seq."""
        journal, rows = stored
        checkpoint = make_checkpoint(journal, key)
        rows.delete("order 1", after_seq=4)
        assert verify(journal).problems == []  # the shorter chain is consistent
        (problem,) = verify(journal, heads=checkpoint.heads).problems
        assert (problem.saga_id, problem.seq) == ("order 1", 5)
        assert problem.reason.startswith("truncation: the chain ends at seq 4, but its head was")

    def test_a_deleted_saga_is_named(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """A saga whose every row is gone is reported as deleted, with its recorded head."""
        journal, rows = stored
        checkpoint = make_checkpoint(journal, key)
        rows.delete('wire "2"')
        assert verify(journal).problems == []
        (problem,) = verify(journal, heads=checkpoint.heads).problems
        assert (problem.saga_id, problem.seq) == ('wire "2"', 1)
        assert problem.reason == (
            "deleted: the journal has no entry of this saga, but its head was recorded at seq 3"
        )

    def test_a_consistent_rewrite_is_named(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """A chain rebuilt with fresh hashes verifies alone; its head no longer matches."""
        journal, rows = stored
        checkpoint = make_checkpoint(journal, key)
        rows.rewrite(journal.entries("order 1"), {2: {"n": "forged"}})
        assert journal.entries("order 1")[1].payload == {"n": "forged"}
        assert verify(journal).problems == []
        (problem,) = verify(journal, heads=checkpoint.heads).problems
        assert (problem.saga_id, problem.seq) == ("order 1", 6)
        assert problem.reason.startswith("rewritten: seq 6 hashes to")

    def test_an_edited_row_is_named_and_nothing_is_signed(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """A chain that does not verify is refused, by saga and seq: it never becomes evidence."""
        journal, rows = stored
        rows.edit_call_id('wire "2"', 2, "forged")
        with pytest.raises(CheckpointError) as refused:
            make_checkpoint(journal, key)
        assert str(refused.value).startswith(
            "checkpoint: saga 'wire \"2\"' seq 2: hash mismatch: the entry's fields hash to "
        )
        assert str(refused.value).endswith("; the chain does not verify, so nothing was signed")


class TestTheFile:
    @pytest.fixture
    def text(self, key: PrivateKey) -> str:
        from sagacity.journal import InMemoryJournal

        journal = InMemoryJournal()
        _fill(journal)
        return make_checkpoint(journal, key).text

    def test_the_format(self, text: str, key: PrivateKey) -> None:
        """Header lines, one head line per saga with its id as an ASCII JSON string, signature."""
        lines = text.splitlines()
        assert lines[0] == "sagacity-checkpoint 2"
        assert [line.split(" ")[0] for line in lines[1:7]] == [
            "created_at", "key_id", "previous", "sagas", "entries", "heads_sha256"
        ]  # fmt: skip
        assert lines[2] == f"key_id {key.key_id}"
        assert lines[3] == "previous none"
        assert lines[9].endswith(' "z\\u00fcrich-3"')
        assert lines[10].startswith("signature ")
        assert text.isascii()

    def test_an_edited_head_is_refused(self, text: str, key: PrivateKey) -> None:
        """Moving a recorded head back (to hide a truncation) breaks the signature."""
        edited = text.replace("head 6 ", "head 4 ")
        with pytest.raises(CheckpointError, match="signature does not match its text"):
            read_checkpoint(edited, key.public)

    def test_a_dropped_head_is_refused(self, text: str, key: PrivateKey) -> None:
        """Removing a saga's line (to hide its deletion) breaks the signature."""
        edited = "".join(line for line in text.splitlines(True) if "wire" not in line)
        with pytest.raises(CheckpointError, match="signature does not match"):
            read_checkpoint(edited, key.public)

    def test_a_forgery_with_another_key_is_refused(self, text: str, key: PrivateKey) -> None:
        """A checkpoint re-signed by a forger's key is refused with the key the verifier holds."""
        from sagacity.journal import InMemoryJournal

        forger = generate_key()
        forged = make_checkpoint(InMemoryJournal(), forger).text
        with pytest.raises(CheckpointError, match=f"signed by key {forger.key_id}"):
            read_checkpoint(forged, key.public)
        # Claiming the right key id does not help: the signature is still the forger's.
        claimed = forged.replace(forger.key_id, key.key_id)
        with pytest.raises(CheckpointError, match="signature does not match"):
            read_checkpoint(claimed, key.public)

    @pytest.mark.parametrize(
        "garbage", ["", "hello\n", "sagacity-checkpoint 1\nsignature 00\n", b"\xff\xfe"]
    )
    def test_garbage_is_refused(self, garbage: str | bytes, key: PrivateKey) -> None:
        """Anything that is not a checkpoint raises CheckpointError, never another error."""
        with pytest.raises(CheckpointError):
            read_checkpoint(garbage, key.public)


class TestTheStandAloneScript:
    """The verification program of docs/journal-format.md, run as a user saves and runs it."""

    @pytest.fixture
    def script(self, tmp_path: Path) -> Path:
        import re

        page = (Path(__file__).resolve().parents[2] / "docs" / "journal-format.md").read_text()
        (code,) = [
            b
            for b in re.findall(r"```python\n(.*?)```", page, re.S)
            if "def verify_checkpoint" in b
        ]
        path = tmp_path / "verify_checkpoint.py"
        path.write_text(code)
        return path

    def run(self, script: Path, folder: Path, export: str) -> tuple[int, str]:
        import subprocess
        import sys

        done = subprocess.run(
            [sys.executable, str(script), "checkpoint.txt", "key.pub", export],
            cwd=folder, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        return done.returncode, done.stdout

    def test_it_finds_what_verify_finds(
        self, script: Path, tmp_path: Path, key: PrivateKey
    ) -> None:
        """Untouched: exit 0. A deleted saga, a rewritten one, a forged file: named or refused."""
        from sagacity.audit import export_jsonl
        from sagacity.journal import InMemoryJournal

        journal = InMemoryJournal()
        _fill(journal)
        (tmp_path / "key.pub").write_bytes(key.public.pem())
        (tmp_path / "checkpoint.txt").write_text(make_checkpoint(journal, key).text)
        with open(tmp_path / "journal.jsonl", "w", encoding="utf-8") as out:
            export_jsonl(journal, out)
        assert self.run(script, tmp_path, "journal.jsonl") == (
            0, "OK: the export holds checkpoint checkpoint.txt\n"
        )  # fmt: skip

        lines = (tmp_path / "journal.jsonl").read_text().splitlines(keepends=True)
        (tmp_path / "deleted.jsonl").write_text("".join(x for x in lines if "wire" not in x))
        assert self.run(script, tmp_path, "deleted.jsonl") == (
            1, "saga 'wire \"2\"': deleted (its head was seq 3)\n"
        )  # fmt: skip

        rewritten = InMemoryJournal()
        _fill(rewritten)  # the same sagas, written again: other times, other hashes
        with open(tmp_path / "rewritten.jsonl", "w", encoding="utf-8") as out:
            export_jsonl(rewritten, out)
        code, out_text = self.run(script, tmp_path, "rewritten.jsonl")
        assert code == 1
        assert out_text.splitlines()[0] == "saga 'order 1': rewritten at or before seq 6"

        forged = (tmp_path / "checkpoint.txt").read_text().replace("head 6 ", "head 4 ")
        (tmp_path / "checkpoint.txt").write_text(forged)
        code, _ = self.run(script, tmp_path, "journal.jsonl")
        assert code != 0  # InvalidSignature: the program stops


class TestTheChainOfCheckpoints:
    def test_each_checkpoint_names_the_one_before(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """The next checkpoint records the SHA-256 of the previous one's text, signed."""
        import hashlib

        journal, _ = stored
        first = make_checkpoint(journal, key)
        journal.append("order 1", Phase.ENDED, payload={"outcome": "COMPLETED"})
        second = read_checkpoint(make_checkpoint(journal, key, previous=first).text, key.public)
        assert first.previous is None
        assert second.previous == hashlib.sha256(first.text.encode()).hexdigest()
        assert f"\nprevious {second.previous}\n" in second.text
        assert (second.heads[0].saga_id, second.heads[0].seq) == ("order 1", 7)

    def test_a_truncation_since_the_last_checkpoint_is_not_signed(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """Entries deleted after a checkpoint: the next one is refused, naming saga and seq."""
        journal, rows = stored
        first = make_checkpoint(journal, key)
        rows.delete("order 1", after_seq=4)
        with pytest.raises(CheckpointError) as refused:
            make_checkpoint(journal, key, previous=first)
        assert str(refused.value) == (
            "checkpoint: saga 'order 1' seq 5: truncation: the chain ends at seq 4, but its "
            "head was recorded at seq 6; the entries after seq 4 were deleted; the journal "
            f"no longer holds what checkpoint {first.created_at} signed (a shorter or rebuilt "
            "chain is never signed as the new truth), so nothing was signed"
        )
        # Without the previous checkpoint the shorter chain is consistent, and would be signed.
        assert make_checkpoint(journal, key).heads[0].seq == 4

    def test_a_deleted_or_rebuilt_saga_is_not_signed(
        self, stored: tuple[SideEffectJournal, Rows], key: PrivateKey
    ) -> None:
        """A saga gone since the last checkpoint, or rebuilt with fresh hashes: refused."""
        journal, rows = stored
        first = make_checkpoint(journal, key)
        rows.delete('wire "2"')
        with pytest.raises(CheckpointError, match=r"^checkpoint: saga 'wire \"2\"' seq 1: deleted"):
            make_checkpoint(journal, key, previous=first)
        second = make_checkpoint(journal, key)  # the operator starts again from here
        rows.rewrite(journal.entries("order 1"), {2: {"n": "forged"}})
        with pytest.raises(CheckpointError, match=r"^checkpoint: saga 'order 1' seq 6: rewritten"):
            make_checkpoint(journal, key, previous=second)

    def test_a_version_1_checkpoint_is_still_read(self, key: PrivateKey) -> None:
        """A file written before checkpoints were chained reads back, with no previous."""
        import hashlib

        heads = "head 2 " + "a" * 64 + ' "order"\n'
        body = (
            "sagacity-checkpoint 1\ncreated_at 2026-12-01T12:00:00.000000Z\n"
            f"key_id {key.key_id}\nsagas 1\nentries 2\n"
            f"heads_sha256 {hashlib.sha256(heads.encode()).hexdigest()}\n{heads}"
        )
        old = read_checkpoint(f"{body}signature {key.sign(body.encode())}\n", key.public)
        assert (old.previous, [(h.saga_id, h.seq) for h in old.heads]) == (None, [("order", 2)])


class TestKeyFiles:
    def test_a_private_key_others_can_read_is_refused(
        self, tmp_path: Path, key: PrivateKey
    ) -> None:
        """A key file readable by group or others is refused, naming the file and the fix."""
        import os

        from sagacity.audit import load_private_key, load_public_key
        from sagacity.errors import ConfigurationError

        path = tmp_path / "approvals.key"
        path.write_bytes(key.pem())
        for mode in (0o644, 0o640, 0o604, 0o620):
            os.chmod(path, mode)
            with pytest.raises(ConfigurationError) as refused:
                load_private_key(path)
            assert str(refused.value) == (
                f"the private key {path} is readable or writable by others (mode "
                f"{mode:04o}): whoever reads it can sign anything. Make it the owner's alone "
                f"with: chmod 600 {path}"
            )
            with pytest.raises(ConfigurationError, match="readable or writable by others"):
                load_public_key(path)  # a private key file read for its public key, too
        os.chmod(path, 0o600)
        assert load_private_key(path).key_id == key.key_id
        (tmp_path / "approvals.pub").write_bytes(key.public.pem())
        os.chmod(tmp_path / "approvals.pub", 0o644)
        assert load_public_key(tmp_path / "approvals.pub").key_id == key.key_id
