"""A worker that runs one call of a saga and parks its lease, for the lingering lease tests.

python -m tests.processes._linger_child URL LEDGER SAGA LINGER

Runs the call `charge-1` of SAGA as a durable engine's step does (`run_call`) with
`linger=LINGER`, prints `parked`, then waits for a line on stdin: `exit` ends the process
normally (its parked lease is released at exit). Its lease lasts 60 s, so that a lease
freed sooner was released, or taken from a holder known dead, not waited out.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sagacity import Sagacity
from sagacity.integrations._engine import run_call
from tests.processes._lease_child import Ledger


def main(url: str, ledger: str, saga_id: str, linger: str) -> None:
    sagacity = Sagacity.from_url(url, lease_ttl=60.0)
    tools = {tool.name: tool for tool in sagacity.wrap(Ledger(Path(ledger)))}
    ran = run_call(
        sagacity,
        saga_id,
        tools["charge"],
        call_id="charge-1",
        arguments={"amount": "1.00"},
        approved=False,
        resumer="test",
        linger=float(linger),
    )
    print("parked" if ran.result == "ch-1.00" else f"ran {ran}", flush=True)
    for line in sys.stdin:
        if line.strip() == "exit":
            break
    # No close: the at-exit hook is what releases the lease here.


if __name__ == "__main__":
    main(*sys.argv[1:])
