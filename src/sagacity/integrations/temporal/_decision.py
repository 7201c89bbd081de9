"""Decisions relayed to Temporal workflows as signals, as soon as they are journaled.

The signal is a hint: a workflow asks the journal itself (the `sagacity.decision`
activity), and one that misses a signal learns the decision at its next poll.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.service import RPCError

from sagacity.integrations.temporal._wire import DECISION_SIGNAL, TEMPORAL
from sagacity.saga import Sagacity
from sagacity.worker import Decision, DecisionEvents

__all__ = ["DecisionRelay"]

_log = logging.getLogger("sagacity.temporal")


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
