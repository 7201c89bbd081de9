"""A Temporal worker in a process of its own, that SIGKILLs itself at a named point.

python -m tests.integrations.temporal._worker_process ADDRESS STORE_URL QUEUE EFFECTS KILL_AT

The tools are `tests.integrations._ledger`'s, whose docstring names the kill points;
KILL_AT `-` kills nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from sagacity import Sagacity, SagaTool
from sagacity.integrations.temporal import CallInput, CallOutput, SagaActivities
from tests.integrations._ledger import Ledger
from tests.integrations.temporal._harness import RUNNER, WORKFLOWS


class KillingActivities(SagaActivities):
    """The activities, with the `:start` and `:done` kill points around each call."""

    def __init__(self, sagacity: Sagacity, ledger: Ledger) -> None:
        super().__init__(sagacity, [ledger])
        self.ledger = ledger

    def call(self, tool: SagaTool, call: CallInput) -> CallOutput:
        self.ledger.point(f"{tool.name}:start")
        output = super().call(tool, call)
        if output.request_id is None:
            self.ledger.point(f"{tool.name}:done")
        return output


async def main(address: str, store_url: str, queue: str, effects: str, kill_at: str) -> Any:
    client = await Client.connect(address)
    with Sagacity.from_url(store_url) as sagacity, concurrent.futures.ThreadPoolExecutor(4) as pool:
        activities = KillingActivities(sagacity, Ledger(Path(effects), kill_at))
        async with Worker(
            client,
            task_queue=queue,
            workflows=list(WORKFLOWS),
            activities=activities.all,
            activity_executor=pool,
            workflow_runner=RUNNER,
        ):
            print("ready", flush=True)
            await asyncio.Event().wait()  # until the test kills or terminates it


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
