"""The CrewAI pages run here, in the venv that has CrewAI (the main run cannot hold it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.docs import _run as run_module
from tests.docs._blocks import ROOT, examples
from tests.docs._run import run_as_script
from tests.docs.test_pages import ISOLATED_PAGES, run_page

PAGES = [ROOT / "docs" / "integrations" / "crewai.md", ROOT / "docs" / "tutorials" / "crewai.md"]


class TestCrewPages:
    def test_the_pages_are_the_ones_the_main_run_leaves_here(self) -> None:
        """The main docs test skips exactly these pages: they are run here, not nowhere."""
        assert set(PAGES) == ISOLATED_PAGES

    @pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
    def test_the_page_runs_and_prints_what_it_shows(
        self,
        page: Path,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """Each python block runs in order in one namespace; each shown output is printed."""
        run_page(page, tmp_path, monkeypatch, capfd)

    def test_the_reference_page_runs_as_one_script(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The reference page's blocks, pasted into one file, run with `python`."""
        # Warnings fail the script, but for CrewAI's own at import (as in conftest.py).
        real = run_module.script_environment

        def environment() -> dict[str, str]:
            env = real()
            env["PYTHONWARNINGS"] = "error,ignore::ImportWarning,ignore::DeprecationWarning"
            return env

        monkeypatch.setattr(run_module, "script_environment", environment)
        page = PAGES[0]
        run_as_script(page, examples(page), tmp_path)


class TestImportGuard:
    def test_without_crewai_the_error_names_the_extra(self) -> None:
        """Importing the adapter with CrewAI blocked raises an ImportError naming the extra."""
        script = textwrap.dedent(
            """
            import sys
            from importlib.abc import MetaPathFinder

            class Block(MetaPathFinder):
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] == "crewai":
                        raise ImportError(f"blocked: {name}")
                    return None

            sys.meta_path.insert(0, Block())
            try:
                import sagacity.integrations.crewai
            except ImportError as error:
                print(error)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
        )
        assert "pip install 'sagacity[crewai]'" in done.stdout
