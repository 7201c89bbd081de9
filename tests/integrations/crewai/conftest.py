"""CrewAI runs here offline: a scripted `BaseLLM`, telemetry and tracing off, no API key.

CrewAI cannot share the dev venv (it pins mcp<2, opentelemetry-sdk>=1.45.1, pydantic<2.13):
`make test` runs this folder in `.venv-crewai`. In a venv without CrewAI only
`test_install.py` is collected: it skips, naming where the others run.
"""

from __future__ import annotations

import importlib.util
import os
import warnings

import pytest

HAS_CREWAI = importlib.util.find_spec("crewai") is not None

if HAS_CREWAI:
    # Set before CrewAI is imported: it reads them when its telemetry starts.
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    # CrewAI's own imports warn (an ImportWarning from its lazy `crewai.rag` package): not
    # ours to fix, and the suite turns warnings into errors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import crewai  # noqa: F401
else:
    collect_ignore_glob = ["test_[!i]*.py"]  # test_install.py says, loudly, where they run


CREWAI_WARNINGS = (
    # CrewAI 1.15 warns about its own deprecated fields when it builds an agent's executor.
    "ignore::DeprecationWarning:crewai.*",
    "ignore::PendingDeprecationWarning:crewai.*",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            for rule in CREWAI_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(rule))
