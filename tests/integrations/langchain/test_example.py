"""The example script runs offline and shows both sagas."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_agent.py"


class TestExample:
    def test_the_example_compensates_the_order_and_runs_the_approved_wire(self) -> None:
        """The script exits 0; the order is COMPENSATED in reverse, the wire runs once approved."""
        done = subprocess.run(
            [sys.executable, str(EXAMPLE)], capture_output=True, text=True, check=True, timeout=120
        )

        lines = done.stdout.splitlines()
        assert lines[:4] == [
            "  undo: refunded ch-1999",
            "  undo: released res-SKU-42-2",
            "order-1001: the model said 'All done: your order is on its way.'",
            "order-1001: COMPENSATED",
        ]
        assert lines[4:15] == [
            "  1 INTENT reserve_inventory call-1",
            "  2 EXECUTED reserve_inventory call-1",
            "  3 INTENT charge_card call-2",
            "  4 EXECUTED charge_card call-2",
            "  5 INTENT ship_order call-3",
            "  6 FAILED ship_order call-3",
            "  7 COMPENSATING charge_card call-2",
            "  8 COMPENSATED charge_card call-2",
            "  9 COMPENSATING reserve_inventory call-1",
            "  10 COMPENSATED reserve_inventory call-1",
            "  11 ENDED",
        ]
        assert lines[15] == (
            "wire-1002: AWAITING_APPROVAL: send_wire_transfer {'amount': '250.00', 'to': 'ACME'}"
        )
        assert lines[17:] == [
            "wire-1002: COMPLETED after alice approved",
            "  1 AWAITING_APPROVAL send_wire_transfer call-4",
            "  2 APPROVED send_wire_transfer call-4",
            "  3 INTENT send_wire_transfer call-4",
            "  4 EXECUTED send_wire_transfer call-4",
            "  5 ENDED",
        ]
        assert done.stderr == ""

    def test_the_real_model_comment_imports_what_it_calls(self) -> None:
        """The commented lines for a real model import the function they call.

        The imports are run; the model is not built (that needs a provider package).
        """
        after = EXAMPLE.read_text().split("# For a real model", 1)[1].splitlines()[1:]
        lines: list[str] = []
        for line in after:
            if not line.strip().startswith("# "):
                break
            lines.append(line.strip()[2:])
        *imports, model_line = lines
        namespace: dict[str, Any] = {}
        for line in imports:
            exec(compile(line, str(EXAMPLE), "exec"), namespace)

        call = ast.parse(model_line).body[0]
        assert isinstance(call, ast.Assign)
        assert isinstance(call.value, ast.Call)
        called = call.value.func
        while isinstance(called, ast.Attribute):
            called = called.value
        assert isinstance(called, ast.Name)
        assert callable(namespace.get(called.id))
