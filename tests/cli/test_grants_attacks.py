"""`sagacity grant` and `grants` against hostile text and terms, and what a covered call leaves.

Run as a user runs them, on a SQLite file. A reason, principal or constraint holding
escape sequences or a bidi override is shown escaped, never raw; terms no journal holds
exit 2 with nothing journaled. A call a grant covered is named in `sagacity export` (its
INTENT's `approval_grant`, and the GRANT_USED it names) and counted by `sagacity report
fatigue`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sagacity import Reversibility, Sagacity, SagaOutcome, compensable
from tests.cli._run import run_cli

HOSTILE = "\x1b[2J\x1b[31mAPPROVED\u202eevil"


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def pay(amount: Any, payee: str) -> str:
    """Pay a supplier."""
    return "paid"


@pytest.fixture
def database(tmp_path: Path) -> str:
    """An initialised SQLite file."""
    path = str(tmp_path / "grants.db")
    assert run_cli("init", "--database", path).returncode == 0
    return path


def _grant(database: str, *options: str) -> Any:
    return run_cli(
        "grant", "pay", "--database", database, "--grantor", "carol", "--max-calls", "3", *options
    )


class TestHostileText:
    def test_reason_principal_and_constraint_are_shown_escaped(self, database: str) -> None:
        """No escape sequence or bidi override reaches the terminal from grant or grants."""
        made = _grant(
            database,
            "--ttl", "1h", "--reason", HOSTILE, "--for", "alice",
            "--equals", f"payee={HOSTILE}",
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        listed = run_cli("grants", "--database", database)
        assert listed.returncode == 0, listed.stderr
        for shown in (made.stdout, listed.stdout):
            assert "\x1b" not in shown
            assert "\u202e" not in shown
        assert '\\u001b[31mAPPROVED\\u202eevil"' in listed.stdout
        document = json.loads(run_cli("grants", "--database", database, "--json").stdout)
        assert document[0]["reason"] == HOSTILE  # JSON carries the text exactly

    def test_a_principal_with_a_bidi_override_is_refused(self, database: str) -> None:
        """`al` + U+202E + `ice` would read as another name in every listing: exit 2."""
        refused = _grant(database, "--ttl", "1h", "--for", "al\u202eice")
        assert refused.returncode == 2, refused.stderr
        assert "U+202E at position 2" in refused.stderr
        assert json.loads(run_cli("grants", "--database", database, "--json").stdout) == []

    @pytest.mark.parametrize(
        ("options", "why"),
        [
            (["--expires", "9999-12-31T23:59:00-01:00"], "past the last time a journal holds"),
            (["--ttl", "99999999999999999999d"], "is not a length of time a grant can last"),
            (["--ttl", "1h", "--max-amount", "NaN", "--amount-field", "amount"], "not JSON"),
            (["--ttl", "1h", "--equals", "payee=12345678901234567"], "is not JSON"),
        ],
    )
    def test_terms_no_journal_holds_exit_2(
        self, database: str, options: list[str], why: str
    ) -> None:
        """Refused with the reason, nothing journaled."""
        refused = _grant(database, *options)
        assert refused.returncode == 2, refused.stderr
        assert why in refused.stderr
        assert json.loads(run_cli("grants", "--database", database, "--json").stdout) == []


class TestWhatACoveredCallLeaves:
    def test_export_and_the_fatigue_report_name_the_grant(self, database: str) -> None:
        """The INTENT names the grant, its use and the GRANT_USED; the report counts it."""
        made = _grant(database, "--ttl", "1h")
        assert made.returncode == 0, made.stderr
        grant_id = made.stdout.split()[1].rstrip(":")
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            (tool,) = sagacity.wrap(pay)
            outcome = sagacity.saga("s1", lambda: tool(amount=5, payee="ACME"), started_by="alice")
            assert outcome.outcome is SagaOutcome.COMPLETED

        exported = run_cli("export", "--database", database)
        assert exported.returncode == 0, exported.stderr
        entries = [json.loads(line) for line in exported.stdout.splitlines()]
        (intent,) = [e for e in entries if e["saga_id"] == "s1" and e["phase"] == "INTENT"]
        covered = intent["payload"]["approval_grant"]
        assert (covered["grant_id"], covered["grantor"], covered["use"]) == (grant_id, "carol", 1)
        (used,) = [e for e in entries if e["phase"] == "GRANT_USED"]
        assert (used["saga_id"], used["seq"], used["hash"]) == (
            f"grant-{grant_id}",
            covered["grant_seq"],
            covered["grant_hash"],
        )
        assert (used["payload"]["saga_id"], used["payload"]["call_id"]) == ("s1", intent["call_id"])

        shown = run_cli("show", "s1", "--database", database)
        assert shown.returncode == 0, shown.stderr
        assert (
            f"seq 1 pay ran without asking: covered by grant {grant_id} of carol (use 1, "
            f"GRANT_USED at seq {covered['grant_seq']} of its chain)"
        ) in shown.stdout

        report = run_cli("report", "fatigue", "--database", database, "--json")
        assert report.returncode == 0, report.stderr
        counted = json.loads(report.stdout)
        assert (counted["gated_calls"], counted["asked"], counted["covered_by_grant"]) == (1, 0, 1)
