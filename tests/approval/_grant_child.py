"""What the grant race tests run: `python -m tests.approval._grant_child URL NAME LEDGER`.

Runs covered payments in sagas `NAME-1`, `NAME-2`, … (started by alice) as fast as it
can, until one asks a human (the grant was revoked or used up); each payment that runs
appends its saga id to LEDGER before returning. Prints `started`, then waits for `go` on
stdin; after its first payment prints `paid` and waits for `go` again: the parent starts
the children together and lets them race on once each has paid. Prints `asked NAME-n`
last.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

from sagacity import Reversibility, Sagacity, SagaOutcome, compensable


def main(url: str, name: str, ledger: Path) -> None:
    sagacity = Sagacity.from_url(url)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(saga: str, amount: int, payee: str) -> str:
        """Pay; the ledger line is the effect."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(saga + "\n")
            out.flush()
            os.fsync(out.fileno())
        return "paid"

    sagacity.wrap(pay)
    tool = sagacity.tool("pay")
    print("started", flush=True)
    assert sys.stdin.readline() == "go\n"
    for number in itertools.count(1):
        saga = f"{name}-{number}"
        result = sagacity.saga(
            saga, lambda s=saga: tool(saga=s, amount=1, payee="ACME"), started_by="alice"
        )
        if result.outcome is SagaOutcome.AWAITING_APPROVAL:
            print(f"asked {saga}", flush=True)
            break
        assert result.outcome is SagaOutcome.COMPLETED, result
        if number == 1:
            # Every child pays once before any pays twice: none is starved of the budget
            # (a loaded machine may not run one child until another has spent it all).
            print("paid", flush=True)
            assert sys.stdin.readline() == "go\n"
    sagacity.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
