"""Without OpenTelemetry the core works, and the observability package names its extra."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import sys
for name in ("opentelemetry", "opentelemetry.trace", "opentelemetry.metrics"):
    sys.modules[name] = None  # as if the extra were not installed
from sagacity import Sagacity, compensable

@compensable(by=lambda: None)
def step() -> str:
    return "ok"

sagacity = Sagacity.from_url("memory://")
(tool,) = sagacity.wrap(step)
print(sagacity.saga("s-1", tool).outcome.value)
try:
    import sagacity.observability
except ImportError as error:
    print(error)
"""


def test_the_core_runs_and_the_guard_names_the_extra() -> None:
    """A saga completes with OpenTelemetry blocked; importing the package says what to install."""
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "COMPLETED",
        "sagacity.observability needs OpenTelemetry: pip install 'sagacity[otel]'",
    ]
