"""Tutorial: a wire transfer saga in a DBOS workflow that outlives the process that began it.

Run it with `python examples/tutorials/dbos_transfer.py`. It plays three parts, each a
process of its own: the first application process starts the transfer, which holds the
funds and asks to wire them (IRREVERSIBLE), then dies (SIGKILL) while the workflow
waits; a human approves the request through their own `Sagacity` on the journal, as the
inbox or `sagacity approve` would; a second application process launches DBOS, which
recovers the workflow, and the wire runs once. That process then starts a second
transfer, which the human rejects: the hold is released. DBOS keeps its checkpoints in a
SQLite file here (on PostgreSQL in production, beside the journal if you like).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from dbos import DBOS, SetWorkflowID

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.integrations.dbos import DBOSSaga, DecisionRelay, SagaEndedError, SagaSteps


class Payments:
    """Hold funds (released if the saga fails), then wire them (IRREVERSIBLE)."""

    @compensable(by="release_hold")
    def hold_funds(self, account: str, amount: str) -> str:
        print(f"  bank: held {amount} on {account}", flush=True)
        return f"hold-{account}"

    @compensation
    def release_hold(self, ctx: CompensationContext) -> None:
        print(f"  bank: released {ctx.result}", flush=True)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        print(f"  bank: wired {amount} to {to}", flush=True)
        return f"wire-{to}"


STEPS: list[SagaSteps] = []
"""The application's steps, made once its journal is known (before DBOS launches)."""


@DBOS.workflow()
def transfer(account: str, amount: str, to: str) -> str:
    """The workflow: its id is the saga's; it touches the journal only through steps."""
    with DBOSSaga(STEPS[0], decision_poll=0.5) as saga:
        saga.call("hold_funds", account=account, amount=amount)
        return str(saga.call("send_wire_transfer", amount=amount, to=to))


def application(folder: str, sagacity: Sagacity) -> None:
    """Launch DBOS, which recovers the workflows a process left unfinished."""
    STEPS.append(SagaSteps(sagacity, [Payments()]))
    DBOS(
        config={
            "name": "payments",
            "system_database_url": f"sqlite:///{folder}/dbos.sqlite",
            "log_level": "ERROR",
        }
    )
    DBOS.launch()


def wait_for_request(sagacity: Sagacity, saga_id: str) -> None:
    while not sagacity.pending(saga_id):
        time.sleep(0.05)


def first_process(folder: str) -> None:
    """Start transfer-1, wait until it asks for a human, and die."""
    with Sagacity.from_url(f"sqlite:///{folder}/journal.db") as sagacity:
        application(folder, sagacity)
        with SetWorkflowID("transfer-1"):
            DBOS.start_workflow(transfer, "ACC-7", "900.00", "ACME")
        wait_for_request(sagacity, "transfer-1")
        print("  process 1: the workflow waits for a human; killed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def second_process(folder: str) -> None:
    """Recover transfer-1 (approved meanwhile), then run transfer-2, which is rejected."""
    journal = f"sqlite:///{folder}/journal.db"
    with Sagacity.from_url(journal) as sagacity, Sagacity.from_url(journal) as human:
        application(folder, sagacity)
        relay = DecisionRelay(sagacity)
        threading.Thread(target=relay.run, daemon=True).start()
        print("  process 2: DBOS recovered transfer-1")
        result = DBOS.retrieve_workflow("transfer-1").get_result()
        print(f"  workflow returned {result!r}")
        print(f"  saga: {sagacity.history('transfer-1')[-1].payload['outcome']}")
        print("transfer-2:")
        with SetWorkflowID("transfer-2"):
            handle = DBOS.start_workflow(transfer, "ACC-7", "900.00", "ACME")
        decide(human, "transfer-2", approve=False)
        try:
            handle.get_result()
        except SagaEndedError as ended:
            print(f"  workflow failed: SagaEndedError ({ended.outcome})")
        print(f"  saga: {sagacity.history('transfer-2')[-1].payload['outcome']}")
        relay.close()
        DBOS.destroy()


def decide(human: Sagacity, saga_id: str, *, approve: bool) -> None:
    """The human: waits for the request in the queue, then approves or rejects it."""
    wait_for_request(human, saga_id)
    (request,) = human.pending(saga_id)
    print(f"  human: {request.tool_name}({request.input}) sha256 {request.input_sha256[:12]}…")
    if approve:
        human.approve(saga_id, approver="alice")
        print("  human: approved")
    else:
        human.reject(saga_id, approver="alice", reason="unknown payee")
        print("  human: rejected")


def run(part: str, folder: str) -> None:
    """Run a part of this program as a process of its own; print what it printed."""
    done = subprocess.run(
        [sys.executable, __file__, part, folder], capture_output=True, text=True, check=False
    )
    print(done.stdout, end="", flush=True)
    if done.returncode not in (0, -signal.SIGKILL):
        raise SystemExit(f"{part} exited {done.returncode}: {done.stderr}")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print("transfer-1:", flush=True)
        run("first", folder)
        with Sagacity.from_url(f"sqlite:///{folder}/journal.db") as human:
            decide(human, "transfer-1", approve=True)
        sys.stdout.flush()
        run("second", folder)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        {"first": first_process, "second": second_process}[sys.argv[1]](sys.argv[2])
    else:
        main()
