"""`sagacity demo`: a compensated order saga, an approved wire, and a wire left to approve.

`OrderTools` is importable, and made with no arguments, so that the process that runs
the wire left waiting (`sagacity resume wire-1003 --tools sagacity._demo:OrderTools`)
wraps the same tools the demo did.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from sagacity._display import journal_table
from sagacity.annotations import Reversibility, compensable, compensation
from sagacity.audit import verify
from sagacity.compensation import CompensationContext
from sagacity.errors import ConfigurationError
from sagacity.saga import Sagacity, SagaResult
from sagacity.tools import SagaTool

__all__ = ["OrderTools", "is_demo_journal", "run_demo"]


class CourierDown(RuntimeError):
    """The dispatch service refused the order."""


class OrderTools:
    """A shop's tools: stock, payments, dispatch and wires, each printing what it does."""

    def __init__(self, say: Callable[[str], None] = print) -> None:
        self.say = say

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock for an order and return the reservation id."""
        self.say(f"    warehouse: reserved {qty} x {sku} as res-8891")
        return "res-8891"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        """Release the reservation the tool returned."""
        self.say(f"    warehouse: released {ctx.result}")

    @compensable(by="refund_charge")
    def charge_card(self, customer: str, amount: str) -> str:
        """Charge the customer's card and return the charge id."""
        self.say(f"    payments: charged {amount} to {customer} as ch_1M2n3")
        return "ch_1M2n3"

    @compensation
    def refund_charge(self, ctx: CompensationContext) -> None:
        """Refund the charge the tool returned."""
        self.say(f"    payments: refunded {ctx.result} ({ctx.input['amount']})")

    @compensable(by="cancel_dispatch")
    def dispatch_order(self, order_id: str) -> str:
        """Hand the order to the courier."""
        raise CourierDown(f"courier refused order {order_id}: depot closed")

    @compensation
    def cancel_dispatch(self) -> None:
        """Nothing to cancel when dispatch did not happen."""

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send a wire transfer; it cannot be recalled."""
        reference = "wt-" + hashlib.sha256(f"{amount}|{to}".encode()).hexdigest()[:4]
        self.say(f"    bank: wired {amount} to {to} as {reference}")
        return reference


PENDING_WIRE = "wire-1003"
"""The saga the demo leaves waiting for approval, for the inbox to show."""
_LEGACY_SAGAS = {"order-1001", "wire-1002"}
"""The sagas of a demo journal written before the marker existed."""
_MARKER = "demo_journal"
"""The `sagacity_meta` key that marks a file the demo created, and may replace."""


def is_demo_journal(database: Path) -> bool:
    """Whether `database` is a SQLite file the demo created (it carries the demo marker)."""
    try:
        conn = sqlite3.connect(database.absolute().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        row = conn.execute("SELECT value FROM sagacity_meta WHERE key = ?", (_MARKER,)).fetchone()
        # A demo journal written before the marker existed holds the demo's sagas only
        # (and perhaps the wire its docs asked for by hand).
        sagas = {r[0] for r in conn.execute("SELECT DISTINCT saga_id FROM sagacity_journal")}
    except sqlite3.Error:  # not SQLite, or no sagacity tables: not ours
        return False
    finally:
        conn.close()
    return row is not None or sagas in (_LEGACY_SAGAS, _LEGACY_SAGAS | {PENDING_WIRE})


def run_demo(database: Path, say: Callable[[str], None] = print, *, force: bool = False) -> bool:
    """Run the demo's sagas on a fresh SQLite file; return whether the chain verifies.

    The order saga is compensated, wire-1002 is approved and run, and wire-1003 is left
    waiting for a human's approval (the approval inbox shows it).

    A file already there is replaced only when the demo created it (it carries the demo
    marker in `sagacity_meta`), or with `force`.

    Raises:
        ConfigurationError: `database` exists, is not a demo journal, and `force` is off.
    """
    if database.exists() or database.is_symlink():
        if database.is_dir():
            raise ConfigurationError(f"{database} is a directory, not a demo journal")
        if not force and not is_demo_journal(database):
            raise ConfigurationError(
                f"{database} exists and is not a demo journal: the demo replaces only a file "
                "it created; choose another --database, or pass --force to replace it"
            )
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    sagacity = Sagacity.from_url(f"sqlite:///{database}")
    try:
        conn = sqlite3.connect(database)
        try:
            with conn:
                conn.execute("INSERT INTO sagacity_meta (key, value) VALUES (?, '1')", (_MARKER,))
        finally:
            conn.close()
        tools = {tool.name: tool for tool in sagacity.wrap(OrderTools(say))}
        _order_saga(sagacity, tools, say)
        _wire_saga(sagacity, tools, say)
        _pending_wire(sagacity, tools, say)
        report = verify(sagacity.journal)
        say("")
        say(
            f"verify: {report.sagas} sagas, {report.entries} entries: "
            + ("OK" if report.ok else f"PROBLEMS: {report.problems}")
        )
        command = sagacity_command()
        say(f"journal: {database}  (try: {command} show order-1001 --database {database})")
        say(f"approve {PENDING_WIRE} in the inbox (README: Approve in the browser), then run it:")
        say(
            f"  {command} resume {PENDING_WIRE} --database {database} "
            "--tools sagacity._demo:OrderTools"
        )
        return report.ok
    finally:
        sagacity.close()


def sagacity_command() -> str:
    """How to run the `sagacity` command installed beside this interpreter, from here.

    `make demo` installs it in `.venv/bin`, which is not on the PATH: a hint that said
    plain `sagacity` would not run. Plain `sagacity` is said only when the PATH finds
    that very script.
    """
    folder = Path(sys.executable).parent  # not resolved: a venv's python is a symlink
    scripts = [folder / name for name in ("sagacity", "sagacity.exe")]
    script = next((path for path in scripts if path.is_file()), None)
    if script is None:
        return "sagacity"
    on_path = shutil.which("sagacity")
    if on_path is not None and os.path.samefile(on_path, script):
        return "sagacity"
    with contextlib.suppress(ValueError):  # shown relative when it is below the working dir
        return str(script.absolute().relative_to(Path.cwd()))
    return str(script.absolute())


def _order_saga(sagacity: Sagacity, tools: dict[str, SagaTool], say: Callable[[str], None]) -> None:
    say("saga order-1001: reserve inventory → charge card → dispatch (fails)")

    def agent() -> str:
        tools["reserve_inventory"](sku="SKU-42", qty=2)
        tools["charge_card"](customer="cus_981", amount="59.90 EUR")
        try:
            tools["dispatch_order"](order_id="order-1001")
        except CourierDown as error:
            # What agent frameworks do: the error becomes a message, the model says "done".
            say(f"    agent: tool failed ({error}); the model replies 'Order placed!'")
        return "Order placed!"

    _report(sagacity, sagacity.saga("order-1001", agent), say)


def _wire_saga(sagacity: Sagacity, tools: dict[str, SagaTool], say: Callable[[str], None]) -> None:
    say("")
    say("saga wire-1002: an IRREVERSIBLE wire transfer")
    waiting = sagacity.saga(
        "wire-1002", lambda: tools["send_wire_transfer"](amount="12500.00 EUR", to="DE89 3704")
    )
    say(f"    agent sees: {textwrap.shorten(str(waiting.value), width=76, placeholder=' …')}")
    say(f"  outcome: {waiting.outcome.value}")
    request = waiting.pending[0]
    say(f"  approver alice@treasury reviews {request.input} sha256 {request.input_sha256[:12]}…")
    sagacity.approve("wire-1002", approver="alice@treasury", expected_sha256=request.input_sha256)
    _report(sagacity, sagacity.resume_saga("wire-1002"), say)


def _pending_wire(
    sagacity: Sagacity, tools: dict[str, SagaTool], say: Callable[[str], None]
) -> None:
    say("")
    say(f"saga {PENDING_WIRE}: an IRREVERSIBLE wire transfer, left for you to approve")
    waiting = sagacity.saga(
        PENDING_WIRE,
        lambda: tools["send_wire_transfer"](amount="980.00 EUR", to="FR76 3000 6000"),
        started_by="shop-agent",
    )
    request = waiting.pending[0]
    say(f"  outcome: {waiting.outcome.value}  {request.input} sha256 {request.input_sha256[:12]}…")


def _report(sagacity: Sagacity, result: SagaResult, say: Callable[[str], None]) -> None:
    say(f"  outcome: {result.outcome.value}")
    if result.compensation is not None:
        undone = ", ".join(ref.tool_name for ref in result.compensation.compensated)
        say(f"  compensated, in order: {undone}")
    for line in journal_table(sagacity.journal.entries(result.saga_id)):
        say("  " + line)
