"""The `sagacity` command, run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity
from sagacity.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sagacity.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestDemo:
    def test_demo_compensates_then_approves(self, tmp_path: Path) -> None:
        """The demo's order saga is compensated in reverse order; the wire waits, then runs."""
        database = tmp_path / "demo.db"
        done = run_cli("demo", "--database", str(database))
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert "compensated, in order: charge_card, reserve_inventory" in out
        assert out.index("refunded ch_1M2n3") < out.index("released res-8891")
        assert "outcome: AWAITING_APPROVAL" in out
        assert out.count("wired 12500.00 EUR") == 1
        assert "verify: 2 sagas, 16 entries, chain intact" in out

        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            order = [(e.phase, e.tool_name) for e in sagacity.journal.entries("order-1001")]
            wire = [e.phase for e in sagacity.journal.entries("wire-1002")]
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

    def test_demo_runs_again_on_the_same_file(self, tmp_path: Path) -> None:
        """`make demo` twice in a row works: the demo starts from a fresh file."""
        database = str(tmp_path / "demo.db")
        assert main(["demo", "--database", database]) == 0
        assert main(["demo", "--database", database]) == 0


@pytest.fixture
def demo_db(tmp_path: Path) -> str:
    database = str(tmp_path / "demo.db")
    assert main(["demo", "--database", database]) == 0
    return database


class TestInspection:
    def test_verify_ok_and_broken(self, demo_db: str) -> None:
        """`verify` exits 0 on the demo journal, 1 naming saga and seq once a row is edited."""
        ok = run_cli("verify", "--database", demo_db)
        assert ok.returncode == 0
        assert "2 sagas, 16 entries: OK" in ok.stdout

        import sqlite3

        conn = sqlite3.connect(demo_db)
        conn.execute("DROP TRIGGER sagacity_journal_no_update")
        conn.execute(
            'UPDATE sagacity_journal SET payload = \'{"result":"ch_FORGED"}\' '
            "WHERE saga_id = 'order-1001' AND seq = 4"
        )
        conn.commit()
        conn.close()
        broken = run_cli("verify", "--database", demo_db)
        assert broken.returncode == 1
        assert "saga 'order-1001' seq 4: hash mismatch" in broken.stdout

    def test_verify_and_export_name_an_unreadable_row(self, demo_db: str) -> None:
        """A row that cannot be read: `verify` names it and exits 1, `export` exits 2.

        No traceback: verify reports the row and still checks the other saga; export
        stops with an error naming the saga and seq.
        """
        import sqlite3

        conn = sqlite3.connect(demo_db)
        conn.execute("DROP TRIGGER sagacity_journal_no_update")
        conn.execute(
            "UPDATE sagacity_journal SET phase = 'BOGUS' WHERE saga_id = 'order-1001' AND seq = 4"
        )
        conn.commit()
        conn.close()
        broken = run_cli("verify", "--database", demo_db)
        assert broken.returncode == 1, broken.stderr
        assert broken.stdout.splitlines() == [
            "saga 'order-1001' seq 4: unreadable row: phase 'BOGUS' is not a phase",
            "2 sagas, 9 entries: 1 broken",  # order-1001's seqs 1-4, wire-1002's 5
        ]
        assert broken.stderr == ""
        assert run_cli("verify", "--database", demo_db, "--saga", "wire-1002").returncode == 0
        exported = run_cli("export", "--database", demo_db)
        assert exported.returncode == 2
        assert exported.stderr.startswith(
            "sagacity export: saga 'order-1001' seq 4: the stored row cannot be read "
            "(phase 'BOGUS' is not a phase)"
        )
        assert "Traceback" not in exported.stderr

    def test_export_jsonl_holds_every_entry(self, demo_db: str, tmp_path: Path) -> None:
        """`export` writes one JSON object per entry with its hash."""
        out = tmp_path / "journal.jsonl"
        done = run_cli("export", "--database", demo_db, "--output", str(out))
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 16
        assert [r["seq"] for r in rows if r["saga_id"] == "wire-1002"] == [1, 2, 3, 4, 5]
        assert all(len(r["hash"]) == 64 for r in rows)

    def test_export_csv(self, demo_db: str) -> None:
        """`export --format csv` writes a header and one row per entry."""
        done = run_cli("export", "--database", demo_db, "--format", "csv", "--saga", "wire-1002")
        lines = done.stdout.strip().splitlines()
        assert lines[0].startswith("saga_id,seq,phase,")
        assert len(lines) == 6

    def test_show_and_sagas(self, demo_db: str) -> None:
        """`show` prints the table; `sagas` lists ids and states; an unknown saga exits 1."""
        shown = run_cli("show", "order-1001", "--database", demo_db)
        assert shown.stdout.splitlines()[0].split() == ["seq", "phase", "tool", "call", "id",
                                                         "ref", "hash"]  # fmt: skip
        assert "COMPENSATING  charge_card" in shown.stdout
        assert run_cli("sagas", "--database", demo_db).stdout.splitlines() == [
            "saga        state",
            "order-1001  COMPENSATED",
            "wire-1002   COMPLETED",
        ]
        only = run_cli("sagas", "--outcome", "COMPLETED", "--database", demo_db)
        assert only.stdout.splitlines()[1:] == ["wire-1002  COMPLETED"]
        assert run_cli("show", "nope", "--database", demo_db).returncode == 1


class TestApprovalCommands:
    def test_pending_and_approve(self, tmp_path: Path) -> None:
        """A request made by one process is listed and approved from the command line."""
        from sagacity import Reversibility, compensable

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(amount: str) -> str:
            return "wt-1"

        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        (tool,) = sagacity.wrap(wire)
        waiting = sagacity.saga("w-1", lambda: tool(amount="10"))
        request = waiting.pending[0]

        listed = run_cli("pending", "--database", database)
        assert listed.stdout == (
            f"w-1  request {request.request_id}  wire  waiting  "
            f'sha256 {request.input_sha256}  {{"amount":"10"}}\n'
        )

        wrong = run_cli("approve", "w-1", "--approver", "bob", "--sha256", "0" * 64,
                        "--database", database)  # fmt: skip
        assert wrong.returncode == 2
        assert "saga 'w-1'" in wrong.stderr

        done = run_cli("approve", "w-1", "--approver", "bob", "--sha256",
                       request.input_sha256, "--database", database)  # fmt: skip
        assert done.returncode == 0, done.stderr
        (approval,) = sagacity.pending("w-1")[0].approvals
        shown = run_cli("pending", "--database", database).stdout
        assert f"  wire  approved by bob at {approval.approved_at}  sha256" in shown
        again = run_cli("approve", "w-1", "--approver", "carol", "--database", database)
        assert again.returncode == 2
        assert "was approved by 'bob'" in again.stderr
        result = sagacity.resume_saga("w-1")
        assert result.value == "wt-1"
        approved = [e for e in sagacity.journal.entries("w-1") if e.phase is Phase.APPROVED]
        assert approved[0].payload == {
            "approver": "bob",
            "input_sha256": request.input_sha256,
            "request_id": request.request_id,
        }
        sagacity.close()
