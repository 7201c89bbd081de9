"""Decisions for Temporal workflows: read from the journal, and relayed as signals.

The workflow asks the journal (`sagacity.decision` activity, `decision_of`) and is woken
by a signal (`DecisionRelay`) as soon as a decision is journaled. The signal is a hint:
a workflow that misses it learns the decision at its next poll.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.service import RPCError

from sagacity.adapter import SagaHistory, payload_of
from sagacity.integrations.temporal._wire import DECISION_SIGNAL
from sagacity.saga import Sagacity
from sagacity.worker import Decision, DecisionEvents, DecisionOutcome

__all__ = ["TEMPORAL", "DecisionRelay", "decision_of"]

TEMPORAL = "temporal"
"""The resumer name a Temporal activity's approval requests journal (`pausing_as`)."""

_log = logging.getLogger("sagacity.temporal")

_ANSWERS = {
    DecisionOutcome.APPROVED: "approved",
    DecisionOutcome.REJECTED: "rejected",
    DecisionOutcome.EXPIRED: "expired",
}


def decision_of(events: DecisionEvents, history: SagaHistory, call_id: str) -> str:
    """approved, rejected, expired or pending: the decision on the call's newest request.

    An edited request is pending: its replacement, the call's newest request now, waits
    for its own approvals.
    """
    asked = history.asked.get(call_id)
    if asked is None:
        return "pending"
    request_id = payload_of(asked).get("request_id")
    found = [d for d in events.decisions(history.saga_id) if d.request_id == request_id]
    return _ANSWERS.get(found[-1].outcome, "pending") if found else "pending"


class DecisionRelay:
    """Signals each waiting workflow as soon as its saga's request is decided.

    ```python
    relay = DecisionRelay(sagacity, client)
    task = asyncio.create_task(relay.run())  # beside the worker; cancel it to stop
    ```

    Follows every decision in the journal (`DecisionEvents`: LISTEN/NOTIFY on
    PostgreSQL, a poll elsewhere) and sends `sagacity.decision` to the workflow whose id
    is the saga's, for the requests Temporal activities asked. Run one or several (a
    repeated signal is harmless); without any, workflows learn of decisions at their
    `decision_poll`.
    """

    def __init__(
        self, sagacity: Sagacity, client: Client, *, poll_interval: float | None = None
    ) -> None:
        self.sagacity = sagacity
        self.client = client
        self.poll_interval = poll_interval

    async def run(self) -> None:
        """Relay decisions until cancelled."""
        events = DecisionEvents(self.sagacity, poll_interval=self.poll_interval)
        try:
            async for decision in events.afollow():
                if decision.resumer == TEMPORAL:
                    await self.signal(decision)
        finally:
            await asyncio.to_thread(events.close)

    async def signal(self, decision: Decision) -> None:
        """Wake the workflow of `decision`'s saga; a workflow that is gone is skipped."""
        handle = self.client.get_workflow_handle(decision.saga_id)
        try:
            await handle.signal(DECISION_SIGNAL, decision.call_id)
        except RPCError as error:
            _log.info(
                "saga %r: the decision on request %s was not signalled: %s",
                decision.saga_id,
                decision.request_id,
                error,
            )
