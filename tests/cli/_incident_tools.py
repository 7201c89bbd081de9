"""A theatre's tools, copied into a folder as `theatre.py`: what an application ships.

Their effects and undos are lines in `ledger.txt` in the working directory. Files there
steer them, so that `--tools theatre:Theatre` makes the same tools with no arguments:
`hang_charge` and `hang_refund` make the charge or the refund print `inside charge` /
`inside refund` and wait to be killed; `refund_down` and `seat_desk_down` make the refund
or the release raise.

`python theatre.py URL SAGA ask` holds a seat, then asks to book the show (IRREVERSIBLE):
the saga waits for approval. `python theatre.py URL SAGA order` holds a seat, charges the
card, then ships the tickets, which fails: the walk refunds and releases.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation


class Theatre:
    """Seats, a card and a box office; everything lands in `ledger.txt`."""

    def record(self, line: str) -> None:
        with Path("ledger.txt").open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def wait_if(self, flag: str, point: str) -> None:
        if Path(flag).exists():
            print(f"inside {point}", flush=True)
            time.sleep(120)

    @compensable(by="release_seat")
    def hold_seat(self, seat: str) -> str:
        self.record(f"hold {seat}")
        return f"hold-{seat}"

    @compensation
    def release_seat(self, ctx: CompensationContext) -> None:
        if Path("seat_desk_down").exists():
            raise ConnectionError("the seat desk is down")
        self.record(f"release {ctx.result}")

    @compensable(by="refund_card")
    def charge_card(self, amount: str) -> str:
        self.wait_if("hang_charge", "charge")  # between INTENT and EXECUTED
        self.record(f"charge {amount}")
        return f"ch-{amount}"

    @compensation
    def refund_card(self, ctx: CompensationContext) -> None:
        if Path("refund_down").exists():
            raise ConnectionError("the payment provider is down")
        self.wait_if("hang_refund", "refund")  # between COMPENSATING and its outcome
        self.record(f"refund {ctx.result}")

    @compensable(by="void_tickets")
    def ship_tickets(self, to: str) -> str:
        raise RuntimeError("courier down")

    @compensation
    def void_tickets(self, ctx: CompensationContext) -> None:
        self.record(f"void {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def book_show(self, show: str) -> str:
        if Path("box_office_down").exists():
            raise ConnectionError("the box office is down")
        self.record(f"book {show}")
        return f"bk-{show}"


def main(url: str, saga_id: str, story: str) -> None:
    # A short lease: whoever acts after a kill does not wait long for it to run out.
    sagacity = Sagacity.from_url(url, lease_ttl=1.0)
    tools = {tool.name: tool for tool in sagacity.wrap(Theatre())}

    def ask() -> None:
        tools["hold_seat"]("A1")
        tools["book_show"]("Hamlet")

    def order() -> None:
        tools["hold_seat"]("A1")
        tools["charge_card"]("40")
        tools["ship_tickets"]("Berlin")

    result = sagacity.saga(saga_id, ask if story == "ask" else order)
    print(result.outcome.value, flush=True)
    sagacity.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
