"""The application a worker process runs in the worker's process tests (`--app`).

Configured by environment variables: the database, the file every effect is appended to,
where the resume stops for a SIGKILL (`in-wire`: inside the approved call; `after-wire`:
after it, while the run goes on), and the lease's time to live (short, so that another
worker takes a killed worker's saga over quickly).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sagacity import (
    CompensationContext,
    Decision,
    DecisionOutcome,
    Reversibility,
    Sagacity,
    Worker,
    compensable,
    compensation,
)

EFFECTS = Path(os.environ["SAGACITY_WORKER_TEST_EFFECTS"])
BLOCK = os.environ.get("SAGACITY_WORKER_TEST_BLOCK", "")


def effect(line: str) -> None:
    """Append one line for the test to read, durably, before anything else happens."""
    with EFFECTS.open("a", encoding="utf-8") as out:
        out.write(f"{line}\n")
        out.flush()
        os.fsync(out.fileno())


def _stuck(where: str) -> None:
    effect(f"stuck {where} {os.getpid()}")
    threading.Event().wait()  # until SIGKILL


class Bank:
    """Hold funds and wire money; every effect is a line in EFFECTS."""

    @compensable(by="release")
    def hold(self, amount: int) -> str:
        """Hold funds."""
        effect(f"hold {amount}")
        return f"hold-{amount}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        effect(f"release {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: int, to: str) -> str:
        """Wire money."""
        effect(f"wire {amount} {to}")
        if BLOCK == "in-wire":
            _stuck("in-wire")
        return f"tx-{amount}"


sagacity = Sagacity.from_url(
    os.environ["SAGACITY_WORKER_TEST_DB"],
    lease_ttl=float(os.environ.get("SAGACITY_WORKER_TEST_LEASE_TTL", "30")),
)
sagacity.wrap(Bank())


def start(saga_id: str, amount: int) -> None:
    """The agent's first run: hold, then the wire waits for approval."""
    hold, wire = sagacity.tool("hold"), sagacity.tool("wire")

    def work() -> str:
        hold(amount=amount)
        return wire(amount=amount, to="acme")

    sagacity.saga(saga_id, work)


def resume(decision: Decision) -> str:
    """The hand-written loop, run again: the wire (approved) then what comes after it."""
    if decision.outcome is not DecisionOutcome.APPROVED:
        effect(f"told no {decision.saga_id}")
        return "no"
    result = sagacity.tool("wire")(**decision.input)
    effect(f"after wire {decision.saga_id} {result}")
    if BLOCK == "after-wire":
        _stuck("after-wire")
    return str(result)


worker = Worker(sagacity, resume, poll_interval=0.05)
