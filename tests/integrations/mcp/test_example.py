"""`examples/mcp_agent.py` runs offline and shows what its docstring says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp_agent.py"


class TestExample:
    def test_runs_offline_and_prints_both_sagas(self) -> None:
        """It exits 0 and prints both sagas and their journals.

        Order 1 is compensated after the failed shipment although the model says it is
        done; the wire transfer waits, is approved, and runs once.
        """
        done = subprocess.run(
            [sys.executable, "-W", "error", str(EXAMPLE)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "order-1:",
            "  model called reserve_inventory: res-A-1-2",
            "  model called charge_card: ch-25.00",
            "  model called ship_order: Error executing tool ship_order",
            "  model said: All done! Your order is on its way.",
            "  undo: refunded ch-25.00",
            "  undo: released res-A-1-2",
            "order-1 outcome: COMPENSATED, undone: toolu_02, toolu_01",
            "pay-1 first call: [AWAITING_APPROVAL] send_wire_transfer was not run: it needs…",
            "pay-1 after approval: wire-900.00-ACME",
            "pay-1 outcome: COMPLETED",
            "journal of order-1:",
            "   1 INTENT             toolu_01",
            "   2 EXECUTED           toolu_01",
            "   3 INTENT             toolu_02",
            "   4 EXECUTED           toolu_02",
            "   5 INTENT             toolu_03",
            "   6 FAILED             toolu_03",
            "   7 COMPENSATING       toolu_02",
            "   8 COMPENSATED        toolu_02",
            "   9 COMPENSATING       toolu_01",
            "  10 COMPENSATED        toolu_01",
            "  11 ENDED",
            "journal of pay-1:",
            "   1 AWAITING_APPROVAL  toolu_04",
            "   2 APPROVED           toolu_04",
            "   3 INTENT             toolu_04",
            "   4 EXECUTED           toolu_04",
            "   5 ENDED",
        ]
