"""Workers for the lease tests, run as `python -m tests.processes._lease_child CMD URL LEDGER …`.

compensate URL LEDGER SAGA     compensate SAGA, waiting for its lease
run URL LEDGER SAGA            run SAGA: reserve (a line in LEDGER), refused if busy
hang URL LEDGER SAGA           run SAGA: reserve, then a charge that prints `inside charge`
                               and waits to be killed
stall URL LEDGER SAGA          run SAGA: reserve, print `reserved`, sleep 3 s, then charge

Every command prints its outcome (or the name of the error that ended it) last. The
lease lasts 1 s, so that a dead or stopped worker is taken over quickly.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sagacity import CompensationContext, Sagacity, SagacityError, compensable, compensation


class Ledger:
    """Tools whose effects and undos are lines in a file shared by the processes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} {line}\n")
            out.flush()
            os.fsync(out.fileno())

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        self.record(f"reserve {sku}")
        return f"res-{sku}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.record(f"release {ctx.result}")

    @compensable(by="refund")
    def charge(self, amount: str) -> str:
        self.record(f"charge {amount}")
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.record(f"refund {ctx.result}")

    @compensable(by="refund")
    def charge_slowly(self, amount: str) -> str:
        self.record(f"charge {amount}")
        print("inside charge", flush=True)
        time.sleep(600)  # killed here: the charge is in doubt
        return f"ch-{amount}"


def main(command: str, url: str, ledger: str, saga_id: str) -> None:
    sagacity = Sagacity.from_url(url, lease_ttl=1.0, lease_wait=30.0 if command == "compensate"
                                 else 0.0)  # fmt: skip
    tools = {tool.name: tool for tool in sagacity.wrap(Ledger(Path(ledger)))}

    def hang() -> None:
        tools["reserve"]("SKU-1")
        tools["charge_slowly"]("9.99")

    def stall() -> None:
        tools["reserve"]("SKU-1")
        print("reserved", flush=True)
        time.sleep(3)
        tools["charge"]("9.99")

    works = {"run": lambda: tools["reserve"]("SKU-1"), "hang": hang, "stall": stall}
    try:
        if command == "compensate":
            result = sagacity.compensate(saga_id)
        else:
            result = sagacity.saga(saga_id, works[command])
        print(result.outcome.value, flush=True)
    except SagacityError as error:
        print(type(error).__name__, flush=True)
    finally:
        sagacity.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
