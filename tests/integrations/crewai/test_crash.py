"""A crew killed mid-call: the crew run again replays what ran and never re-runs the doubt."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sagacity import InDoubtError, Sagacity
from sagacity.integrations.crewai import crew_tools
from tests.integrations.crewai._crash_crew import SCRIPT, CrashShop
from tests.integrations.crewai._crew import crew, phases
from tests.processes._kill import kill, running_until


@pytest.mark.slow
class TestKilledCrew:
    def test_the_rerun_replays_the_reservation_and_refuses_the_charge_in_doubt(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """SIGKILL after the charge's effect: the re-run crew charges nothing again, says why."""
        effects = tmp_path / "effects.txt"
        command = [
            sys.executable,
            "-m",
            "tests.integrations.crewai._crash_crew",
            shared_store_url,
            "crash-1",
            str(effects),
        ]
        with running_until(command, "charging") as child:
            kill(child)

        with Sagacity.from_url(shared_store_url) as sagacity:
            tools = crew_tools(sagacity, CrashShop(effects, block=False))
            built = crew(tools, SCRIPT, path="native")
            with pytest.raises(InDoubtError, match=r"'charge_card#1'.*may have run"):
                sagacity.saga("crash-1", built.kickoff)
            journal = phases(sagacity, "crash-1")

        assert effects.read_text(encoding="utf-8").splitlines() == ["reserve K 1", "charge 70"]
        assert journal[:3] == [
            ("INTENT", "reserve_stock#1"),
            ("EXECUTED", "reserve_stock#1"),
            ("INTENT", "charge_card#1"),
        ]
        assert [p for p, c in journal if c == "charge_card#1"].count("INTENT") == 1
        assert ("EXECUTED", "charge_card#1") not in journal
