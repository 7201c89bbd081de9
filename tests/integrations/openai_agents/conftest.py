"""The OpenAI Agents SDK runs here offline: scripted models, tracing off, no API key."""

from __future__ import annotations

import pytest
from agents import set_tracing_disabled


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """Tracing would export spans to OpenAI; the scripted runs need none."""
    set_tracing_disabled(True)
