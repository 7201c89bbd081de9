"""A worker's health: JSON rewritten every second, read by `sagacity worker --check-health`."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["WorkerHealth", "check_health", "read_health", "write_health"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WorkerHealth:
    """How a worker stands: what `health_file` holds and `sagacity worker --check-health` reads."""

    pid: int
    """The worker's process id."""
    state: str
    """`"starting"`, `"running"`, `"stopping"` or `"stopped"`."""
    started_at: datetime.datetime
    """When the worker started (UTC)."""
    beat_at: datetime.datetime
    """The worker's last heartbeat (UTC), written every second while it runs."""
    wakeup: str
    """How decisions wake it: `"listen"` (PostgreSQL LISTEN/NOTIFY) or `"poll"`."""
    resumed: int = 0
    """Decisions this worker acted on to the end (its resumer ran, or the walk)."""
    failed: int = 0
    """Resumes that raised: logged, the saga left as its journal says."""
    resuming: str | None = None
    """The saga being resumed now, if any."""
    unroutable: tuple[str, ...] = ()
    """Sagas waiting for a resumer name this worker has none for."""

    def to_json(self) -> dict[str, Any]:
        """The health as a JSON object."""
        return {
            "pid": self.pid,
            "state": self.state,
            "started_at": self.started_at.isoformat(),
            "beat_at": self.beat_at.isoformat(),
            "wakeup": self.wakeup,
            "resumed": self.resumed,
            "failed": self.failed,
            "resuming": self.resuming,
            "unroutable": list(self.unroutable),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerHealth:
        """Read a health written by `to_json`.

        Raises:
            ValueError: A field is missing or malformed.
        """
        try:
            return cls(
                pid=int(data["pid"]),
                state=str(data["state"]),
                started_at=datetime.datetime.fromisoformat(data["started_at"]),
                beat_at=datetime.datetime.fromisoformat(data["beat_at"]),
                wakeup=str(data["wakeup"]),
                resumed=int(data.get("resumed", 0)),
                failed=int(data.get("failed", 0)),
                resuming=data.get("resuming"),
                unroutable=tuple(data.get("unroutable", ())),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a worker health record: {error}") from error


def write_health(path: str, health: WorkerHealth) -> None:
    """Replace the file at `path` with `health`, atomically (a reader never sees half)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".sagacity-health-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(health.to_json(), out)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_health(path: str) -> WorkerHealth:
    """Read the health file at `path`.

    Raises:
        OSError: It cannot be read.
        ValueError: It holds no worker health.
    """
    with open(path, encoding="utf-8") as source:
        return WorkerHealth.from_json(json.load(source))


def check_health(path: str, *, max_age: float, now: datetime.datetime | None = None) -> str | None:
    """Why the worker writing `path` is not healthy; None when it is.

    Healthy: the file reads, the state is `running`, and the last heartbeat is at most
    `max_age` seconds old.
    """
    try:
        health = read_health(path)
    except (OSError, ValueError) as error:
        return f"cannot read the worker health in {path!r}: {error}"
    now = now or datetime.datetime.now(datetime.UTC)
    age = (now - health.beat_at).total_seconds()
    if health.state != "running":
        return f"worker {health.pid} is {health.state} (last heartbeat {age:.1f} s ago)"
    if age > max_age:
        return (
            f"worker {health.pid} last beat {age:.1f} s ago, more than {max_age} s: it is "
            "stopped or hung"
        )
    return None
