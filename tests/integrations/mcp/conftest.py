"""Fixtures of the MCP tests that drive the proxy in front of real servers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integrations.mcp._processes import require_module


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit and an untracked file `a.txt`."""
    require_module("mcp_server_git", "mcp-server-git")
    path = tmp_path / "repo"
    path.mkdir()
    for command in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "ops@example.com"],
        ["config", "user.name", "Ops"],
        ["commit", "-q", "--allow-empty", "-m", "start"],
    ):
        subprocess.run(["git", *command], cwd=path, check=True)
    (path / "a.txt").write_text("a\n")
    return path
