"""The approval fatigue report: gated calls asked, covered by rules and grants, and times.

The counts run on a real journal (memory, SQLite, PostgreSQL) with real rules, grants and
decisions; exact times and percentiles run on entries whose `recorded_at` is set, as an
export read back holds them.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from sagacity import (
    JournalEntry,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
)
from sagacity.audit import approval_fatigue, export_jsonl, read_jsonl
from sagacity.audit._fatigue import _EXPIRY_SOURCE, _GATE_TIMEOUT
from sagacity.workflows import GATE_TIMEOUT_APPROVER
from tests.cli._run import run_cli


class Payouts:
    @compensable(reversibility=Reversibility.IRREVERSIBLE, approval="amount > 1000")
    def wire(self, amount: int, to: str) -> str:
        """Wire money: over 1000 a human approves."""
        return f"wired {amount} to {to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def close_account(self, account: str) -> str:
        """Always asks, unless a standing grant covers it."""
        return f"closed {account}"


def journal_of_a_week(sagacity: Sagacity) -> None:
    """Two wires the rule lets through, one the grant covers, four that ask."""
    tools = {tool.name: tool for tool in sagacity.wrap(Payouts())}
    wire, close = tools["wire"], tools["close_account"]
    for n in (1, 2):
        assert sagacity.saga(f"small-{n}", lambda: wire(amount=10, to="ACME")).outcome is (
            SagaOutcome.COMPLETED
        )
    sagacity.grant("close_account", grantor="carol", max_calls=1, ttl=3600)
    assert sagacity.saga("granted", lambda: close(account="A-1"), started_by="alice").outcome is (
        SagaOutcome.COMPLETED
    )
    for saga_id in ("big-cli", "big-api", "big-rejected", "big-waiting"):
        paused = sagacity.saga(saga_id, lambda: wire(amount=5000, to="ACME"), started_by="alice")
        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
    sagacity.approve("big-cli", approver="bob", via="cli")
    sagacity.approve("big-api", approver="bob", via="api")
    sagacity.reject("big-rejected", approver="dave", reason="not this payee", via="inbox")


class TestOnAJournal:
    def test_counts_what_asked_and_what_rules_and_grants_covered(self, sagacity: Sagacity) -> None:
        """Seven gated calls: four asked, two ruled out, one granted; outcomes as decided."""
        journal_of_a_week(sagacity)
        report = approval_fatigue(sagacity.journal)
        assert (report.sagas, report.gated_calls, report.asked, report.requests) == (7, 7, 4, 4)
        assert (report.covered_by_rule, report.covered_by_grant) == (2, 1)
        assert report.outcomes == {
            "approved": 2,
            "rejected": 1,
            "expired": 0,
            "edited": 0,
            "declined": 0,
            "waiting": 1,
        }
        assert {c.via: c.decisions for c in report.channels} == {"cli": 1, "api": 1, "inbox": 1}
        for channel in report.channels:
            assert 0 <= channel.median_seconds <= channel.p90_seconds < 60
        assert report.to_json()["asked_percent"] == 57.1

    def test_an_export_read_back_gives_the_same_report(
        self, sagacity: Sagacity, tmp_path: Path
    ) -> None:
        """The report reads entries, so an exported journal measures as the live one."""
        journal_of_a_week(sagacity)
        exported = tmp_path / "journal.jsonl"
        with exported.open("w", encoding="utf-8") as out:
            export_jsonl(sagacity.journal, out)
        with exported.open(encoding="utf-8") as lines:
            assert approval_fatigue(read_jsonl(lines)) == approval_fatigue(sagacity.journal)

    def test_an_edited_request_counts_as_edited_and_its_replacement_asks(
        self, sagacity: Sagacity
    ) -> None:
        """The edit closes one request and asks again: two requests of one call."""
        (close,) = (t for t in sagacity.wrap(Payouts()) if t.name == "close_account")
        sagacity.saga("edit", lambda: close(account="A-1"), started_by="alice")
        sagacity.edit("edit", approver="bob", new_input={"account": "A-2"})
        report = approval_fatigue(sagacity.journal)
        assert (report.asked, report.requests) == (1, 2)
        assert (report.outcomes["edited"], report.outcomes["waiting"]) == (1, 1)
        assert report.channels == ()

    def test_an_empty_journal_reports_nothing_asked(self, sagacity: Sagacity) -> None:
        """No gated call: zeros, no division by zero."""
        report = approval_fatigue(sagacity.journal)
        assert (report.gated_calls, report.share(report.asked), report.channels) == (0, 0.0, ())


T0 = datetime.datetime(2026, 3, 2, 9, 0, tzinfo=datetime.UTC)


class Entries:
    """Entries of a journal, shaped as sagacity journals them, at chosen times."""

    def __init__(self) -> None:
        self.entries: list[JournalEntry] = []
        self.seqs: dict[str, int] = {}

    def add(
        self,
        saga_id: str,
        phase: Phase,
        at: float,
        payload: dict[str, Any],
        *,
        call_id: str = "c#1",
        ref_seq: int | None = None,
    ) -> int:
        seq = self.seqs[saga_id] = self.seqs.get(saga_id, 0) + 1
        self.entries.append(
            JournalEntry(
                saga_id=saga_id,
                seq=seq,
                phase=phase,
                tool_name="wire",
                call_id=call_id,
                ref_seq=ref_seq,
                payload=payload,
                recorded_at=(T0 + datetime.timedelta(seconds=at)).isoformat(),
                prev_hash="0" * 64,
                hash="0" * 64,
            )
        )
        return seq

    def ask(self, saga_id: str, at: float, request_id: str, **payload: Any) -> int:
        return self.add(saga_id, Phase.AWAITING_APPROVAL, at, {"request_id": request_id, **payload})

    def decide(self, saga_id: str, phase: Phase, at: float, asked: int, **payload: Any) -> None:
        self.add(saga_id, phase, at, payload, ref_seq=asked)


class TestTimes:
    def test_median_and_p90_by_channel(self) -> None:
        """Ten inbox approvals taking 10..100 s: median 55 s, p90 90 s (nearest rank)."""
        journal = Entries()
        for n in range(1, 11):
            saga = f"s-{n}"
            asked = journal.ask(saga, 0, f"r{n}")
            journal.decide(saga, Phase.APPROVED, 10 * n, asked, approver="bob", via="inbox")
        asked = journal.ask("s-slack", 0, "rs")
        journal.decide("s-slack", Phase.REJECTED, 3600, asked, approver="bob", via="slack")
        (inbox, slack) = approval_fatigue(journal.entries).channels
        assert (inbox.via, inbox.decisions, inbox.median_seconds, inbox.p90_seconds) == (
            "inbox",
            10,
            55.0,
            90.0,
        )
        assert (slack.via, slack.decisions, slack.median_seconds, slack.p90_seconds) == (
            "slack",
            1,
            3600.0,
            3600.0,
        )

    def test_each_approver_of_a_two_approver_request_is_a_decision(self) -> None:
        """Both approvals are timed; the request is approved once both are in."""
        journal = Entries()
        asked = journal.ask("two", 0, "r", approvers_required=2)
        journal.decide("two", Phase.APPROVED, 60, asked, approver="bob", via="email")
        journal.decide("two", Phase.APPROVED, 60, asked, approver="bob", via="email")  # again
        first = approval_fatigue(journal.entries)
        assert first.outcomes["waiting"] == 1
        journal.decide("two", Phase.APPROVED, 120, asked, approver="carol", via="email")
        report = approval_fatigue(journal.entries)
        assert report.outcomes["approved"] == 1
        (email,) = report.channels
        assert (email.decisions, email.median_seconds, email.p90_seconds) == (2, 90.0, 120.0)

    def test_old_decisions_without_a_channel_are_unrecorded(self) -> None:
        """A journal from before `via` still measures: its channel is `unrecorded`."""
        journal = Entries()
        asked = journal.ask("old", 0, "r")
        journal.decide("old", Phase.APPROVED, 5, asked, approver="bob")
        (channel,) = approval_fatigue(journal.entries).channels
        assert (channel.via, channel.decisions) == ("unrecorded", 1)


class TestOutcomes:
    def test_expiry_gate_timeouts_declines_and_reasks(self) -> None:
        """Denied at expiry, a gate's timeout, a re-ask after expiry: expired; no human time."""
        journal = Entries()
        asked = journal.ask("denied", 0, "r1")
        journal.decide(
            "denied", Phase.REJECTED, 900, asked, approver=None, source=_EXPIRY_SOURCE, reason="x"
        )
        asked = journal.ask("gate", 0, "r2")
        journal.decide("gate", Phase.REJECTED, 900, asked, approver=_GATE_TIMEOUT, reason="t")
        journal.ask("reasked", 0, "r3")
        journal.ask("reasked", 900, "r4", replaces="r3")
        asked = journal.ask("declined", 0, "r5")
        journal.decide(
            "declined", Phase.REJECTED, 9, asked, approver=None, source="openai_agents", reason="n"
        )
        journal.add(
            "escalated",
            Phase.ESCALATED,
            5,
            {"group": "cfo"},
            ref_seq=journal.ask("escalated", 0, "r6"),
        )
        report = approval_fatigue(journal.entries)
        assert report.outcomes == {
            "approved": 0,
            "rejected": 0,
            "expired": 3,
            "edited": 0,
            "declined": 1,
            "waiting": 2,
        }
        assert (report.asked, report.requests, report.escalated) == (5, 6, 1)
        assert report.channels == ()

    def test_a_grant_shaped_as_the_contract_says_counts_as_covered(self) -> None:
        """An INTENT carrying `approval_grant` (at least `grant_id`) is a covered call."""
        journal = Entries()
        journal.add("g", Phase.INTENT, 0, {"input": {}, "approval_grant": {"grant_id": "g1"}})
        journal.add("r", Phase.INTENT, 0, {"input": {}, "approval_rule": {"asked": False}})
        journal.add("plain", Phase.INTENT, 0, {"input": {}})
        report = approval_fatigue(journal.entries)
        assert (report.gated_calls, report.covered_by_grant, report.covered_by_rule) == (2, 1, 1)

    def test_the_gate_timeout_name_is_the_workflows_own(self) -> None:
        """The report recognises a gate's timeout by the name the workflows journal."""
        assert _GATE_TIMEOUT == GATE_TIMEOUT_APPROVER


class TestCommand:
    def test_text_and_json(self, tmp_path: Path) -> None:
        """`sagacity report fatigue`: the counts, a table by channel, and the same as JSON."""
        url = f"sqlite:///{tmp_path / 'week.db'}"
        with Sagacity.from_url(url) as sagacity:
            journal_of_a_week(sagacity)
        text = run_cli("report", "fatigue", "--database", url)
        assert text.returncode == 0, text.stderr
        assert "gated calls        7 in 7 saga(s)\n" in text.stdout
        assert "asked a human      4 (57.1%), in 4 request(s)\n" in text.stdout
        assert "covered by rules   2 (28.6%)\n" in text.stdout
        assert "covered by grants  1 (14.3%)\n" in text.stdout
        assert "2 approved, 1 rejected, 0 expired, 0 edited, 0 declined, 1 waiting" in text.stdout
        assert {line.split()[0] for line in text.stdout.splitlines()[-3:]} == {
            "api",
            "cli",
            "inbox",
        }
        as_json = run_cli("report", "fatigue", "--json", "--database", url)
        document = json.loads(as_json.stdout)
        assert (document["gated_calls"], document["asked"], document["covered_by_grant"]) == (
            7,
            4,
            1,
        )
        assert sorted(c["via"] for c in document["channels"]) == ["api", "cli", "inbox"]
        one = run_cli("report", "fatigue", "--saga", "big-cli", "--json", "--database", url)
        assert json.loads(one.stdout)["asked"] == 1
        missing = run_cli("report", "fatigue", "--saga", "nope", "--database", url)
        assert missing.returncode == 1
        assert "nope" in missing.stderr
        unknown = run_cli("report", "boredom", "--database", url)
        assert unknown.returncode == 2
