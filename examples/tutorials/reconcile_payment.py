"""Tutorial: a worker killed mid-charge; recovery asks the provider and refunds what it finds.

Run it with `python examples/tutorials/reconcile_payment.py`. It starts this same file as a
worker process, which reserves stock and charges a card: the payment provider takes the
charge (under the idempotency key `current_call().call_id`) and the worker is killed with
SIGKILL before the answer comes back. The charge's INTENT is journaled, its outcome is not:
it is *in doubt*. The operator's process declares how to ask the provider about it
(`reconcile="find_charge"`), so `compensate` asks before any human is: the provider has a
charge with that key, the verdict is journaled with the provider's answer as evidence, and
the charge is refunded like any other. `sagacity show` prints who decided and on what.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sagacity import (
    CompensationContext,
    Evidence,
    ReconcileContext,
    Reconciled,
    Sagacity,
    compensable,
    compensation,
    current_call,
    verify,
)


class Provider:
    """A payment provider that keeps charges by idempotency key (a file every process shares)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def charges(self) -> dict[str, dict[str, str]]:
        if not self.path.exists():
            return {}
        return json.loads(self.path.read_text(encoding="utf-8"))

    def charge(self, key: str, amount: str) -> dict[str, str]:
        charges = self.charges()
        found = charges.setdefault(key, {"id": f"ch_{len(charges) + 1}", "amount": amount})
        self.path.write_text(json.dumps(charges), encoding="utf-8")
        return found

    def refund(self, charge_id: str) -> None:
        charges = self.charges()
        for charge in charges.values():
            if charge["id"] == charge_id:
                charge["refunded"] = "yes"
        self.path.write_text(json.dumps(charges), encoding="utf-8")

    def find(self, key: str) -> tuple[dict[str, str] | None, bytes]:
        """The charge with this key, if any, and the response as the provider sent it."""
        found = self.charges().get(key)
        return found, json.dumps(found, sort_keys=True).encode()


class Shop:
    def __init__(self, provider: Provider, stock: Path) -> None:
        self.provider = provider
        self.stock = stock

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        with self.stock.open("a", encoding="utf-8") as out:
            out.write(f"reserved {sku}\n")
        return f"res-{sku}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        with self.stock.open("a", encoding="utf-8") as out:
            out.write(f"released {ctx.result}\n")

    @compensable(by="refund", reconcile="find_charge")
    def charge(self, amount: str) -> str:
        call = current_call()
        assert call is not None
        charge = self.provider.charge(call.call_id, amount)  # the idempotency key
        print("charged; the answer is on its way", flush=True)  # killed after this line
        time.sleep(60)
        return charge["id"]

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.provider.refund(str(ctx.result))

    def find_charge(self, ctx: ReconcileContext) -> Reconciled:
        """Ask the provider whether a charge with this call's key exists. It only reads."""
        found, response = self.provider.find(ctx.call_id)
        evidence = Evidence.of(f"charges?key={ctx.call_id}", response)
        if found is None:
            return Reconciled.did_not_land(evidence=evidence)
        return Reconciled.landed(found["id"], evidence=evidence)


def worker(folder: str) -> None:
    """The agent's process: killed inside `charge`, after the provider took the charge."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db", lease_ttl=1.0)
    shop = Shop(Provider(Path(folder, "provider.json")), Path(folder, "stock.txt"))
    tools = {tool.name: tool for tool in sagacity.wrap(shop)}
    sagacity.saga("order-9", lambda: (tools["reserve"]("SKU-7"), tools["charge"]("42.00")))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        with subprocess.Popen(
            [sys.executable, __file__, "worker", folder], stdout=subprocess.PIPE, text=True
        ) as child:
            assert child.stdout is not None
            print(f"worker: {child.stdout.readline().strip()}")
            os.kill(child.pid, signal.SIGKILL)
            print(f"worker: killed (exit status {child.wait()})")

        # The operator's process: the tools, and their reconcilers, are wrapped here.
        database = f"sqlite:///{folder}/sagacity.db"
        provider = Provider(Path(folder, "provider.json"))
        with Sagacity.from_url(database, lease_wait=15) as sagacity:
            sagacity.wrap(Shop(provider, Path(folder, "stock.txt")))
            result = sagacity.compensate("order-9")
            print(f"compensate: {result.outcome.name}")
            for entry in sagacity.history("order-9"):
                print(f"  {entry.seq:>2} {entry.phase.name:<12} {entry.call_id or ''}")
            print("journal verifies:", verify(sagacity.journal).ok)
        print("provider:", provider.charges())

        shown = subprocess.run(
            [sys.executable, "-m", "sagacity.cli", "show", "order-9", "--database", database],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        print("sagacity show order-9 (its verdicts):")
        print(shown[shown.index("verdicts and findings:") :].rstrip())


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2])
    else:
        main()
