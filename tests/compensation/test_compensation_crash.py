"""A process killed with SIGKILL inside a compensation: the next walk does not repeat it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import CallRef, Phase, Sagacity, SagaOutcome, verify
from tests.processes._child import IdempotentWarehouse, Warehouse
from tests.processes._kill import run_until_killed

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

BEFORE_THE_CRASH = [
    (Phase.INTENT, "reserve_inventory", None),
    (Phase.EXECUTED, "reserve_inventory", 1),
    (Phase.INTENT, "charge_card", None),
    (Phase.EXECUTED, "charge_card", 3),
    (Phase.INTENT, "ship", None),
    (Phase.FAILED, "ship", 5),
    (Phase.COMPENSATING, "charge_card", 4),
]
"""The journal the killed process leaves: the refund's intent, and no outcome."""


def run_until_killed_inside_refund(url: str, ledger: Path) -> None:
    """Run the saga in a child process and SIGKILL it once the refund has started."""
    run_until_killed(
        "tests.processes._child", "crash-refund", url, str(ledger), when="inside refund"
    )


def reopen(url: str) -> Sagacity:
    """A Sagacity in this process that waits for the killed worker's lease to expire."""
    return Sagacity.from_url(url, lease_wait=15)


def shape(sagacity: Sagacity) -> list[tuple[Phase, str | None, int | None]]:
    return [(e.phase, e.tool_name, e.ref_seq) for e in sagacity.history("order-1")]


class TestKilledInsideACompensation:
    @pytest.fixture
    def killed(self, shared_store_url: str, tmp_path: Path) -> tuple[str, Path]:
        """The URL and ledger of a saga whose process was killed inside its refund."""
        ledger = tmp_path / "ledger.txt"
        run_until_killed_inside_refund(shared_store_url, ledger)
        return shared_store_url, ledger

    def test_the_intent_survives_and_the_journal_verifies(self, killed: tuple[str, Path]) -> None:
        """The COMPENSATING committed before the refund is there, chained, with no outcome."""
        url, ledger = killed
        sagacity = reopen(url)
        assert verify(sagacity.journal).ok
        assert shape(sagacity) == BEFORE_THE_CRASH
        assert sagacity.history("order-1")[-1].payload == {"attempt": 1}
        assert ledger.read_text().splitlines() == [
            "reserve SKU-42 2",
            "charge 19.99",
            "refund start ch-1 key=charge_card#1",
        ]
        sagacity.close()

    def test_a_plain_compensation_is_listed_in_doubt_and_never_run_again(
        self, killed: tuple[str, Path]
    ) -> None:
        """A fresh process lists the refund in doubt, releases the stock, ends NEEDS_ATTENTION.

        Resolved by a human as done, the next walk ends the saga COMPENSATED, and the
        refund still ran once.
        """
        url, ledger = killed
        sagacity = reopen(url)
        sagacity.wrap(Warehouse(ledger))
        result = sagacity.compensate("order-1")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert result.compensation.compensated == [
            CallRef(seq=2, tool_name="reserve_inventory", call_id="reserve_inventory#1")
        ]
        (in_doubt,) = result.compensation.in_doubt
        assert (in_doubt.seq, in_doubt.call_id) == (4, "charge_card#1")
        assert in_doubt.error is not None
        assert in_doubt.error.startswith("compensation started (COMPENSATING at seq 7)")
        assert shape(sagacity) == [
            *BEFORE_THE_CRASH,
            (Phase.TAKEN_OVER, None, None),  # the killed worker's lease, taken over
            (Phase.COMPENSATING, "reserve_inventory", 2),
            (Phase.COMPENSATED, "reserve_inventory", 2),
            (Phase.ENDED, None, None),
        ]
        sagacity.resolve_compensation("order-1", "charge_card#1", compensated=True, by="ops")
        assert sagacity.compensate("order-1").outcome is SagaOutcome.COMPENSATED
        assert shape(sagacity)[-2:] == [
            (Phase.COMPENSATED, "charge_card", 4),
            (Phase.ENDED, None, None),
        ]
        assert ledger.read_text().splitlines() == [
            "reserve SKU-42 2",
            "charge 19.99",
            "refund start ch-1 key=charge_card#1",
            "release res-SKU-42",
        ]
        assert verify(sagacity.journal).ok
        sagacity.close()

    def test_an_idempotent_compensation_runs_again_exactly_once_with_the_same_key(
        self, killed: tuple[str, Path]
    ) -> None:
        """Declared idempotent, the refund runs again under charge_card#1, then the release."""
        url, ledger = killed
        sagacity = reopen(url)
        sagacity.wrap(IdempotentWarehouse(ledger))
        result = sagacity.compensate("order-1")
        assert result.outcome is SagaOutcome.COMPENSATED
        entries = sagacity.history("order-1")
        assert shape(sagacity) == [
            *BEFORE_THE_CRASH,
            (Phase.TAKEN_OVER, None, None),
            (Phase.COMPENSATING, "charge_card", 4),
            (Phase.COMPENSATED, "charge_card", 4),
            (Phase.COMPENSATING, "reserve_inventory", 2),
            (Phase.COMPENSATED, "reserve_inventory", 2),
            (Phase.ENDED, None, None),
        ]
        assert entries[8].payload == {"attempt": 2}
        assert sagacity.compensate("order-1").outcome is SagaOutcome.COMPENSATED
        assert sagacity.history("order-1") == entries  # nothing is run or journaled again
        assert ledger.read_text().splitlines() == [
            "reserve SKU-42 2",
            "charge 19.99",
            "refund start ch-1 key=charge_card#1",
            "refund start ch-1 key=charge_card#1",
            "refund done ch-1",
            "release res-SKU-42",
        ]
        assert verify(sagacity.journal).ok
        sagacity.close()
