"""The worker the crash tests kill: `python -m tests.reconcile._child CMD URL LEDGER WHERE`.

charge URL LEDGER POINT  saga `pay-1`: reserve, then a charge that stops at POINT
                         (`before-charge` or `after-charge`), prints `inside POINT` and waits
                         to be killed: its INTENT has no outcome
wire URL LEDGER -        saga `pay-1`: reserve, then a wire that waits for approval; alice
                         approves, the saga resumes, and the wire stops at `before-wire`
refund URL LEDGER POINT  saga `pay-1`: reserve, charge, then a shipment that fails; the walk
                         starts with the refund, which stops at POINT (`before-refund` or
                         `after-refund`): its COMPENSATING has no outcome

The lease lasts 1 s, so the test's worker takes the saga over soon after the kill.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sagacity import Sagacity
from tests.reconcile._payments import Payments, Stop


def main(command: str, url: str, ledger: str, point: str) -> None:
    sagacity = Sagacity.from_url(url, lease_ttl=1.0)
    payments = Payments(Path(ledger))
    tools = {tool.name: tool for tool in sagacity.wrap(payments)}
    if command == "wire":
        sagacity.saga("pay-1", lambda: (tools["reserve"]("SKU-1"), tools["wire"]("50", "bob")))
        sagacity.approve("pay-1", approver="alice")
        payments.stops["before-wire"] = Stop.HANG
        sagacity.resume_saga("pay-1")
    else:
        payments.stops[point] = Stop.HANG

        def work() -> None:
            tools["reserve"]("SKU-1")
            tools["charge"]("19.99")
            tools["ship"]("Berlin")

        sagacity.saga("pay-1", work)
    raise SystemExit(f"the worker was meant to be killed at {point}")


if __name__ == "__main__":
    main(*sys.argv[1:])
