"""Where the CrewAI tests run, and the versions they ran on."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from tests.integrations.crewai.conftest import HAS_CREWAI


@pytest.mark.skipif(
    not HAS_CREWAI,
    reason="CrewAI tests NOT RUN in this venv (CrewAI is not installed): "
    "`make test-crewai` runs tests/integrations/crewai in .venv-crewai",
)
class TestCrewVenv:
    def test_crewai_is_the_tested_release_line(self) -> None:
        """The venv holds CrewAI 1.x from 1.15.30, the extra's range."""
        version = importlib.metadata.version("crewai")
        major, minor, patch = (int(part) for part in version.split(".")[:3])
        assert major == 1
        assert (minor, patch) >= (15, 30)

    def test_sagacity_postgres_installs_beside_crewai(self) -> None:
        """`sagacity[postgres,crewai]` resolves: psycopg imports here."""
        assert importlib.util.find_spec("psycopg") is not None
        assert importlib.util.find_spec("psycopg_pool") is not None
