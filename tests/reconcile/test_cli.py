"""The CLI shows verdicts and their evidence, and journals a human's evidence with `resolve`."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from sagacity import Phase, Sagacity, SagaOutcome, verify
from tests.cli._run import run_cli
from tests.reconcile._payments import Mode, Payments, Stop


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def timed_out_charge(tmp_path: Path, mode: Mode) -> str:
    """A SQLite database whose saga `pay-1` has charge#1 time out after charging."""
    database = str(tmp_path / "s.db")
    with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
        payments = Payments(tmp_path / "ledger", mode=mode, stops={"after-charge": Stop.TIMEOUT})
        tools = {t.name: t for t in sagacity.wrap(payments)}

        def work() -> None:
            tools["reserve"]("SKU-1")
            tools["charge"]("19.99")

        result = sagacity.saga("pay-1", work)
    expected = SagaOutcome.COMPENSATED if mode is Mode.HONEST else SagaOutcome.NEEDS_ATTENTION
    assert result.outcome is expected
    return database


class TestShow:
    def test_show_prints_the_verdict_and_its_evidence(self, tmp_path: Path) -> None:
        """`sagacity show` names who decided, what, and the evidence's reference and digest."""
        database = timed_out_charge(tmp_path, Mode.HONEST)
        shown = run_cli("show", "pay-1", "--database", database)
        assert shown.returncode == 0, shown.stderr
        digest = hashlib.sha256(b"charge charge#1 19.99").hexdigest()
        assert (
            f"  call charge#1: landed by reconciler:charge (seq 5), evidence charge#1 sha256 "
            f"{digest}\n" in shown.stdout
        )
        assert re.search(r"\n\S+\s+5\s+RECONCILED\s+charge\s+charge#1\s+3 ", shown.stdout)
        document = json.loads(run_cli("show", "pay-1", "--json", "--database", database).stdout)
        assert document["verdicts"] == [
            {
                "seq": 5,
                "call_id": "charge#1",
                "tool_name": "charge",
                "subject": "call",
                "verdict": "landed",
                "decided_by": "reconciler:charge",
                "evidence": {"reference": "charge#1", "sha256": digest},
            }
        ]


class TestDoubts:
    def test_doubts_show_a_reconciler_that_failed_and_one_that_never_answered(
        self, tmp_path: Path
    ) -> None:
        """A raising reconciler's failure is on its doubt's row; a call without one says so."""
        database = timed_out_charge(tmp_path, Mode.RAISE)
        rows = run_cli("doubts", "--database", database).stdout.splitlines()
        assert cells(rows[0])[-1] == "reconciler"
        assert cells(rows[1])[-1] == (
            "unknown by reconciler:charge (seq 5): the reconciler raised: the reconciler of "
            "tool 'charge' raised ConnectionError: provider unreachable"
        )
        (document,) = [
            json.loads(line)
            for line in run_cli("doubts", "--json", "--database", database).stdout.splitlines()
        ]
        assert document["reconciled"]["failure"] == "raised"
        assert document["reconciled"]["decided_by"] == "reconciler:charge"


class TestResolveWithEvidence:
    def test_the_evidence_is_journaled_with_the_finding(self, tmp_path: Path) -> None:
        """`--evidence` and `--evidence-sha256` go into the EXECUTED the human's finding writes."""
        database = timed_out_charge(tmp_path, Mode.UNKNOWN)
        digest = hashlib.sha256(b'{"id":"ch_1"}').hexdigest()
        done = run_cli(
            "resolve", "pay-1", "charge#1", "--executed", "--result", '"ch-charge#1"',
            "--by", "oncall", "--reason", "the provider's dashboard",
            "--evidence", "ch_1", "--evidence-sha256", digest.upper(),
            "--database", database,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            entry = sagacity.history("pay-1")[-1]
            assert entry.phase is Phase.EXECUTED
            assert entry.payload == {
                "result": "ch-charge#1",
                "resolved_by": "oncall",
                "reason": "the provider's dashboard",
                "evidence": {"reference": "ch_1", "sha256": digest},
            }
            assert verify(sagacity.journal).ok
        shown = run_cli("show", "pay-1", "--database", database).stdout
        assert f"  call charge#1: landed by oncall (seq {entry.seq}), evidence ch_1" in shown

    def test_bad_evidence_is_refused_and_nothing_is_journaled(self, tmp_path: Path) -> None:
        """A lone reference, or a digest that is not 64 hex digits: exit 2, journal unchanged."""
        database = timed_out_charge(tmp_path, Mode.UNKNOWN)
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            before = len(sagacity.history("pay-1"))
        lone = run_cli(
            "resolve", "pay-1", "charge#1", "--not-executed", "--by", "oncall",
            "--evidence", "ch_1", "--database", database,
        )  # fmt: skip
        assert lone.returncode == 2
        assert "--evidence and --evidence-sha256 go together" in lone.stderr
        short = run_cli(
            "resolve", "pay-1", "charge#1", "--not-executed", "--by", "oncall",
            "--evidence", "ch_1", "--evidence-sha256", "abc", "--database", database,
        )  # fmt: skip
        assert short.returncode == 2
        assert "must be 64 hex digits, not 'abc'" in short.stderr
        with Sagacity.from_url(f"sqlite:///{database}") as sagacity:
            assert len(sagacity.history("pay-1")) == before
