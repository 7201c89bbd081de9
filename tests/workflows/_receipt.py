"""A workflow whose second stage returns a value with no JSON form: note → issue → file.

`note` declares no effect (no `@compensable`), so its undo does nothing. Effects and
undos are lines of the same kind of ledger as the refund workflow's.
"""

from __future__ import annotations

from typing import Any

from sagacity import CompensationContext, compensable, compensation
from sagacity.workflows import stage, workflow
from tests.workflows._refund import Ledger


class Receipt:
    """What `issue` returns: an object sagacity has no JSON form for."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id

    def __repr__(self) -> str:
        return f"Receipt({self.order_id!r})"


@workflow("receipt", description="Issue a receipt and file it")
class ReceiptWorkflow:
    """`issue`'s output cannot be journaled, so it cannot feed `file`."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    @stage(order=1)
    def note(self, order_id: str) -> str:
        """Note the order down; nothing to undo."""
        self.ledger.record(f"note {order_id}")
        return order_id

    @stage(order=2)
    @compensable(by="void")
    def issue(self, order_id: str) -> Receipt:
        """Issue the receipt."""
        self.ledger.record(f"issue {order_id}")
        return Receipt(order_id)

    @compensation
    def void(self, ctx: CompensationContext) -> None:
        self.ledger.record(f"void {ctx.input['order_id']}")

    @stage(order=3)
    def file(self, receipt: Any) -> str:
        """File what `issue` handed on."""
        self.ledger.record(f"file {receipt!r}")
        return "filed"
