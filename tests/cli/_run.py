"""Running the `sagacity` command as a user does: a new process, its output and exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m sagacity.cli ARGS` and capture what it prints."""
    environment = dict(os.environ)
    environment.pop("SAGACITY_DATABASE_URL", None)  # each test names its database
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sagacity.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env=environment,
    )


def restore_triggers_after(path: str | Path, *statements: str) -> None:
    """Edit a SQLite journal with its triggers dropped, then re-create them as they were."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        triggers = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall()
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        for statement in statements:
            conn.execute(statement)
        for _, create in triggers:
            conn.execute(create)
    finally:
        conn.close()
