"""The formats the pages show are the formats the code reads: each block fed to its parser."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from sagacity.approval._policy import signed_bytes
from sagacity.errors import ConfigurationError
from sagacity.server import TokenAuth, hash_token, new_token
from tests.docs._blocks import DOCS, Block, blocks

SERVER = DOCS / "server.md"  # server.md
JOURNAL_FORMAT = DOCS / "journal-format.md"  # journal-format.md


def only_block(page: Path, language: str, containing: str = "") -> Block:
    (block,) = [b for b in blocks(page) if b.language == language and containing in b.code]
    return block


class TestTokensFile:
    def test_the_tokens_file_shown_loads(self, tmp_path: Path) -> None:
        """server.md's TOML, its hash placeholders filled with real hashes, loads as shown."""
        shown = only_block(SERVER, "toml").code
        tokens = [new_token(), new_token()]
        filled = iter(hash_token(token) for token in tokens)
        text = re.sub(r'sha256 = "…[^"]*"', lambda _: f'sha256 = "{next(filled)}"', shown)
        path = tmp_path / "tokens.toml"
        path.write_text(text, encoding="utf-8")
        auth = TokenAuth.from_file(path)
        principals = [(p.name, sorted(p.roles)) for p in auth.principals]
        assert principals == [("alice", ["approver"]), ("ops-bot", ["operator"])]
        found = [auth.principal_for(token) for token in tokens]
        assert [p.name if p else None for p in found] == ["alice", "ops-bot"]

    def test_the_placeholders_themselves_are_refused(self, tmp_path: Path) -> None:
        """Copied as is, the file fails to load, naming the first entry: never runs open."""
        path = tmp_path / "tokens.toml"
        path.write_text(only_block(SERVER, "toml").code, encoding="utf-8")
        with pytest.raises(ConfigurationError, match=r"token #1.*not 64 hex digits"):
            TokenAuth.from_file(path)


def columns(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    return conn.execute("PRAGMA table_xinfo(sagacity_journal)").fetchall()


class TestSqliteTable:
    def test_the_table_shown_is_the_journal_table(self, tmp_path: Path) -> None:
        """journal-format.md's CREATE TABLE makes the columns, key and storage of the real one."""
        from sagacity._sqlite import connect

        shown = sqlite3.connect(":memory:")
        shown.executescript(only_block(JOURNAL_FORMAT, "sql").code)
        real = connect(tmp_path / "journal.db")
        try:
            assert columns(shown) == columns(real)
            for conn in (shown, real):
                sql = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE name = 'sagacity_journal'"
                ).fetchone()[0]
                assert "WITHOUT ROWID" in sql
        finally:
            shown.close()
            real.close()


class TestApprovalSignature:
    def test_the_signed_bytes_shown(self) -> None:
        """The object shown is, filled in, the exact bytes a signature covers."""
        shown = only_block(JOURNAL_FORMAT, "json", '"approver":"bob"').code.strip()
        filled = (
            shown.replace("<the request's hash>", "ab" * 32)
            .replace("<the request id>", "req-1")
            .replace("<the saga id>", "wire-7")
            .replace("<the call id>", "wire#1")
            .replace("<the tool>", "wire")
            .replace("<the seq of its AWAITING_APPROVAL>", "3")
        )
        assert filled.encode() == signed_bytes(
            "wire-7", "req-1", "ab" * 32, "bob", call_id="wire#1", tool_name="wire", request_seq=3
        )
