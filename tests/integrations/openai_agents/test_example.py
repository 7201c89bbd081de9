"""`examples/openai_agents_agent.py` runs offline and shows what its docstring says."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "openai_agents_agent.py"
DOC = ROOT / "docs" / "integrations" / "openai_agents.md"


class TestExample:
    def test_runs_without_an_api_key(self) -> None:
        """Without OPENAI_API_KEY it exits 0 and prints both sagas and their journals.

        Order 1 is compensated after the failed label; order 2 is approved and wired once.
        """
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        done = subprocess.run(
            [sys.executable, "-W", "error", str(EXAMPLE)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "  compensation: released res-SKU-42-2",
            "the model said: done",
            "order-1: COMPENSATED",
            "   1 INTENT            reserve_inventory call_1",
            "   2 EXECUTED          reserve_inventory call_1",
            "   3 INTENT            print_label call_2",
            "   4 FAILED            print_label call_2",
            "   5 COMPENSATING      reserve_inventory call_1",
            "   6 COMPENSATED       reserve_inventory call_1",
            "   7 ENDED",
            "order-2: AWAITING_APPROVAL",
            "   1 AWAITING_APPROVAL send_wire_transfer call_3",
            "waiting for approval: send_wire_transfer {'amount': '900.00', 'to': 'ACME'}",
            "  wired 900.00 to ACME",
            "order-2: COMPLETED",
            "   1 AWAITING_APPROVAL send_wire_transfer call_3",
            "   2 APPROVED          send_wire_transfer call_3",
            "   3 INTENT            send_wire_transfer call_3",
            "   4 EXECUTED          send_wire_transfer call_3",
            "   5 ENDED",
        ]


class TestDoc:
    def test_code_blocks_compile(self) -> None:
        """Every Python block of the adapter's page is valid Python (top-level await allowed)."""
        blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
        assert len(blocks) == 4
        for block in blocks:
            compile(block, str(DOC), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    def test_names_the_pinned_range(self) -> None:
        """The page states the version range the extra pins."""
        pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        (pinned,) = re.findall(r'^openai-agents = \["openai-agents(.*)"\]$', pyproject, re.M)
        assert f"`{pinned}`" in DOC.read_text(encoding="utf-8")
