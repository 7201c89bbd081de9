"""A Temporal worker in a process of its own, that SIGKILLs itself at a named point.

python -m tests.integrations.temporal._worker_process ADDRESS STORE_URL QUEUE EFFECTS KILL_AT

Every effect and undo is a line appended (and fsynced) to EFFECTS, so a test counts
what happened in the world, whatever the journal says. KILL_AT is `<tool>:start` (before
the activity journals anything), `<tool>:during` (after the effect, before EXECUTED),
`<tool>:done` (after EXECUTED, before Temporal hears back), `<undo>:during`, or `-`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import sys
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    SagaTool,
    compensable,
    compensation,
)
from sagacity.integrations.temporal import CallInput, CallOutput, SagaActivities
from tests.integrations.temporal._harness import RUNNER, WORKFLOWS


class Ledger:
    """The order tools, each effect a line in a file."""

    def __init__(self, effects: Path, kill_at: str) -> None:
        self.effects = effects
        self.kill_at = kill_at

    def point(self, name: str) -> None:
        if name == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def effect(self, line: str, point: str) -> None:
        with self.effects.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
        self.point(point)

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        self.effect(f"reserve {sku}", "reserve_inventory:during")
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.effect(f"release {ctx.result}", "release_inventory:during")

    @compensable(by="refund")
    def charge_card(self, amount: str, card: str) -> str:
        self.effect(f"charge {amount}", "charge_card:during")
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.effect(f"refund {ctx.result}", "refund:during")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        self.effect(f"wire {amount} to {to}", "send_wire_transfer:during")
        return f"wire-{amount}"


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
