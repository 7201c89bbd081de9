"""Finding the test PostgreSQL server: skip loudly on a laptop, fail in CI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def postgres_url_for(request: pytest.FixtureRequest) -> Iterator[str]:
    """Yield a URL to a fresh schema of the test server (filled in with the backend)."""
    pytest.skip("the PostgreSQL backend is not built yet")
    yield ""
