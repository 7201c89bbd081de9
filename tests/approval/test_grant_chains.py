"""A standing grant's chain is journaled beside the sagas, and is not one.

Its first entry (GRANTED) tells it apart, not its id: the saga listings, the doubts and
the worker leave it out, it is never shown OPEN or STALLED, every saga action on it is
refused naming the grant, and verify still checks it. An application's own saga called
`grant-…` stays a saga. Memory, SQLite and PostgreSQL; the CLI on a SQLite file.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sagacity import (
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    Worker,
    compensable,
    verify,
)
from sagacity._summary import list_doubts, list_summaries, summarize
from sagacity.approval._grants import StandingGrant
from sagacity.worker._watch import open_watch
from tests.approval._edit_row import edit_payload
from tests.cli._run import run_cli


class Payments:
    """Pays payees; every payment that ran is noted."""

    def __init__(self) -> None:
        self.paid: list[tuple[Any, str]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(self, amount: Any, payee: str) -> str:
        """Pay a payee."""
        self.paid.append((amount, payee))
        return f"payment-{len(self.paid)}"


def _pay(sagacity: Sagacity, saga_id: str, **input: Any) -> SagaOutcome:
    tool = sagacity.tool("pay")
    return sagacity.saga(saga_id, lambda: tool(**input), started_by="alice").outcome


def _granted_and_used(sagacity: Sagacity) -> tuple[StandingGrant, StandingGrant]:
    """A grant that covered saga s1 (which completed), and one granted after, never used."""
    sagacity.wrap(Payments())
    used = sagacity.grant("pay", grantor="carol", max_calls=5, ttl=3600)
    assert _pay(sagacity, "s1", amount=1, payee="ACME") is SagaOutcome.COMPLETED
    unused = sagacity.grant("pay", grantor="carol", max_calls=5, ttl=3600)
    return used, unused


def _chains(sagacity: Sagacity, *grants: StandingGrant) -> dict[str, list[Phase]]:
    return {
        f"grant-{g.grant_id}": [e.phase for e in sagacity.history(f"grant-{g.grant_id}")]
        for g in grants
    }


class TestListings:
    def test_sagas_and_doubts_leave_grant_chains_out(self, sagacity: Sagacity) -> None:
        """Only s1 is listed, under any filter; a chain looked up by its id is a GRANT."""
        used, unused = _granted_and_used(sagacity)
        used_chain = f"grant-{used.grant_id}"
        assert [e.phase for e in sagacity.history(used_chain)] == [
            Phase.GRANTED,
            Phase.GRANT_USED,
        ]

        page = list_summaries(sagacity.journal)
        assert [(s.saga_id, s.status) for s in page.summaries] == [("s1", "COMPLETED")]
        assert page.next_cursor is None
        assert list_summaries(sagacity.journal, status="OPEN").summaries == []
        assert list_doubts(sagacity.journal) == []
        assert list_doubts(sagacity.journal, saga_id=used_chain) == []
        shown = summarize(sagacity.journal, used_chain)
        assert (shown.status, shown.entries, shown.pending, shown.in_doubt) == ("GRANT", 2, 0, 0)
        assert summarize(sagacity.journal, f"grant-{unused.grant_id}").status == "GRANT"

    def test_paging_steps_over_grant_chains(self, sagacity: Sagacity) -> None:
        """One saga a page: the chains between the sagas neither fill a page nor end it."""
        sagacity.wrap(Payments())
        for _ in range(3):
            sagacity.grant("pay", grantor="carol", max_calls=5, ttl=3600)
        # grant-… sorts between a… and s…: every page boundary meets the chains.
        for saga_id in ("a1", "s1", "z1"):
            assert _pay(sagacity, saga_id, amount=1, payee="ACME") is SagaOutcome.COMPLETED
        seen, cursor = [], None
        while True:
            page = list_summaries(sagacity.journal, limit=1, cursor=cursor)
            seen += [s.saga_id for s in page.summaries]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == ["a1", "s1", "z1"]

    def test_the_worker_does_not_touch_a_grant_chain(self, sagacity: Sagacity) -> None:
        """Its scan finds no decision in a chain, and a resume of one does nothing."""
        used, unused = _granted_and_used(sagacity)
        before = _chains(sagacity, unused, used)
        watch = open_watch(sagacity.journal)
        try:
            assert watch.all_sagas() == set()
        finally:
            watch.close()
        worker = Worker(sagacity, poll_interval=0.01)
        assert worker.run_once() == 0
        assert worker.resume(f"grant-{used.grant_id}") is False
        assert _chains(sagacity, unused, used) == before


class TestActions:
    def test_saga_actions_on_a_grant_chain_are_refused(self, sagacity: Sagacity) -> None:
        """compensate, resume, run and resolve name the grant; the chain is left as it was."""
        used, unused = _granted_and_used(sagacity)
        before = _chains(sagacity, unused, used)
        for grant in (unused, used):
            chain = f"grant-{grant.grant_id}"
            refusal = f"saga '{chain}' is the chain of standing grant '{grant.grant_id}'"
            attempts: list[Callable[[], object]] = [
                partial(sagacity.compensate, chain),
                partial(sagacity.resume_saga, chain),
                partial(sagacity.resume_saga, chain, lambda: None),
                partial(sagacity.saga, chain, lambda: None),
                partial(sagacity.resolve, chain, "pay#1", executed=True, by="olga"),
            ]
            for attempt in attempts:
                with pytest.raises(SagaStateError, match=refusal) as refused:
                    attempt()
                assert f"sagacity revoke {grant.grant_id}" in str(refused.value)
        assert _chains(sagacity, unused, used) == before
        assert [g.state for g in sagacity.grants()] == ["active", "active"]
        assert _pay(sagacity, "s2", amount=2, payee="ACME") is SagaOutcome.COMPLETED
        assert verify(sagacity.journal).ok

    def test_verify_still_checks_a_grant_chain(self, sagacity: Sagacity, store_url: str) -> None:
        """An edited GRANT_USED is found by verify of all sagas, naming its chain and seq."""
        used, _ = _granted_and_used(sagacity)
        chain = f"grant-{used.grant_id}"
        row = sagacity.history(chain)[1]
        edit_payload(sagacity, store_url, chain, 2, {**row.payload, "amount": 7})  # type: ignore[dict-item]
        report = verify(sagacity.journal)
        assert [(p.saga_id, p.seq) for p in report.problems] == [(chain, 2)]


class TestSagasCalledGrant:
    def test_an_applications_saga_called_grant_stays_a_saga(
        self, sagacity: Sagacity, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Listed, compensable, not a grant, and not read as one at each covered call."""
        sagacity.wrap(Payments())
        grant = sagacity.grant("pay", grantor="carol", max_calls=5, ttl=3600)
        with caplog.at_level(logging.WARNING, logger="sagacity"):
            assert _pay(sagacity, "grant-x", amount=1, payee="ACME") is SagaOutcome.COMPLETED
            assert _pay(sagacity, "s2", amount=1, payee="ACME") is SagaOutcome.COMPLETED
        assert [r.getMessage() for r in caplog.records] == []
        assert [g.grant_id for g in sagacity.grants()] == [grant.grant_id]
        assert sagacity.grants()[0].used_calls == 2
        listed = list_summaries(sagacity.journal).summaries
        assert [(s.saga_id, s.status) for s in listed] == [
            ("grant-x", "COMPLETED"),
            ("s2", "COMPLETED"),
        ]

    def test_a_saga_cannot_take_an_existing_grants_id(self, sagacity: Sagacity) -> None:
        """saga('grant-<id>') of an existing grant is refused: its INTENT would void the grant."""
        sagacity.wrap(Payments())
        grant = sagacity.grant("pay", grantor="carol", max_calls=5, ttl=3600)
        with pytest.raises(SagaStateError, match="is the chain of standing grant"):
            _pay(sagacity, f"grant-{grant.grant_id}", amount=1, payee="ACME")
        assert [e.phase for e in sagacity.history(f"grant-{grant.grant_id}")] == [Phase.GRANTED]
        assert sagacity.get_grant(grant.grant_id).state == "active"


class TestCommandLine:
    def test_sagas_show_and_verify_on_a_file(self, tmp_path: Path) -> None:
        """`sagacity sagas` (any status, STALLED, --json) lists s1 only; show says GRANT."""
        database = str(tmp_path / "grants.db")
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            used, unused = _granted_and_used(sagacity)
        listed = run_cli("sagas", "--database", database, "--json")
        assert listed.returncode == 0, listed.stderr
        documents = [json.loads(line) for line in listed.stdout.splitlines()]
        assert [(d["saga_id"], d["status"], d["stalled"]) for d in documents] == [
            ("s1", "COMPLETED", False)
        ]
        table = run_cli("sagas", "--database", database)
        assert "grant-" not in table.stdout
        assert "STALLED" not in table.stdout
        stalled = run_cli("sagas", "--database", database, "--status", "STALLED,OPEN")
        assert stalled.returncode == 0, stalled.stderr
        assert stalled.stdout.strip() == "no sagas match"
        shown = run_cli("show", f"grant-{used.grant_id}", "--database", database, "--json")
        assert shown.returncode == 0, shown.stderr
        document = json.loads(shown.stdout)
        assert (document["status"], document["stalled"], document["worker"]) == (
            "GRANT",
            False,
            None,
        )
        heading = run_cli("show", f"grant-{unused.grant_id}", "--database", database)
        assert heading.stdout.splitlines()[0].startswith(
            f"saga grant-{unused.grant_id}: GRANT (a standing grant's chain, not a saga"
        )
        checked = run_cli("verify", "--database", database)
        assert checked.returncode == 0, checked.stdout
        assert checked.stdout.strip() == "3 sagas, 6 entries: OK"
        refused = run_cli("compensate", f"grant-{used.grant_id}", "--database", database)
        assert refused.returncode != 0
        assert f"is the chain of standing grant '{used.grant_id}'" in refused.stderr
