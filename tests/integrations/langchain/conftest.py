"""Fixtures of the LangChain approval tests: two processes' stores, and the graph flavours."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Sagacity


@pytest.fixture
def stores(sqlite_url: str) -> Iterator[tuple[Sagacity, Sagacity]]:
    """The agent's Sagacity, and the approver's: another instance on the same database."""
    agent_side, approver_side = Sagacity.from_url(sqlite_url), Sagacity.from_url(sqlite_url)
    yield agent_side, approver_side
    agent_side.close()
    approver_side.close()


@pytest.fixture(
    params=["tool_node-sync", "tool_node-async", "create_agent-sync", "create_agent-async"]
)
def flavour(request: pytest.FixtureRequest) -> tuple[str, bool]:
    graph_kind, mode = request.param.split("-")
    return graph_kind, mode == "async"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """These graphs keep their threads in an InMemorySaver on purpose (one process).

    The warning that another process could not resume such a pause is the subject of
    `test_checkpointer_warning.py`, which keeps warnings as errors.
    """
    here = Path(__file__).parent
    for item in items:
        if item.path.parent == here and item.path.name != "test_checkpointer_warning.py":
            item.add_marker(
                pytest.mark.filterwarnings(
                    "ignore::sagacity.integrations.langchain.InMemoryCheckpointerWarning"
                )
            )
