"""The workflows are core: they import and run a gated run with every extra blocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.test_core_without_extras import BLOCKED

SCRIPT = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    BLOCKED = set(sys.argv[1].split(","))

    class Block(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Block())

    from sagacity import Reversibility, Sagacity, compensable
    from sagacity.workflows import WorkflowRuntime, gate, stage, workflow

    @workflow("blocked-extras")
    class Flow:
        @stage(order=1)
        @gate(reason="look")
        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def send(self, x: int) -> int:
            return x * 2

    runtime = WorkflowRuntime(Sagacity.from_url(sys.argv[2]), [Flow])
    runtime.start("blocked-extras", 21, run_id="r")
    runtime.approve_gate("r", "send", "alice")
    print(runtime.resume("r").status.value, runtime.get("r").result)
    print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
    """
)


def test_workflows_run_with_the_extras_blocked(tmp_path: Path) -> None:
    """No extra's package is imported by `sagacity.workflows`, and a gated run completes."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(BLOCKED), f"sqlite:///{tmp_path}/w.db"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["COMPLETED 42", "loaded: []"]
