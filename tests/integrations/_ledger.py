"""The order tools of the engine crash tests: each effect and undo a line in a file.

A test counts what happened in the world from the file, whatever the journal says. A
process running them SIGKILLs itself at a named point: `<tool>:during` is after the
tool's effect and before its EXECUTED, `<undo>:during` after an undo's effect; the
engines' workers add `<tool>:start` (before the call journals anything) and
`<tool>:done` (after EXECUTED, before the engine hears back).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from sagacity import CompensationContext, Reversibility, compensable, compensation

# kill point -> (saga outcome, effects in the world, in order), for a saga that reserves,
# charges and wires (IRREVERSIBLE, approved) after a worker was killed at that point and
# another finished it.
SCENARIOS = {
    "reserve_inventory:start": ("COMPLETED", ["reserve A-1", "charge 40.00", "wire 40.00 to ACME"]),
    "reserve_inventory:during": ("NEEDS_ATTENTION", ["reserve A-1"]),
    "reserve_inventory:done": ("COMPLETED", ["reserve A-1", "charge 40.00", "wire 40.00 to ACME"]),
    "charge_card:start": ("COMPLETED", ["reserve A-1", "charge 40.00", "wire 40.00 to ACME"]),
    "charge_card:during": ("NEEDS_ATTENTION", ["reserve A-1", "charge 40.00", "release res-A-1-2"]),
    "send_wire_transfer:start": (
        "COMPLETED",
        ["reserve A-1", "charge 40.00", "wire 40.00 to ACME"],
    ),
    "send_wire_transfer:during": (
        "NEEDS_ATTENTION",
        [
            "reserve A-1",
            "charge 40.00",
            "wire 40.00 to ACME",
            "refund ch-40.00",
            "release res-A-1-2",
        ],
    ),
    "send_wire_transfer:done": (
        "COMPLETED",
        ["reserve A-1", "charge 40.00", "wire 40.00 to ACME"],
    ),
}

REFUND_KILLED = (
    "NEEDS_ATTENTION",
    # The refund started and never reported: in doubt, listed, not run again; the walk
    # goes on to the release.
    ["reserve A-1", "charge 40.00", "refund ch-40.00", "release res-A-1-2"],
)
"""A rejected wire whose walk was killed in the refund, finished by another worker."""


class Ledger:
    """Reserve, charge, wire; each effect a line appended and fsynced to `effects`."""

    def __init__(self, effects: Path, kill_at: str) -> None:
        self.effects = effects
        self.kill_at = kill_at

    def point(self, name: str) -> None:
        """SIGKILL this process if `name` is the kill point."""
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
