"""Fixtures of the LangChain approval tests: two processes' stores, and the graph flavours."""

from __future__ import annotations

from collections.abc import Iterator

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
