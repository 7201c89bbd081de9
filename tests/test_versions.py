"""The Python versions and framework releases sagacity says it supports."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
FRAMEWORK_EXTRAS = ["postgres", "langchain", "openai-agents", "pydantic-ai", "mcp", "crewai"]


def _makefile_variable(name: str) -> list[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (value,) = re.findall(rf"^{name} := (.*)$", makefile, re.M)
    return value.split()


class TestPythonVersions:
    def test_classifiers_name_the_versions_the_matrix_runs(self) -> None:
        """The classifiers name Python 3.11, 3.12 and 3.13, the versions make test-matrix runs."""
        prefix = "Programming Language :: Python :: "
        named = [
            c.removeprefix(prefix)
            for c in PROJECT["classifiers"]
            if re.fullmatch(re.escape(prefix) + r"3\.\d+", c)
        ]
        assert named == ["3.11", "3.12", "3.13"]
        assert _makefile_variable("MATRIX") == named
        assert PROJECT["requires-python"] == ">=3.11"

    def test_matrix_venvs_are_ignored(self) -> None:
        """The venvs make test-matrix and make test-latest create are not committed."""
        ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
        assert ".venv-*/" in ignored
        assert _makefile_variable("LATEST") == [".venv-latest"]


class TestFrameworkPins:
    def test_each_framework_extra_allows_up_to_the_next_major(self) -> None:
        """Each framework extra's requirement allows later minors and stops at the next major."""
        for extra in FRAMEWORK_EXTRAS:
            for line in PROJECT["optional-dependencies"][extra]:
                requirement = Requirement(line)
                floors = [s.version for s in requirement.specifier if s.operator == ">="]
                ceilings = [s.version for s in requirement.specifier if s.operator == "<"]
                assert len(floors) == 1, f"{extra}: {line} has no >= floor"
                assert len(ceilings) == 1, f"{extra}: {line} has no < ceiling"
                floor = Version(floors[0])
                assert Version(ceilings[0]) == Version(f"{floor.major + 1}"), f"{extra}: {line}"
                assert requirement.specifier.contains(f"{floor.major}.{floor.minor + 1}.0")
