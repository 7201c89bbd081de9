"""Fixtures of the approval policy tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sagacity import InMemoryApprovalStore, InMemoryJournal, Sagacity
from tests.approval._policy import OpenSagacity


@pytest.fixture
def open_sagacity(store_url: str) -> Iterator[OpenSagacity]:
    """Build Sagacity instances (with options) sharing the test's database, closed afterwards.

    On `memory://` they share one in-memory journal and store, as processes share a file
    or a server: one can sign approvals and another verify them.
    """
    opened: list[Sagacity] = []
    memory = (InMemoryJournal(), InMemoryApprovalStore())

    def build(**options: Any) -> Sagacity:
        if store_url == "memory://":
            instance = Sagacity(*memory, **options)
        else:
            instance = Sagacity.from_url(store_url, **options)
        opened.append(instance)
        return instance

    yield build
    for instance in opened:
        instance.close()
