"""The MCP servers and the Inspector CLI from npm, as `make mcp-servers` installs them.

They live in `.npm-mcp/node_modules` at the versions `.npm-mcp/package-lock.json` pins;
nothing is installed while the tests run. Missing, a test skips saying how to install
them, and fails under CI=true.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import in_ci
from tests.integrations.mcp._processes import ROOT

BIN = ROOT / ".npm-mcp" / "node_modules" / ".bin"


def npm_command(name: str) -> list[str]:
    """The command that runs the npm package's binary `name` (with node from the PATH)."""
    path = BIN / name
    node = shutil.which("node")
    if not path.exists() or node is None:
        reason = (
            f"{name} is not installed in {BIN.relative_to(ROOT)}: `make mcp-servers` installs "
            "the MCP servers and the MCP Inspector CLI that .npm-mcp/package-lock.json pins "
            "(it needs node and npm)"
        )
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return [node, str(Path(path).resolve())]
