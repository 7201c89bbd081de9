"""Fixtures shared by the suite: one journal/approval backend fixture for every backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Sagacity
from tests._postgres import postgres_url_for

BACKENDS = ["memory", "sqlite", "postgres"]


def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis takes any change of the global `random` state while it draws an example
    # for a strategy that uses `random`; but psycopg_pool's worker threads draw from it too
    # (the jitter of a new connection's lifetime), whenever a pool connects, whatever test
    # runs. The strategies here use no `random`: the warning would only name that timing.
    config.addinivalue_line(
        "filterwarnings", "ignore:Do not use the `random` module inside strategies"
    )


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for each backend; Postgres gets a schema of its own."""
    yield from _url_for(request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL for each backend that separate Sagacity instances (workers) share."""
    yield from _url_for(request, tmp_path)


def _url_for(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sagacity.db'}"
    else:
        yield from postgres_url_for(request)


@pytest.fixture
def sagacity(store_url: str) -> Iterator[Sagacity]:
    """A Sagacity on each backend."""
    instance = Sagacity.from_url(store_url)
    yield instance
    instance.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite database URL in the test's own folder."""
    return f"sqlite:///{tmp_path / 'sagacity.db'}"


def in_ci() -> bool:
    """CI sets CI=true: there a missing service fails the run instead of skipping."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
