"""Every source of doubt, on every backend: the reconciler's verdict settles it, or a human does.

- landed: the effect is compensated exactly once, the saga ends COMPENSATED.
- did not land: an approved call runs exactly once on resume; a compensation runs again once.
- unknown, raising, hanging: NEEDS_ATTENTION, the failure journaled, nothing undone twice.
- a "did not land" over an EXECUTED in the journal: ignored, journaled as ignored, logged.
"""

from __future__ import annotations

import hashlib
import logging

import pytest

from sagacity import JournalEntry, Phase, SagaOutcome, verify
from tests.reconcile._payments import Mode
from tests.reconcile.conftest import Recovered, Workers

IN_PROCESS = ["timeout", "cancel", "takeover"]
"""The sources a test can cause on every backend, memory included."""

pytestmark = pytest.mark.slow


def verdicts(recovered: Recovered) -> list[JournalEntry]:
    return [e for e in recovered.sagacity.history("pay-1") if e.phase is Phase.RECONCILED]


def charges(recovered: Recovered) -> list[str]:
    return [line for line in recovered.ledger() if line.startswith("charge ")]


def assert_landed_and_compensated_once(recovered: Recovered) -> None:
    """The saga ends COMPENSATED; the charge found was refunded exactly once, with evidence."""
    assert recovered.result.outcome is SagaOutcome.COMPENSATED
    assert charges(recovered) == ["charge charge#1 19.99"]
    assert [line for line in recovered.ledger() if not line.startswith(("charge", "reserve"))] == [
        "refund ch-charge#1",
        "release res-SKU-1",
    ]
    (verdict,) = verdicts(recovered)
    line = "charge charge#1 19.99"
    assert verdict.payload == {
        "subject": "call",
        "verdict": "landed",
        "decided_by": "reconciler:charge",
        "evidence": {"reference": "charge#1", "sha256": hashlib.sha256(line.encode()).hexdigest()},
        "result": "ch-charge#1",
    }
    history = recovered.sagacity.history("pay-1")
    executed = history[verdict.seq]  # the entry right after the verdict
    assert (executed.phase, executed.ref_seq) == (Phase.EXECUTED, verdict.ref_seq)
    assert executed.payload["resolved_by"] == "reconciler:charge"
    assert executed.payload["verdict_seq"] == verdict.seq
    assert verify(recovered.sagacity.journal).ok


class TestACallThatLanded:
    @pytest.mark.parametrize("source", IN_PROCESS)
    def test_is_compensated_exactly_once(self, workers: Workers, source: str) -> None:
        """The reconciler finds the charge: it counts as EXECUTED and is refunded once."""
        assert_landed_and_compensated_once(workers.charge(source, landed=True, mode=Mode.HONEST))

    def test_killed_between_intent_and_executed(self, shared_workers: Workers) -> None:
        """A child SIGKILLed after charging: the worker taking over refunds the charge it finds."""
        recovered = shared_workers.charge("kill", landed=True, mode=Mode.HONEST)
        assert_landed_and_compensated_once(recovered)
        again = recovered.sagacity.compensate("pay-1")  # nothing left to do, nothing repeated
        assert again.outcome is SagaOutcome.COMPENSATED
        assert recovered.ledger().count("refund ch-charge#1") == 1


class TestACallThatDidNotLand:
    @pytest.mark.parametrize("source", IN_PROCESS)
    def test_the_approved_call_runs_exactly_once_on_resume(
        self, workers: Workers, source: str
    ) -> None:
        """The wire was not sent: its approval stands and the next resume sends it once."""
        self.assert_sent_once(workers, source)

    def test_killed_before_the_wire_was_sent(self, shared_workers: Workers) -> None:
        """A child SIGKILLed inside the approved wire, before it was sent: resume sends it once."""
        self.assert_sent_once(shared_workers, "kill")

    @staticmethod
    def assert_sent_once(workers: Workers, source: str) -> None:
        recovered = workers.wire_not_sent(source)
        sagacity = recovered.sagacity
        if recovered.result.outcome is SagaOutcome.AWAITING_APPROVAL:
            # The run that met the doubt left the saga waiting for the next resume.
            assert [r.tool_name for r in recovered.result.pending] == ["wire"]
            recovered.result = sagacity.resume_saga("pay-1")
        assert recovered.result.outcome is SagaOutcome.COMPLETED
        assert recovered.result.value in ("wr-wire#1", None)
        assert [line for line in recovered.ledger() if line.startswith("wire")] == [
            "wire wire#1 50"
        ]
        (verdict,) = verdicts(recovered)
        assert verdict.payload["verdict"] == "did_not_land"
        assert verdict.payload["decided_by"] == "reconciler:wire"
        history = sagacity.history("pay-1")
        settled = history[verdict.seq]
        assert settled.phase is Phase.FAILED
        assert settled.payload["kind"] == "not_run"
        intents = [e for e in history if e.phase is Phase.INTENT and e.tool_name == "wire"]
        assert len(intents) == 2  # the one in doubt, and the one that ran
        assert verify(sagacity.journal).ok

    @pytest.mark.parametrize("source", IN_PROCESS)
    def test_a_charge_that_never_happened_is_not_refunded(
        self, workers: Workers, source: str
    ) -> None:
        """No charge with the key: nothing is refunded, the reservation is released."""
        recovered = workers.charge(source, landed=False, mode=Mode.HONEST)
        assert recovered.result.outcome is SagaOutcome.COMPENSATED
        assert charges(recovered) == []
        assert [line for line in recovered.ledger() if line.startswith("refund")] == []
        assert "release res-SKU-1" in recovered.ledger()
        assert [v.payload["verdict"] for v in verdicts(recovered)] == ["did_not_land"]


class TestAReconcilerThatCannotTell:
    @pytest.mark.parametrize("source", IN_PROCESS)
    @pytest.mark.parametrize("mode", [Mode.UNKNOWN, Mode.RAISE])
    def test_leaves_the_doubt_to_a_human(self, workers: Workers, source: str, mode: Mode) -> None:
        """Unknown or raising: NEEDS_ATTENTION, its failure journaled, the charge not refunded."""
        self.assert_left_to_a_human(workers, source, mode)

    @pytest.mark.parametrize("mode", [Mode.UNKNOWN, Mode.RAISE])
    def test_killed_and_left_to_a_human(self, shared_workers: Workers, mode: Mode) -> None:
        """The same after a SIGKILL between INTENT and EXECUTED."""
        self.assert_left_to_a_human(shared_workers, "kill", mode)

    @staticmethod
    def assert_left_to_a_human(workers: Workers, source: str, mode: Mode) -> None:
        recovered = workers.charge(source, landed=True, mode=mode)
        assert recovered.result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert [line for line in recovered.ledger() if line.startswith("refund")] == []
        (verdict,) = verdicts(recovered)
        assert verdict.payload["verdict"] == "unknown"
        if mode is Mode.RAISE:
            assert verdict.payload["failure"] == "raised"
            assert verdict.payload["error"] == {
                "type": "ReconcilerFailure",
                "message": "the reconciler of tool 'charge' raised ConnectionError: provider "
                "unreachable",
            }
        else:
            assert verdict.payload["reason"] == "the provider's search is down"
        assert recovered.result.compensation is not None
        assert [r.call_id for r in recovered.result.compensation.in_doubt] == ["charge#1"]
        # A human settles it with evidence; the next walk refunds once.
        recovered.sagacity.resolve(
            "pay-1",
            "charge#1",
            executed=True,
            result="ch-charge#1",
            by="oncall",
            evidence="charge#1",
            evidence_sha256="ab" * 32,
        )
        assert recovered.sagacity.compensate("pay-1").outcome is SagaOutcome.COMPENSATED
        assert recovered.ledger().count("refund ch-charge#1") == 1

    def test_a_hanging_reconciler_is_cut_off_at_its_timeout(self, workers: Workers) -> None:
        """A reconciler past its 0.5 s: its timeout is journaled and the doubt stays."""
        recovered = workers.charge("timeout", landed=True, mode=Mode.HANG)
        try:
            assert recovered.result.outcome is SagaOutcome.NEEDS_ATTENTION
            (verdict,) = verdicts(recovered)
            assert verdict.payload["failure"] == "timed_out"
            assert verdict.payload["verdict"] == "unknown"
        finally:
            recovered.payments.released.set()


class TestALyingReconciler:
    @pytest.mark.parametrize("source", IN_PROCESS)
    def test_did_not_land_over_an_executed_is_ignored_and_logged(
        self, workers: Workers, source: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The call's EXECUTED reaches the journal as the reconciler says "did not land".

        The verdict is journaled with why it was ignored, logged as a warning, and the
        charge counts as executed: refunded once, the saga COMPENSATED.
        """
        self.assert_ignored(workers, source, caplog)

    def test_killed_then_lied_about(
        self, shared_workers: Workers, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The same after a SIGKILL between INTENT and EXECUTED."""
        self.assert_ignored(shared_workers, "kill", caplog)

    @staticmethod
    def assert_ignored(workers: Workers, source: str, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger="sagacity"):
            recovered = workers.charge(source, landed=True, mode=Mode.LIE)
        (verdict,) = verdicts(recovered)
        assert verdict.payload["verdict"] == "did_not_land"
        assert "never trusted over it" in verdict.payload["ignored"]
        assert any("ignored" in r.getMessage() for r in caplog.records)
        history = recovered.sagacity.history("pay-1")
        assert not any(
            e.phase is Phase.FAILED and e.payload.get("kind") == "not_run" for e in history
        )
        assert recovered.result.outcome is SagaOutcome.COMPENSATED
        assert recovered.ledger().count("refund ch-charge#1") == 1


class TestACompensationInDoubt:
    """A refund that timed out (every backend), or whose process was SIGKILLed inside it."""

    def test_a_refund_that_landed_is_not_run_again(self, workers: Workers) -> None:
        """The refund is found: COMPENSATED by the reconciler, and it ran once."""
        self.assert_found(workers.refund("timeout", landed=True, mode=Mode.HONEST))

    def test_killed_inside_a_refund_that_landed(self, shared_workers: Workers) -> None:
        """The same after a SIGKILL inside the refund, once it was sent."""
        self.assert_found(shared_workers.refund("kill", landed=True, mode=Mode.HONEST))

    def test_a_refund_that_did_not_land_runs_again_once(self, workers: Workers) -> None:
        """No refund found: the next walk runs it again, exactly once."""
        self.assert_run_again(workers.refund("timeout", landed=False, mode=Mode.HONEST))

    def test_killed_inside_a_refund_that_did_not_land(self, shared_workers: Workers) -> None:
        """The same after a SIGKILL inside the refund, before it was sent."""
        self.assert_run_again(shared_workers.refund("kill", landed=False, mode=Mode.HONEST))

    @pytest.mark.parametrize("mode", [Mode.UNKNOWN, Mode.RAISE])
    def test_an_unknown_refund_is_left_to_a_human(self, workers: Workers, mode: Mode) -> None:
        """Unknown or raising: NEEDS_ATTENTION, never run twice silently."""
        self.assert_left(workers.refund("timeout", landed=True, mode=mode))

    @pytest.mark.parametrize("mode", [Mode.UNKNOWN, Mode.RAISE])
    def test_killed_inside_a_refund_nobody_can_tell(
        self, shared_workers: Workers, mode: Mode
    ) -> None:
        """The same after a SIGKILL inside the refund."""
        self.assert_left(shared_workers.refund("kill", landed=True, mode=mode))

    @staticmethod
    def assert_found(recovered: Recovered) -> None:
        assert recovered.result.outcome is SagaOutcome.COMPENSATED
        assert recovered.ledger().count("refund ch-charge#1") == 1
        (verdict,) = verdicts(recovered)
        assert verdict.payload["subject"] == "compensation"
        assert verdict.payload["verdict"] == "landed"
        settled = recovered.sagacity.history("pay-1")[verdict.seq]
        assert settled.phase is Phase.COMPENSATED
        assert settled.payload["resolved_by"] == "reconciler:charge"
        assert verify(recovered.sagacity.journal).ok

    @staticmethod
    def assert_run_again(recovered: Recovered) -> None:
        assert recovered.result.outcome is SagaOutcome.COMPENSATED
        assert recovered.ledger().count("refund ch-charge#1") == 1
        (verdict,) = verdicts(recovered)
        assert verdict.payload["verdict"] == "did_not_land"
        history = recovered.sagacity.history("pay-1")
        attempts = [
            e.payload for e in history if e.phase is Phase.COMPENSATING and e.tool_name == "charge"
        ]
        assert attempts == [{"attempt": 1}, {"attempt": 2}]

    @staticmethod
    def assert_left(recovered: Recovered) -> None:
        assert recovered.result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert recovered.ledger().count("refund ch-charge#1") == 1
        (verdict,) = verdicts(recovered)
        assert verdict.payload["verdict"] == "unknown"
