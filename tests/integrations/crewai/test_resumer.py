"""`sagacity.Worker` resumes a paused crew with `CrewResumer` once a human decided."""

from __future__ import annotations

from typing import Any

from sagacity import Decision, Sagacity, SagaOutcome
from sagacity.integrations.crewai import RESUMER, CrewResumer
from sagacity.worker import Worker
from tests.integrations.crewai._crew import Shop, crew, phases, shop_tools
from tests.integrations.crewai.test_approval import BEFORE, approve, first_run


class TestCrewResumer:
    def test_the_worker_kicks_the_crew_off_again_and_the_wire_runs_once(
        self, shared_store_url: str
    ) -> None:
        """Pause, approve, `Worker.run_once`: the wire runs once, the reservation is replayed."""
        shop = Shop()
        sha = first_run(shared_store_url, shop, "native", "work-1")
        with Sagacity.from_url(shared_store_url) as sagacity:
            (waiting,) = [
                e for e in sagacity.history("work-1") if e.phase.name == "AWAITING_APPROVAL"
            ]
            assert waiting.payload["resumer"] == RESUMER  # type: ignore[index]
        approve(shared_store_url, "work-1", sha)
        decisions: list[Decision] = []

        with Sagacity.from_url(shared_store_url) as sagacity:

            def crew_for(decision: Decision) -> Any:
                decisions.append(decision)
                return crew(shop_tools(sagacity, shop), BEFORE, path="native")

            worker = Worker(sagacity, {RESUMER: CrewResumer(crew_for)})
            assert worker.run_once() == 1
            assert worker.run_once() == 0  # decided once, resumed once
            journal = phases(sagacity, "work-1")

        assert [(d.saga_id, d.tool, d.approved) for d in decisions] == [
            ("work-1", "send_wire", True)
        ]
        assert shop.effects == [("reserve", "A", 1), ("wire", 900, "ACME")]
        assert journal[-1] == ("ENDED", None)
        assert [p for p, c in journal if c == "send_wire#1"] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "INTENT",
            "EXECUTED",
        ]
        with Sagacity.from_url(shared_store_url) as sagacity:
            ended = sagacity.history("work-1")[-1]
        assert ended.payload["outcome"] == SagaOutcome.COMPLETED.value  # type: ignore[index]
