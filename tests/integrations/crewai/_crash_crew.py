"""A crew whose charge blocks after its effect: run it, and SIGKILL it there.

`python -m tests.integrations.crewai._crash_crew URL SAGA EFFECTS` runs the crew in saga
SAGA; each effect is appended to the file EFFECTS; the charge prints `charging` once its
effect is written, then waits forever.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from sagacity import CompensationContext, Sagacity, compensable, compensation
from tests.integrations.crewai import conftest  # noqa: F401  (CrewAI offline, quiet)
from tests.integrations.crewai._crew import crew

SCRIPT = [
    [("reserve_stock", {"sku": "K", "qty": 1})],
    [("charge_card", {"amount": 70})],
    "Charged.",
]


class CrashShop:
    def __init__(self, effects: Path, *, block: bool) -> None:
        self.effects = effects
        self.block = block

    def _effect(self, text: str) -> None:
        with self.effects.open("a", encoding="utf-8") as file:
            file.write(text + "\n")

    @compensable(by="release_stock")
    def reserve_stock(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        self._effect(f"reserve {sku} {qty}")
        return f"res-{sku}"

    @compensation
    def release_stock(self, ctx: CompensationContext) -> None:
        self._effect(f"release {ctx.result}")

    @compensable(by="refund")
    def charge_card(self, amount: int) -> str:
        """Charge the customer's card."""
        self._effect(f"charge {amount}")
        if self.block:
            print("charging", flush=True)
            threading.Event().wait()
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self._effect(f"refund {ctx.result}")


def main() -> None:
    url, saga_id, effects = sys.argv[1:4]
    from sagacity.integrations.crewai import crew_tools

    with Sagacity.from_url(url) as sagacity:
        tools = crew_tools(sagacity, CrashShop(Path(effects), block=True))
        sagacity.saga(saga_id, crew(tools, SCRIPT, path="native").kickoff)


if __name__ == "__main__":
    main()
