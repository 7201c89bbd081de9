"""`sagacity demo`: runs on a fresh file, again and again, and never deletes anyone else's."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity
from sagacity._demo import OrderTools, sagacity_command
from sagacity.cli import main
from tests.cli._run import restore_triggers_after, run_cli


class TestDemo:
    def test_demo_compensates_approves_and_leaves_one_waiting(self, tmp_path: Path) -> None:
        """The order is compensated in reverse; wire-1002 runs once; wire-1003 waits."""
        database = tmp_path / "demo.db"
        done = run_cli("demo", "--database", str(database))
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert "compensated, in order: charge_card, reserve_inventory" in out
        assert out.index("refunded ch_1M2n3") < out.index("released res-8891")
        assert "outcome: AWAITING_APPROVAL" in out
        assert out.count("wired 12500.00 EUR") == 1
        assert "verify: 3 sagas, 17 entries: OK" in out

        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            order = [(e.phase, e.tool_name) for e in sagacity.journal.entries("order-1001")]
            wire = [e.phase for e in sagacity.journal.entries("wire-1002")]
            left = [e.phase for e in sagacity.journal.entries("wire-1003")]
            (waiting,) = sagacity.pending()
        finally:
            sagacity.close()
        assert order[-5:] == [
            (Phase.COMPENSATING, "charge_card"),
            (Phase.COMPENSATED, "charge_card"),
            (Phase.COMPENSATING, "reserve_inventory"),
            (Phase.COMPENSATED, "reserve_inventory"),
            (Phase.ENDED, None),
        ]
        assert wire == [
            Phase.AWAITING_APPROVAL,
            Phase.APPROVED,
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.ENDED,
        ]
        assert left == [Phase.AWAITING_APPROVAL]
        assert (waiting.saga_id, waiting.tool_name) == ("wire-1003", "send_wire_transfer")
        assert waiting.input == {"amount": "980.00 EUR", "to": "FR76 3000 6000"}
        assert "wired 980.00 EUR" not in out
        command = sagacity_command()
        assert out.endswith(
            f"journal: {database}  (try: {command} show order-1001 --database {database})\n"
            "approve wire-1003 in the inbox (README: Approve in the browser), then run it:\n"
            f"  {command} resume wire-1003 --database {database} "
            "--tools sagacity._demo:OrderTools\n"
        )

    def test_make_demo_twice_in_a_fresh_directory(self, tmp_path: Path) -> None:
        """What `make demo` runs works on a fresh clone and on a second run."""
        for _ in range(2):
            done = run_cli("demo", "--database", "sagacity-demo.db", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            assert "verify: 3 sagas, 17 entries: OK" in done.stdout
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == [
            "sagacity-demo.db"
        ]

    def test_a_file_that_is_not_a_demo_journal_is_left_alone(self, tmp_path: Path) -> None:
        """A notes file, or a real journal, named as --database is refused and kept intact."""
        notes = tmp_path / "notes.txt"
        notes.write_text("my notes\n")
        refused = run_cli("demo", "--database", str(notes))
        assert refused.returncode == 2
        assert refused.stderr == (
            f"sagacity demo: {notes} exists and is not a demo journal: the demo replaces only "
            "a file it created; choose another --database, or pass --force to replace it\n"
        )
        assert notes.read_text() == "my notes\n"

        production = tmp_path / "sagacity.db"
        sagacity = Sagacity.from_url(f"sqlite:///{production}")
        sagacity.journal.append("order-7", Phase.INTENT, payload={"real": True})
        sagacity.close()
        assert main(["demo", "--database", str(production)]) == 2
        conn = sqlite3.connect(production)
        try:
            rows = conn.execute("SELECT DISTINCT saga_id FROM sagacity_journal").fetchall()
        finally:
            conn.close()
        assert rows == [("order-7",)]

    def test_force_replaces_it(self, tmp_path: Path) -> None:
        """With --force the demo replaces a file it did not create."""
        notes = tmp_path / "notes.db"
        notes.write_text("scratch\n")
        done = run_cli("demo", "--database", str(notes), "--force")
        assert done.returncode == 0, done.stderr
        assert "verify: 3 sagas, 17 entries: OK" in done.stdout

    def test_a_directory_is_refused(self, tmp_path: Path) -> None:
        """A directory named as the demo file is refused, not deleted."""
        done = run_cli("demo", "--database", str(tmp_path), "--force")
        assert done.returncode == 2
        assert done.stderr == f"sagacity demo: {tmp_path} is a directory, not a demo journal\n"
        assert tmp_path.is_dir()

    @pytest.mark.parametrize("by_hand", [False, True], ids=["two-sagas", "with-wire-1003"])
    def test_a_demo_journal_from_before_the_marker_is_replaced(
        self, tmp_path: Path, by_hand: bool
    ) -> None:
        """An old demo file, with no marker, does not block make demo.

        It holds the demo's two sagas, perhaps with the wire its docs had one add by hand.
        """
        database = tmp_path / "sagacity-demo.db"
        assert main(["demo", "--database", str(database)]) == 0
        statements = ["DELETE FROM sagacity_meta WHERE key = 'demo_journal'"]
        if not by_hand:
            statements.append("DELETE FROM sagacity_journal WHERE saga_id = 'wire-1003'")
        restore_triggers_after(database, *statements)
        before = {"order-1001", "wire-1002"} | ({"wire-1003"} if by_hand else set())
        assert _sagas(database) == before
        done = run_cli("demo", "--database", str(database))
        assert done.returncode == 0, done.stderr
        assert _sagas(database) == {"order-1001", "wire-1002", "wire-1003"}

    def test_a_journal_with_one_more_saga_is_not_the_demo_s(self, tmp_path: Path) -> None:
        """Without the marker, a journal holding a saga the demo never wrote is refused."""
        database = tmp_path / "sagacity-demo.db"
        assert main(["demo", "--database", str(database)]) == 0
        restore_triggers_after(database, "DELETE FROM sagacity_meta WHERE key = 'demo_journal'")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        sagacity.journal.append("payroll-7", Phase.INTENT, payload={"real": True})
        sagacity.close()
        assert run_cli("demo", "--database", str(database)).returncode == 2
        assert "payroll-7" in _sagas(database)


class TestDemoWords:
    """What the demo prints is what the CLI says, uncut, with commands that run."""

    def test_the_verify_line_is_the_cli_s(self, tmp_path: Path) -> None:
        """The demo's verify line ends with what `sagacity verify` prints for the file."""
        database = tmp_path / "demo.db"
        demo = run_cli("demo", "--database", str(database))
        verified = run_cli("verify", "--database", str(database))
        assert verified.returncode == 0, verified.stderr
        assert verified.stdout == "3 sagas, 17 entries: OK\n"
        (line,) = [line for line in demo.stdout.splitlines() if line.startswith("verify: ")]
        assert line == "verify: " + verified.stdout.strip()

    def test_the_reason_the_agent_sees_is_cut_between_words(self, tmp_path: Path) -> None:
        """The shortened reason ends with a whole word, then " …", never mid-word."""
        done = run_cli("demo", "--database", str(tmp_path / "demo.db"))
        (line,) = [line for line in done.stdout.splitlines() if "agent sees: " in line]
        shown = line.split("agent sees: ", 1)[1]
        assert shown.endswith(" …")
        kept = shown.removesuffix(" …")
        sagacity = Sagacity.from_url("memory://")
        (wire,) = [
            t for t in sagacity.wrap(OrderTools(lambda _: None)) if t.name == "send_wire_transfer"
        ]
        full = str(sagacity.saga("w", lambda: wire(amount="1", to="x")).value)
        assert full.startswith(kept)
        assert full[len(kept)] == " "
        assert kept.endswith("it needs a human's")

    def test_the_closing_hint_runs_from_where_make_demo_ran(self, tmp_path: Path) -> None:
        """With .venv/bin off the PATH, the hint names the installed script, and it runs."""
        script = Path(sys.executable).parent / "sagacity"
        assert script.is_file()
        env = {**os.environ, "PATH": "/usr/bin:/bin"}
        env.pop("SAGACITY_DATABASE_URL", None)
        done = subprocess.run(
            [str(script), "demo", "--database", "sagacity-demo.db"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        hint = done.stdout.splitlines()[-3]
        assert hint == (
            f"journal: sagacity-demo.db  (try: {script.absolute()} show order-1001 "
            "--database sagacity-demo.db)"
        )
        shown = subprocess.run(
            hint.split("(try: ", 1)[1].removesuffix(")").split(),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert "order-1001" in shown.stdout

    def test_the_hint_is_relative_below_the_working_directory(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Run from the clone, as `make demo` does, the hint says `.venv/bin/sagacity`."""
        script = Path(sys.executable).parent / "sagacity"
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        monkeypatch.chdir(script.parent.parent.parent)
        assert sagacity_command() == str(Path(script.parent.parent.name, "bin", "sagacity"))


def _sagas(database: Path) -> set[str]:
    conn = sqlite3.connect(database)
    try:
        return {r[0] for r in conn.execute("SELECT DISTINCT saga_id FROM sagacity_journal")}
    finally:
        conn.close()
