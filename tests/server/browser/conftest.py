"""A real uvicorn server over a real SQLite journal, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import Sagacity
from sagacity.server import Principal, TokenAuth, create_app
from tests.conftest import in_ci
from tests.server._bank import Bank
from tests.server._live import live_server

TOKENS = {
    "tok-ada": Principal("ada@treasury", frozenset({"approver", "operator"})),
    "tok-ben": Principal("ben@treasury", frozenset({"approver"})),
}
"""Clear tokens of the browser's principals (the server keeps only their hashes)."""


def chromium_path() -> str:
    """Debian's chromium (`make browser` installs it); skip loudly without it, fail in CI."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = (
            "chromium is not installed: the inbox's browser tests did NOT run "
            "(install Debian's package: make browser)"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    try:
        import playwright.sync_api  # noqa: F401  (probe)
    except ImportError:  # pragma: no cover - the dev extra installs it
        message = "playwright is not installed: the inbox's browser tests did NOT run"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture
def bank() -> Bank:
    """The tools' log."""
    return Bank()


@pytest.fixture
def sagacity(tmp_path: Path, bank: Bank) -> Iterator[Sagacity]:
    """A Sagacity on a SQLite file with the bank's tools wrapped (so resume runs here)."""
    instance = Sagacity.from_url(f"sqlite:///{tmp_path / 'inbox.db'}")
    instance.wrap(bank)
    yield instance
    instance.close()


@pytest.fixture
def server_url(sagacity: Sagacity) -> Iterator[str]:
    """The base URL of the app over `sagacity`, served by uvicorn on a free port.

    In a thread of this process, where the tools are wrapped: resuming runs them.
    """
    with live_server(create_app(sagacity, TokenAuth.from_tokens(TOKENS))) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium per test module, driven by Playwright: each test opens a context.

    Not one per session: Playwright's sync API keeps an event loop running on the main
    thread while it is open, which would refuse every async test run after it there.
    """
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()
