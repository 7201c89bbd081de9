"""Another program's `sagacity_journal` table: named as not sagacity's, exit 3, untouched."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests._postgres import admin_connection, postgres_url_for

SCRIPT = Path(sys.executable).parent / "sagacity"
"""The installed command, as a user runs it."""

READERS = [["sagas"], ["show", "order-1"], ["verify"], ["pending"], ["doubts"]]


def installed(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("SAGACITY_DATABASE_URL", None)
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def schema_of(url: str) -> str:
    (schema,) = parse_qs(urlsplit(url).query)["schema"]
    return schema


class TestSqlite:
    def test_a_table_of_another_program_alone_is_exit_3(self, tmp_path: Path) -> None:
        """A file holding only another program's sagacity_journal: exit 3, named, unchanged."""
        foreign = tmp_path / "other.db"
        conn = sqlite3.connect(foreign)
        conn.execute("CREATE TABLE sagacity_journal (id INTEGER, note TEXT)")
        conn.execute("INSERT INTO sagacity_journal VALUES (1, 'theirs')")
        conn.commit()
        conn.close()
        before = foreign.read_bytes()
        for command in READERS:
            done = installed(*command, "--database", str(foreign))
            assert done.returncode == 3, (command, done.stderr)
            assert done.stderr == (
                f"sagacity {command[0]}: SQLite database {str(foreign)!r}: its sagacity_journal "
                "table is not sagacity's (it lacks call_id, hash, payload, phase, prev_hash, "
                "recorded_at, ref_seq, saga_id, seq, tool_name)\n"
            )
        assert foreign.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]

    def test_a_journal_table_without_its_meta_table_is_exit_3(self, tmp_path: Path) -> None:
        """Our columns but no sagacity_meta beside them: sagacity did not write it, exit 3."""
        foreign = tmp_path / "other.db"
        columns = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at"
        conn = sqlite3.connect(foreign)
        conn.execute(f"CREATE TABLE sagacity_journal ({columns}, prev_hash, hash)")
        conn.commit()
        conn.close()
        done = installed("sagas", "--database", str(foreign))
        assert done.returncode == 3
        assert done.stderr.endswith(
            "its sagacity_journal table is not sagacity's (there is no sagacity_meta table "
            "beside it)\n"
        )

    def test_no_journal_table_is_still_not_found(self, tmp_path: Path) -> None:
        """A SQLite file with other tables only holds no journal: exit 1, as documented."""
        other = tmp_path / "other.db"
        conn = sqlite3.connect(other)
        conn.execute("CREATE TABLE notes (id INTEGER)")
        conn.commit()
        conn.close()
        done = installed("sagas", "--database", str(other))
        assert done.returncode == 1
        assert done.stderr == (
            f"sagacity sagas: SQLite database {str(other)!r} holds no sagacity journal "
            "(no sagacity_journal table)\n"
        )


@pytest.mark.postgres
class TestPostgres:
    @pytest.fixture
    def url(self, request: pytest.FixtureRequest) -> Iterator[str]:
        yield from postgres_url_for(request)

    def test_a_table_of_another_program_is_exit_3(self, url: str) -> None:
        """A schema holding another program's sagacity_journal: exit 3, named, unchanged."""
        schema = schema_of(url)
        with admin_connection() as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
            conn.execute(f'CREATE TABLE "{schema}".sagacity_journal (id int, note text)')
            conn.execute(f"INSERT INTO \"{schema}\".sagacity_journal VALUES (1, 'theirs')")
        for command in READERS:
            done = installed(*command, "--database", url)
            assert done.returncode == 3, (command, done.stderr)
            assert done.stderr.startswith(f"sagacity {command[0]}: ")
            assert done.stderr.endswith(
                "its sagacity_journal table is not sagacity's (it lacks call_id, hash, payload, "
                "phase, prev_hash, recorded_at, ref_seq, saga_id, seq, tool_name)\n"
            )
        with admin_connection() as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            rows = conn.execute(f'SELECT id, note FROM "{schema}".sagacity_journal').fetchall()
        assert (tables, rows) == ([("sagacity_journal",)], [(1, "theirs")])

    def test_a_journal_table_without_its_meta_table_is_exit_3(self, url: str) -> None:
        """Our columns but no sagacity_meta in the schema: exit 3."""
        schema = schema_of(url)
        columns = ", ".join(
            f"{name} text"
            for name in [
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
        )
        with admin_connection() as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
            conn.execute(f'CREATE TABLE "{schema}".sagacity_journal ({columns})')
        done = installed("verify", "--database", url)
        assert done.returncode == 3, done.stderr
        assert done.stderr.endswith("(there is no sagacity_meta table beside it)\n")
