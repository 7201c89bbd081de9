"""The read commands: they create nothing, say what is missing, and print tables or JSON."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sagacity import Phase, Reversibility, Sagacity, compensable
from sagacity.cli import main
from tests.cli._run import restore_triggers_after, run_cli


def cells(line: str) -> list[str]:
    """A plain table row's cells: columns are two or more spaces apart."""
    return re.split(r"\s{2,}", line.strip())


READ_COMMANDS = [
    ["sagas"],
    ["show", "order-1001"],
    ["verify"],
    ["export"],
    ["pending"],
    ["doubts"],
]


@pytest.fixture
def demo_db(tmp_path: Path) -> str:
    database = str(tmp_path / "demo.db")
    assert main(["demo", "--database", database]) == 0
    return database


class TestNothingIsCreated:
    @pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: c[0])
    def test_a_missing_database_is_an_error_and_stays_missing(
        self, tmp_path: Path, command: list[str]
    ) -> None:
        """One line naming the file, exit 1, and no file, WAL or directory left behind."""
        missing = tmp_path / "nothing.db"
        done = run_cli(*command, "--database", str(missing))
        assert done.returncode == 1
        assert done.stderr == f"sagacity {command[0]}: no SQLite database at {str(missing)!r}\n"
        assert list(tmp_path.iterdir()) == []

    def test_the_default_database_is_not_created_either(self, tmp_path: Path) -> None:
        """Without --database or SAGACITY_DATABASE_URL, sagacity.db must exist to be read."""
        done = run_cli("sagas", cwd=tmp_path)
        assert done.returncode == 1
        assert done.stderr == "sagacity sagas: no SQLite database at 'sagacity.db'\n"
        assert list(tmp_path.iterdir()) == []

    def test_an_empty_file_is_not_turned_into_a_journal(self, tmp_path: Path) -> None:
        """A zero-byte file is not a sagacity database, and stays zero bytes."""
        empty = tmp_path / "empty.db"
        empty.touch()
        done = run_cli("verify", "--database", str(empty))
        assert done.returncode == 1
        assert "holds no sagacity journal" in done.stderr
        assert empty.stat().st_size == 0

    def test_a_foreign_journal_table(self, tmp_path: Path) -> None:
        """Another program's sagacity_journal table is named as not sagacity's, exit 3."""
        foreign = tmp_path / "other.db"
        conn = sqlite3.connect(foreign)
        conn.execute("CREATE TABLE sagacity_meta (key TEXT, value TEXT)")
        conn.execute("INSERT INTO sagacity_meta VALUES ('schema_version', '2')")
        conn.execute("CREATE TABLE sagacity_journal (id INTEGER, note TEXT)")
        conn.commit()
        conn.close()
        done = run_cli("sagas", "--database", str(foreign))
        assert done.returncode == 3
        assert done.stderr.count("\n") == 1
        assert "its sagacity_journal table is not sagacity's (it lacks call_id" in done.stderr
        assert "Traceback" not in done.stderr

    def test_memory_is_refused(self) -> None:
        """memory:// is always empty: reading it is a mistake, said so."""
        done = run_cli("sagas", "--database", "memory://")
        assert done.returncode == 1
        assert "memory:// is a new, empty journal each time" in done.stderr

    @pytest.mark.parametrize(
        "command",
        [
            ["show", "nope"],
            ["verify", "--saga", "nope"],
            ["export", "--saga", "nope"],
            ["pending", "--saga", "nope"],
        ],
        ids=lambda c: c[0],
    )
    def test_an_unknown_saga_is_named(self, demo_db: str, command: list[str]) -> None:
        """An unknown saga is exit 1 with one line naming it, not an empty success."""
        done = run_cli(*command, "--database", demo_db)
        assert done.returncode == 1
        assert done.stderr == f"sagacity {command[0]}: saga 'nope' has no journal entries\n"
        assert done.stdout == ""

    def test_verify_of_nothing_is_not_ok(self, tmp_path: Path) -> None:
        """An existing but empty journal: verify says there was nothing to check, exit 1."""
        path = tmp_path / "fresh.db"
        Sagacity.from_url(f"sqlite:///{path}").close()
        done = run_cli("verify", "--database", str(path))
        assert done.returncode == 1
        assert (
            done.stdout == "0 sagas, 0 entries: nothing to verify: the journal holds no entries\n"
        )


class TestVerifyAndExport:
    def test_verify_ok_and_broken(self, demo_db: str) -> None:
        """Exit 0 on the demo journal; 1 naming saga and seq once a row is edited."""
        ok = run_cli("verify", "--database", demo_db)
        assert (ok.returncode, ok.stdout) == (0, "3 sagas, 17 entries: OK\n")
        restore_triggers_after(
            demo_db,
            'UPDATE sagacity_journal SET payload = \'{"result":"ch_FORGED"}\' '
            "WHERE saga_id = 'order-1001' AND seq = 4",
        )
        broken = run_cli("verify", "--database", demo_db)
        assert broken.returncode == 1
        assert broken.stdout.splitlines()[0].startswith("saga 'order-1001' seq 4: hash mismatch")
        as_json = json.loads(run_cli("verify", "--json", "--database", demo_db).stdout)
        assert as_json["ok"] is False
        assert [(p["saga_id"], p["seq"]) for p in as_json["problems"]] == [("order-1001", 4)]

    def test_an_unreadable_row(self, demo_db: str) -> None:
        """Verify names the row and exits 1; export stops naming it, exit 3; no traceback."""
        restore_triggers_after(
            demo_db,
            "UPDATE sagacity_journal SET phase = 'BOGUS' WHERE saga_id = 'order-1001' AND seq = 4",
        )
        broken = run_cli("verify", "--database", demo_db)
        assert broken.returncode == 1, broken.stderr
        assert broken.stdout.splitlines() == [
            "saga 'order-1001' seq 4: unreadable row: phase 'BOGUS' is not a phase",
            "3 sagas, 10 entries: 1 broken",  # order-1001's 1-4, wire-1002's 5, wire-1003's 1
        ]
        assert broken.stderr == ""
        assert run_cli("verify", "--database", demo_db, "--saga", "wire-1002").returncode == 0
        exported = run_cli("export", "--database", demo_db)
        assert exported.returncode == 3
        assert exported.stderr.startswith(
            "sagacity export: saga 'order-1001' seq 4: the stored row cannot be read "
            "(phase 'BOGUS' is not a phase)"
        )
        assert "Traceback" not in exported.stderr

    def test_export_jsonl_holds_every_entry(self, demo_db: str, tmp_path: Path) -> None:
        """One JSON object per entry with its hash; the summary goes to stderr."""
        out = tmp_path / "journal.jsonl"
        done = run_cli("export", "--database", demo_db, "--output", str(out))
        assert done.returncode == 0, done.stderr
        assert done.stderr == f"exported 17 entries to {out}\n"
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 17
        assert [r["seq"] for r in rows if r["saga_id"] == "wire-1002"] == [1, 2, 3, 4, 5]
        assert all(len(r["hash"]) == 64 for r in rows)
        assert run_cli("export", "--json", "--database", demo_db).stdout == out.read_text()

    def test_export_csv(self, demo_db: str) -> None:
        """A header and one row per entry."""
        done = run_cli("export", "--database", demo_db, "--format", "csv", "--saga", "wire-1002")
        lines = done.stdout.strip().splitlines()
        assert lines[0].startswith("saga_id,seq,phase,")
        assert len(lines) == 6

    def test_an_unwritable_output(self, demo_db: str, tmp_path: Path) -> None:
        """One line, exit 4, and no partial file; an existing file is kept if the export fails."""
        done = run_cli("export", "--database", demo_db, "-o", str(tmp_path / "no" / "x.jsonl"))
        assert done.returncode == 4
        assert done.stderr == (
            f"sagacity export: cannot write {tmp_path / 'no' / 'x.jsonl'}: "
            "No such file or directory\n"
        )
        kept = tmp_path / "kept.jsonl"
        kept.write_text("earlier export\n")
        restore_triggers_after(
            demo_db, "UPDATE sagacity_journal SET phase = 'BOGUS' WHERE saga_id = 'wire-1002'"
        )
        failed = run_cli("export", "--database", demo_db, "-o", str(kept))
        assert failed.returncode == 3
        assert kept.read_text() == "earlier export\n"
        assert sorted(p.name for p in tmp_path.iterdir() if "jsonl" in p.name) == ["kept.jsonl"]

    def test_a_closed_pipe_is_quiet(self, tmp_path: Path) -> None:
        """`sagacity export | head -1` on a journal larger than a pipe: exit 141, no noise."""
        path = tmp_path / "big.db"
        sagacity = Sagacity.from_url(f"sqlite:///{path}")
        for n in range(600):
            sagacity.journal.append(f"saga-{n:04}", Phase.INTENT, payload={"pad": "x" * 200})
        sagacity.close()
        done = subprocess.run(
            f"{sys.executable} -m sagacity.cli export --database {path} | head -1",
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            executable="/bin/bash",
        )
        assert json.loads(done.stdout)["saga_id"] == "saga-0000"
        assert done.stderr == ""
        status = subprocess.run(
            f"{sys.executable} -m sagacity.cli export --database {path} | head -1 >/dev/null; "
            "echo ${PIPESTATUS[0]}",
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            executable="/bin/bash",
        )
        assert status.stdout.strip() == "141"
        assert status.stderr == ""


class TestListings:
    def test_sagas_table_and_filters(self, demo_db: str) -> None:
        """Status, entries, last activity, pending and in-doubt counts; filters narrow it."""
        lines = run_cli("sagas", "--database", demo_db).stdout.splitlines()
        assert cells(lines[0]) == [
            "saga", "status", "entries", "last activity", "pending", "in doubt", "worker"
        ]  # fmt: skip
        first = lines[1].split()
        assert first[:3] == ["order-1001", "COMPENSATED", "11"]
        assert first[-2:] == ["0", "0"]
        assert lines[2].split()[:3] == ["wire-1002", "COMPLETED", "5"]
        assert lines[3].split()[:3] == ["wire-1003", "AWAITING_APPROVAL", "1"]
        assert cells(lines[3])[4:6] == ["1", "0"]  # one request pending
        only = run_cli("sagas", "--status", "completed", "--database", demo_db).stdout
        assert [line.split()[0] for line in only.splitlines()[1:]] == ["wire-1002"]
        limited = run_cli("sagas", "--limit", "1", "--database", demo_db).stdout
        assert len(limited.splitlines()) == 2
        future = run_cli("sagas", "--since", "2999-01-01T00:00:00Z", "--database", demo_db)
        assert future.stdout == "no sagas match\n"
        recent = run_cli("sagas", "--since", "1h", "--json", "--database", demo_db)
        documents = [json.loads(line) for line in recent.stdout.splitlines()]
        assert [(d["saga_id"], d["status"], d["entries"]) for d in documents] == [
            ("order-1001", "COMPENSATED", 11),
            ("wire-1002", "COMPLETED", 5),
            ("wire-1003", "AWAITING_APPROVAL", 1),
        ]
        assert documents[2]["started_by"] == "shop-agent"
        assert set(documents[0]) == {
            "saga_id", "status", "entries", "first_at", "last_at", "pending", "in_doubt",
            "started_by", "problem", "worker", "stalled",
        }  # fmt: skip

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--status", "DONE"], "--status 'DONE' is not one of AWAITING_APPROVAL, COMPENSATED"),
            (["--since", "yesterday"], "--since 'yesterday': give a duration (90m, 2h, 7d)"),
            (["--limit", "0"], "--limit must be at least 1, not 0"),
        ],
    )
    def test_bad_filters(self, demo_db: str, args: list[str], message: str) -> None:
        """A bad filter is one line and exit 2."""
        done = run_cli("sagas", *args, "--database", demo_db)
        assert done.returncode == 2
        assert done.stderr.startswith(f"sagacity sagas: {message}")
        assert done.stderr.count("\n") == 1

    def test_show_has_times_and_outcome(self, demo_db: str) -> None:
        """A heading with status and span, the error that ended it, then a timed table."""
        lines = run_cli("show", "order-1001", "--database", demo_db).stdout.splitlines()
        assert lines[0].startswith("saga order-1001: COMPENSATED, 11 entries, 20")
        assert lines[1] == "ended by CourierDown: courier refused order order-1001: depot closed"
        assert lines[2].split() == ["time", "seq", "phase", "tool", "call", "id", "ref", "hash"]
        assert lines[3].split()[1:4] == ["1", "INTENT", "reserve_inventory"]
        assert lines[3].split()[0].endswith("Z")
        document = json.loads(run_cli("show", "order-1001", "--json", "--database", demo_db).stdout)
        assert document["status"] == "COMPENSATED"
        assert [e["phase"] for e in document["entries"]][-1] == "ENDED"

    def test_pending_shows_age_expiry_reason_and_state(self, tmp_path: Path) -> None:
        """A header, then one row per waiting request; JSON Lines with --json."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(amount: str) -> str:
            return "wt-1"

        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}", approval_ttl=3600)
        (tool,) = sagacity.wrap(wire)
        request = sagacity.saga("w-1", lambda: tool(amount="10")).pending[0]
        sagacity.close()
        lines = run_cli("pending", "--database", database).stdout.splitlines()
        assert cells(lines[0]) == [
            "saga", "request", "tool", "age", "expires", "reason", "state", "sha256", "input"
        ]  # fmt: skip
        row = lines[1]
        assert row.startswith(f"w-1   {request.request_id}  wire")
        assert request.expires_at is not None
        assert request.expires_at.isoformat() in row
        assert f"waiting  {request.input_sha256}" in row
        assert row.endswith('{"amount":"10"}')
        (document,) = [
            json.loads(line)
            for line in run_cli("pending", "--json", "--database", database).stdout.splitlines()
        ]
        assert document["state"] == "waiting"
        assert document["input_sha256"] == request.input_sha256
        assert document["approvals"] == []

    def test_doubts_lists_calls_in_doubt_across_sagas(self, tmp_path: Path) -> None:
        """A call that timed out is in doubt: listed with its saga, seq, id and tool."""

        @compensable(by=lambda: None)
        def charge(amount: int) -> str:
            raise TimeoutError("the provider did not answer")

        @compensable(by=lambda: None)
        def note(text: str) -> str:
            return "ok"

        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        charge_tool, note_tool = sagacity.wrap(charge, note)

        def work() -> None:
            note_tool(text="hi")
            with contextlib.suppress(TimeoutError):
                charge_tool(amount=5)

        sagacity.saga("pay-1", work)
        sagacity.saga("fine-2", lambda: note_tool(text="ok"))
        sagacity.close()
        lines = run_cli("doubts", "--database", database).stdout.splitlines()
        assert cells(lines[0]) == [
            "saga", "seq", "call id", "tool", "in doubt", "since", "saga status", "worker", "why",
            "reconciler",
        ]  # fmt: skip
        row = cells(lines[1])
        assert row[:5] == ["pay-1", "3", "charge#1", "charge", "call"]
        assert row[6:] == [
            "NEEDS_ATTENTION",
            "its outcome is unknown: {'message': 'the provider did not answer', 'type': "
            "'TimeoutError'}",
            "no reconciler has answered",
        ]
        assert len(lines) == 2
        (document,) = [
            json.loads(line)
            for line in run_cli("doubts", "--json", "--database", database).stdout.splitlines()
        ]
        assert document["call_id"] == "charge#1"
        assert document["kind"] == "call"
        assert document["saga_status"] == "NEEDS_ATTENTION"
        summary = run_cli("sagas", "--status", "NEEDS_ATTENTION", "--database", database)
        assert summary.stdout.splitlines()[1].split()[0] == "pay-1"
        assert summary.stdout.splitlines()[1].split()[-1] == "1"

    def test_empty_listings_say_so(self, tmp_path: Path) -> None:
        """A journal with nothing pending or in doubt says that in words."""
        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        sagacity.journal.append("a", Phase.ENDED, payload={"outcome": "COMPLETED"})
        sagacity.close()
        assert run_cli("pending", "--database", database).stdout == (
            "no approval requests are waiting\n"
        )
        assert run_cli("doubts", "--database", database).stdout == (
            "no call or compensation is in doubt\n"
        )
        assert run_cli("pending", "--json", "--database", database).stdout == ""


def run_on_terminal(*args: str) -> tuple[int, str]:
    """Run the command with a pseudo-terminal as stdin, stdout and stderr, as a person would."""
    import os
    import pty

    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "sagacity.cli", *args],
        stdin=slave, stdout=slave, stderr=slave,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm"},
    )  # fmt: skip
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return process.wait(timeout=60), out.decode(errors="replace")


class TestOnATerminal:
    def test_verify_shows_a_progress_bar_and_the_verdict(self, tmp_path: Path) -> None:
        """On a terminal, a journal of many sagas gets a bar on stderr; the verdict still prints."""
        path = tmp_path / "many.db"
        sagacity = Sagacity.from_url(f"sqlite:///{path}")
        for n in range(150):
            sagacity.journal.append(f"s-{n:03}", Phase.INTENT, payload={"n": n})
        sagacity.close()
        code, shown = run_on_terminal("verify", "--database", str(path))
        assert code == 0
        assert "verifying" in shown
        assert "100%" in shown
        assert shown.rstrip().endswith("150 sagas, 150 entries: OK")
        piped = run_cli("verify", "--database", str(path))
        assert piped.stdout == "150 sagas, 150 entries: OK\n"
        assert piped.stderr == ""  # no bar when nobody watches

    def test_sagas_draws_a_table(self, demo_db: str) -> None:
        """On a terminal the table is drawn by rich, the header in bold."""
        code, shown = run_on_terminal("sagas", "--database", demo_db)
        assert code == 0
        assert "\x1b[1m" in shown  # bold: rich's header style
        assert "order-1001" in shown
        assert "COMPENSATED" in shown


class TestHostileText:
    def test_an_edited_saga_id_cannot_forge_rows_or_drive_the_terminal(self, demo_db: str) -> None:
        """A newline, an escape sequence or rich markup edited into an id is shown escaped."""
        hostile = "wire-1002\nforged-9  COMPLETED\x1b[2J[bold red]ok[/]"
        restore_triggers_after(
            demo_db,
            "UPDATE sagacity_journal SET saga_id = 'wire-1002' || char(10) || "
            "'forged-9  COMPLETED' || char(27) || '[2J[bold red]ok[/]' "
            "WHERE saga_id = 'wire-1002'",
        )
        listed = run_cli("sagas", "--database", demo_db).stdout
        assert "\x1b" not in listed
        lines = listed.splitlines()
        assert len(lines) == 4  # header, order-1001, the hostile one, wire-1003: no forged row
        assert cells(lines[1])[:2] == ["order-1001", "COMPENSATED"]
        assert lines[2].startswith("wire-1002\\nforged-9  COMPLETED\\x1b[2J[bold red]ok[/]  ")
        shown = run_cli("show", hostile, "--database", demo_db).stdout
        assert "\x1b" not in shown
        code, on_terminal = run_on_terminal("sagas", "--database", demo_db)
        assert code == 0
        assert "[bold red]ok[/]" in on_terminal  # printed as text, not read as markup
        assert "\x1b[2J" not in on_terminal

    def test_an_edited_hash_cannot_drive_the_terminal_of_the_auditor(self, demo_db: str) -> None:
        """`verify` quotes what it found in an edited row, escaped.

        An escape sequence or a newline there never reaches the terminal or forges a line.
        """
        restore_triggers_after(
            demo_db,
            "UPDATE sagacity_journal SET prev_hash = char(27) || '[2J' || char(10) || 'all: OK' "
            "WHERE saga_id = 'order-1001' AND seq = 2",
        )
        checked = run_cli("verify", "--database", demo_db)
        assert checked.returncode == 1
        assert "\x1b" not in checked.stdout
        assert "all: OK" not in checked.stdout.splitlines()
        assert any(
            line.startswith("saga 'order-1001' seq 2:") and "\\x1b[2J\\nall: OK" in line
            for line in checked.stdout.splitlines()
        ), checked.stdout


class TestShowSaysWhyACallDidNotAsk:
    def test_a_call_its_rule_let_through(self, tmp_path: Path) -> None:
        """An IRREVERSIBLE call that ran unasked names the rule that did not ask."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE, approval="amount > 1000")
        def wire(amount: int, to: str) -> str:
            """Wire money: over 1000 a human approves."""
            return f"wired {amount} to {to}"

        database = tmp_path / "rules.db"
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            (tool,) = sagacity.wrap(wire)
            sagacity.saga("small-1", lambda: tool(amount=10, to="ACME"))
        shown = run_cli("show", "small-1", "--database", str(database))
        assert shown.returncode == 0, shown.stderr
        assert (
            "  seq 1 wire ran without asking: its rule 'amount > 1000' did not ask a human\n"
        ) in shown.stdout
