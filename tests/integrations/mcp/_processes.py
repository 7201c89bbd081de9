"""Upstream MCP servers run as real processes, for the proxy to reach over stdio.

Each is started through `sh -c 'echo $$ > PIDFILE; exec …'`, so a test knows the pid of
the server itself (not of a wrapper) and can kill it with SIGKILL.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import in_ci

ROOT = Path(__file__).resolve().parents[3]


def require_module(module: str, package: str) -> None:
    """Skip loudly when a server installed from PyPI by the dev extra is missing; fail in CI."""
    if importlib.util.find_spec(module) is None:
        reason = (
            f"the MCP server {package!r} (module {module}) is not installed; "
            f"`pip install -e '.[dev]'` installs it from PyPI"
        )
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


def server_params(pidfile: Path, *command: str) -> StdioServerParameters:
    """Run `command` as an MCP server over stdio, its pid written to `pidfile`."""
    line = f"echo $$ > {shlex.quote(str(pidfile))}; exec {shlex.join(command)}"
    return StdioServerParameters(
        command="sh",
        args=["-c", line],
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def relay_server(pidfile: Path, marker: Path) -> StdioServerParameters:
    """The SDK-built upstream of `_relay_server.py`, as its own process."""
    return server_params(
        pidfile, sys.executable, "-m", "tests.integrations.mcp._relay_server", str(marker)
    )


def factory(params: StdioServerParameters, *, mode: str = "legacy") -> Callable[[], Client]:
    """New clients of the server, for `mcp_proxy` to open and reopen."""
    return lambda: Client(params, mode=mode)


def pid_of(pidfile: Path) -> int:
    return int(pidfile.read_text().strip())


def kill(pidfile: Path) -> int:
    """SIGKILL the server whose pid is in `pidfile`; the pid it had."""
    pid = pid_of(pidfile)
    os.kill(pid, signal.SIGKILL)
    return pid
