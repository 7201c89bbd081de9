"""The example script runs as documented and shows what the docs say it shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


class TestExample:
    def test_example_runs_offline_and_prints_both_sagas(self) -> None:
        """`examples/pydantic_ai_agent.py` runs offline and shows both sagas.

        It exits 0: the order is COMPENSATED in reverse order though the model said done, the
        wire runs once after approval, and the chain verifies.
        """
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "pydantic_ai_agent.py")],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "order-1: the model said 'Done: your order is on its way.'" in lines
        assert "order-1: saga COMPENSATED" in lines
        assert lines.index("  undo: refund charge ch-1999") < lines.index(
            "  undo: release reservation res-SKU-1-2"
        )
        assert "   7 COMPENSATING       charge_card        call-2" in lines
        assert "   8 COMPENSATED        charge_card        call-2" in lines
        assert "   9 COMPENSATING       reserve_inventory  call-1" in lines
        assert "  10 COMPENSATED        reserve_inventory  call-1" in lines
        assert (
            "payout-1: saga AWAITING_APPROVAL: send_wire is IRREVERSIBLE: Send a wire transfer."
            in lines
        )
        assert lines.count("  send_wire ran: 2500.00 to ACME") == 1
        assert "payout-1: saga COMPLETED" in lines
        assert lines[-1] == "journal verified: True"
        assert done.stderr == ""
