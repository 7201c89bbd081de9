"""A workflow for racing and failing after a gate: hold, pay behind a gate, file a receipt."""

from __future__ import annotations

import threading

from sagacity import CompensationContext, compensable, compensation
from sagacity.workflows import gate, stage, workflow


@workflow("guarded-payout")
class GuardedPayout:
    """Hold, pay behind a gate (undoable), then file a receipt that may fail."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.paying = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.receipt_fails = False

    @stage(order=1)
    @compensable(by="unhold")
    def hold(self, amount: int) -> int:
        self.log.append(f"hold {amount}")
        return amount

    @compensation
    def unhold(self, ctx: CompensationContext) -> None:
        self.log.append(f"unhold {ctx.result}")

    @stage(order=2)
    @gate(reason="money leaves")
    @compensable(by="refund")
    def pay(self, amount: int) -> str:
        self.paying.set()
        assert self.release.wait(10)
        self.log.append(f"pay {amount}")
        return f"payment-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.log.append(f"refund {ctx.result}")

    @stage(order=3)
    def receipt(self, payment: str) -> str:
        if self.receipt_fails:
            raise RuntimeError("receipt printer on fire")
        self.log.append(f"receipt {payment}")
        return f"receipt-{payment}"
