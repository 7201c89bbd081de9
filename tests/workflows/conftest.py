"""Fixtures of the workflow tests: a ledger, a SQLite Sagacity on a fake clock, a runtime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Sagacity
from sagacity.testing import FakeClock
from sagacity.workflows import WorkflowRuntime
from tests.workflows._refund import Ledger, RefundWorkflow


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """The file the refund workflow's effects and undos are written to."""
    return Ledger(tmp_path / "ledger.txt")


@pytest.fixture
def clock() -> FakeClock:
    """The clock gates time out by."""
    return FakeClock()


@pytest.fixture
def sagacity(sqlite_url: str, clock: FakeClock) -> Iterator[Sagacity]:
    """A Sagacity on a SQLite file, on the fake clock."""
    instance = Sagacity.from_url(sqlite_url, clock=clock)
    yield instance
    instance.close()


@pytest.fixture
def runtime(sagacity: Sagacity, ledger: Ledger) -> WorkflowRuntime:
    """A runtime with the refund workflow registered."""
    return WorkflowRuntime(sagacity, workflows=[RefundWorkflow(ledger)])
