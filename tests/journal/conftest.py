"""The conformance suite's edges: `async batched` exists on PostgreSQL only."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect `async batched` on the backends that have no batch path on the loop."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = {} if callspec is None else callspec.params
        if params.get("journal") == "async batched" and params.get("store_url") != "postgres":
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
