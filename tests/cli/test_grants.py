"""`sagacity grant`, `grants` and `revoke`, run as a user runs them, on a SQLite file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sagacity import Phase, Reversibility, Sagacity, SagaOutcome, compensable
from tests.cli._run import run_cli


class Suppliers:
    def __init__(self) -> None:
        self.paid: list[tuple[Any, str]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(self, amount: Any, payee: str, currency: str = "EUR") -> str:
        """Pay a supplier."""
        self.paid.append((amount, payee))
        return "paid"


@pytest.fixture
def database(tmp_path: Path) -> str:
    path = str(tmp_path / "grants.db")
    assert run_cli("init", "--database", path).returncode == 0
    return path


def _grants(database: str, *options: str) -> list[dict[str, Any]]:
    listed = run_cli("grants", "--database", database, "--json", *options)
    assert listed.returncode == 0, listed.stderr
    shown: list[dict[str, Any]] = json.loads(listed.stdout)
    return shown


def _pay(database: str, saga_id: str, **call: Any) -> tuple[SagaOutcome, list[Any]]:
    with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
        suppliers = Suppliers()
        (pay,) = sagacity.wrap(suppliers)
        outcome = sagacity.saga(saga_id, lambda: pay(**call), started_by="alice").outcome
        return outcome, suppliers.paid


class TestGrantCommands:
    def test_grant_cover_list_and_revoke(self, database: str) -> None:
        """The CLI's grant covers calls in another process; grants shows the budget left."""
        made = run_cli(
            "grant", "pay", "--database", database, "--grantor", "carol",
            "--max-calls", "2", "--ttl", "7d",
            "--one-of", 'payee=["ACME","Globex"]', "--equals", "currency=EUR",
            "--min", "amount=0", "--max", "amount=500",
            "--max-amount", "600", "--amount-field", "amount", "--reason", "monthly run",
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        (shown,) = _grants(database)
        grant_id = shown["grant_id"]
        assert made.stdout.splitlines()[0] == f"grant {grant_id}: GRANTED by carol"
        assert shown["match"] == {
            "payee": {"one_of": ["ACME", "Globex"]},
            "currency": {"equals": "EUR"},
            "amount": {"min": 0, "max": 500},
        }
        assert (shown["state"], shown["remaining_calls"], shown["remaining_amount"]) == (
            "active",
            2,
            "600",
        )

        assert _pay(database, "s1", amount=450, payee="ACME") == (
            SagaOutcome.COMPLETED,
            [(450, "ACME")],
        )
        assert _pay(database, "s2", amount=200, payee="ACME")[0] is SagaOutcome.AWAITING_APPROVAL
        (shown,) = _grants(database)
        assert (shown["used_calls"], shown["remaining_calls"], shown["remaining_amount"]) == (
            1,
            1,
            "150",
        )
        table = run_cli("grants", "--database", database)
        assert "1 of 2" in table.stdout
        assert "150 of 600" in table.stdout

        revoked = run_cli("revoke", grant_id, "--database", database, "--by", "dave")
        assert revoked.returncode == 0, revoked.stderr
        assert revoked.stdout == f"grant {grant_id}: REVOKED by dave; it covered 1 call(s)\n"
        assert _pay(database, "s3", amount=10, payee="ACME")[0] is SagaOutcome.AWAITING_APPROVAL
        assert _grants(database, "--active") == []
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            chain = sagacity.history(f"grant-{grant_id}")
        assert [e.phase for e in chain] == [Phase.GRANTED, Phase.GRANT_USED, Phase.REVOKED]
        assert chain[0].payload["via"] == "cli"  # type: ignore[index,call-overload]
        assert chain[2].payload["via"] == "cli"  # type: ignore[index,call-overload]

    def test_a_self_grant_is_refused(self, database: str) -> None:
        """--for the grantor: exit 2, nothing journaled."""
        refused = run_cli(
            "grant", "pay", "--database", database, "--grantor", "carol", "--for", "carol",
            "--max-calls", "1", "--ttl", "1h",
        )  # fmt: skip
        assert refused.returncode == 2
        assert "'carol' cannot grant a standing approval" in refused.stderr
        assert _grants(database) == []

    @pytest.mark.parametrize(
        ("options", "why"),
        [
            (["--ttl", "soon"], "--ttl 'soon': write a number and a unit"),
            (["--expires", "2030-01-01T00:00:00"], "names no time zone"),
            (["--ttl", "1h", "--min", "amount=lots"], "--min amount: 'lots' is not JSON"),
            (["--ttl", "1h", "--equals", "payee"], "--equals 'payee': write FIELD=VALUE"),
            (["--ttl", "1h", "--equals", "a=1", "--min", "a=0"], "the constraint on 'a' has"),
            (["--ttl", "1h", "--max-amount", "10"], "go together"),
        ],
    )
    def test_bad_terms_are_refused(self, database: str, options: list[str], why: str) -> None:
        """Exit 2 with the reason; nothing journaled."""
        refused = run_cli(
            "grant", "pay", "--database", database, "--grantor", "carol", "--max-calls", "1",
            *options,
        )  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        assert why in refused.stderr
        assert _grants(database) == []

    def test_revoking_an_unknown_or_revoked_grant(self, database: str) -> None:
        """Unknown: exit 1 (nothing found); revoked already: exit 2 naming who revoked it."""
        unknown = run_cli("revoke", "nope", "--database", database, "--by", "dave")
        assert unknown.returncode == 1
        assert "no standing grant 'nope'" in unknown.stderr
        made = run_cli(
            "grant", "pay", "--database", database, "--grantor", "carol",
            "--max-calls", "1", "--ttl", "1h",
        )  # fmt: skip
        grant_id = made.stdout.split()[1].rstrip(":")
        assert run_cli("revoke", grant_id, "--database", database, "--by", "dave").returncode == 0
        again = run_cli("revoke", grant_id, "--database", database, "--by", "erin")
        assert again.returncode == 2
        assert "by 'dave'" in again.stderr
