"""A sweeper in a process of its own: `python -m tests.approval._sweep_child MODE URL AT [N]`.

Modes:
- `race`: print `ready`, wait for a line on stdin, sweep once, print what it did and
  which reminders its hook was told of, as JSON.
- `kill-in-hook`: sweep; at the Nth reminder the hook (told after the lease is released)
  prints `told SAGA` and waits to be killed.
- `kill-in-lease`: sweep; once the Nth REMINDED is committed, with the saga's lease still
  held, print `reminded SAGA` and wait to be killed.
"""

from __future__ import annotations

import datetime
import json
import sys
import threading

from sagacity import (
    ApprovalRequest,
    ApproverGroup,
    Escalator,
    Reversibility,
    Sagacity,
    compensable,
)
from sagacity._history import SagaHistory
from sagacity.approval._lifecycle import ApprovalLifecycle
from sagacity.journal import JournalEntry
from sagacity.testing import FakeClock

HOUR = 3600
START = datetime.datetime(2026, 3, 6, 17, 0, tzinfo=datetime.UTC)
LEADS = ApproverGroup(name="treasury-leads", members=["carol", "dave"], ttl=1800)


class Wires:
    """A wire reminded 10 minutes before its expiry, escalated to the treasury leads."""

    @compensable(
        reversibility=Reversibility.IRREVERSIBLE, remind_before=600, escalate_to="treasury-leads"
    )
    def wire(self, amount: str) -> str:
        """Wire money."""
        return f"wire-{amount}"


def open_at(url: str, at: datetime.datetime, **options: object) -> Sagacity:
    """A Sagacity on `url` whose clock stands at `at`, with the wire wrapped."""
    sagacity = Sagacity.from_url(
        url, approval_ttl=HOUR, clock=FakeClock(at), approver_groups=[LEADS], **options
    )
    sagacity.wrap(Wires())
    return sagacity


def main(argv: list[str]) -> None:
    mode, url, at = argv[1], argv[2], datetime.datetime.fromisoformat(argv[3])
    nth = int(argv[4]) if len(argv) > 4 else 1
    told: list[str] = []
    reminded: list[str] = []

    def hook(request: ApprovalRequest) -> None:
        told.append(request.saga_id)
        if mode == "kill-in-hook" and len(told) == nth:
            print(f"told {request.saga_id}", flush=True)
            threading.Event().wait()

    if mode == "kill-in-lease":
        real = ApprovalLifecycle.remind

        def remind(
            self: ApprovalLifecycle, history: SagaHistory, request: ApprovalRequest
        ) -> JournalEntry:
            entry = real(self, history, request)
            reminded.append(request.saga_id)
            if len(reminded) == nth:
                print(f"reminded {request.saga_id}", flush=True)
                threading.Event().wait()
            return entry

        ApprovalLifecycle.remind = remind  # type: ignore[method-assign]
    sagacity = open_at(url, at, on_approval_reminder=hook)
    if mode == "race":
        print("ready", flush=True)
        sys.stdin.readline()
    acted = Escalator(sagacity).sweep()
    print(json.dumps({"acted": [[a.saga_id, a.action] for a in acted], "told": told}), flush=True)
    sagacity.close()


if __name__ == "__main__":
    main(sys.argv)
