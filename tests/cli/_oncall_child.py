"""A worker that dies inside a call: `python -m tests.cli._oncall_child URL SAGA`.

It runs SAGA with a lease of ten minutes: reserve, then a charge that prints
`inside charge` and waits to be killed, so that the charge is in doubt and the lease,
had nobody noticed the process die, would hold the saga for ten minutes.
"""

from __future__ import annotations

import sys
import time

from sagacity import CompensationContext, Sagacity, compensable, compensation


class Shop:
    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        return f"res-{sku}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        pass

    @compensable(by="refund")
    def charge(self, amount: str) -> str:
        print("inside charge", flush=True)
        time.sleep(600)  # killed here
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        pass


def main(url: str, saga_id: str) -> None:
    sagacity = Sagacity.from_url(url, lease_ttl=600.0)
    tools = {tool.name: tool for tool in sagacity.wrap(Shop())}

    def work() -> None:
        tools["reserve"]("SKU-1")
        tools["charge"]("9.99")

    sagacity.saga(saga_id, work)


if __name__ == "__main__":
    main(*sys.argv[1:3])
