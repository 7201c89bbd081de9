"""A process killed with SIGKILL inside a tool: the SQLite journal tells what to undo."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import CallRef, Phase, Sagacity, SagaOutcome
from sagacity.audit import verify
from tests.processes._child import Warehouse
from tests.processes._kill import run_until_killed

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run_until_killed_inside_ship(database: Path, ledger: Path) -> None:
    """Run the saga in a child process and SIGKILL it once `ship` has started."""
    run_until_killed(
        "tests.processes._child",
        "crash",
        f"sqlite:///{database}",
        str(ledger),
        when="inside ship",
    )


class TestKilledInsideATool:
    @pytest.fixture
    def reopened(self, tmp_path: Path) -> tuple[Sagacity, Path]:
        """The journal of a process killed inside `ship`, reopened with the tools wrapped."""
        database, ledger = tmp_path / "journal.db", tmp_path / "ledger.txt"
        run_until_killed_inside_ship(database, ledger)
        # The killed process's lease runs out within a second: wait for it.
        sagacity = Sagacity.from_url(f"sqlite:///{database}", lease_wait=15)
        sagacity.wrap(Warehouse(ledger))
        return sagacity, ledger

    def test_the_journal_survives_and_verifies(self, reopened: tuple[Sagacity, Path]) -> None:
        """Every committed entry is there, chained: two calls done, the third only INTENT."""
        sagacity, ledger = reopened
        assert verify(sagacity.journal).ok
        entries = sagacity.history("order-1")
        assert [(e.phase, e.call_id) for e in entries] == [
            (Phase.INTENT, "reserve_inventory#1"),
            (Phase.EXECUTED, "reserve_inventory#1"),
            (Phase.INTENT, "charge_card#1"),
            (Phase.EXECUTED, "charge_card#1"),
            (Phase.INTENT, "ship#1"),
        ]
        assert entries[4].payload == {"input": {"to": "Berlin"}, "reversibility": "COMPENSATABLE"}
        assert ledger.read_text().splitlines() == ["reserve SKU-42 2", "charge 19.99"]
        sagacity.close()

    def test_compensate_undoes_the_done_calls_and_lists_the_one_in_doubt(
        self, reopened: tuple[Sagacity, Path]
    ) -> None:
        """Reverse order for the EXECUTED calls; the in-doubt call is listed, never undone."""
        sagacity, ledger = reopened
        result = sagacity.compensate("order-1")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.compensated] == [
            "charge_card#1",
            "reserve_inventory#1",
        ]
        (in_doubt,) = result.compensation.in_doubt
        assert (in_doubt.seq, in_doubt.tool_name, in_doubt.call_id) == (5, "ship", "ship#1")
        assert ledger.read_text().splitlines() == [
            "reserve SKU-42 2",
            "charge 19.99",
            "refund start ch-1 key=charge_card#1",
            "refund done ch-1",
            "release res-SKU-42",
        ]
        tail = sagacity.history("order-1")[5:]
        assert [(e.phase, e.ref_seq) for e in tail] == [
            (Phase.TAKEN_OVER, None),  # the killed worker's lease, taken over
            (Phase.COMPENSATING, 4),
            (Phase.COMPENSATED, 4),
            (Phase.COMPENSATING, 2),
            (Phase.COMPENSATED, 2),
            (Phase.ENDED, None),
        ]
        assert tail[-1].payload == {
            "outcome": "NEEDS_ATTENTION",
            "compensated": ["charge_card#1", "reserve_inventory#1"],
            "compensation_failed": [],
            "in_doubt": ["ship#1"],
        }
        assert verify(sagacity.journal).ok
        sagacity.close()

    def test_resolving_the_call_lets_a_later_compensate_undo_it(
        self, reopened: tuple[Sagacity, Path]
    ) -> None:
        """A human finds the shipment went out; the next walk cancels it, and only it."""
        sagacity, ledger = reopened
        sagacity.compensate("order-1")
        resolved = sagacity.resolve("order-1", "ship#1", executed=True, result="shp-77", by="ops")
        assert (resolved.phase, resolved.ref_seq) == (Phase.EXECUTED, 5)
        assert resolved.payload == {"result": "shp-77", "resolved_by": "ops"}
        again = sagacity.compensate("order-1")
        assert again.outcome is SagaOutcome.COMPENSATED
        assert again.compensation is not None
        assert again.compensation.in_doubt == []
        assert again.compensation.compensated[-1] == CallRef(
            seq=resolved.seq, tool_name="ship", call_id="ship#1"
        )
        assert ledger.read_text().splitlines()[-4:] == [
            "refund start ch-1 key=charge_card#1",
            "refund done ch-1",
            "release res-SKU-42",
            "cancel shp-77",
        ]
        compensated, ended = sagacity.history("order-1")[-2:]
        assert (compensated.phase, compensated.ref_seq) == (Phase.COMPENSATED, resolved.seq)
        assert ended.phase is Phase.ENDED
        assert ended.payload["in_doubt"] == []  # the new ENDED no longer lists it in doubt
        assert verify(sagacity.journal).ok
        sagacity.close()
