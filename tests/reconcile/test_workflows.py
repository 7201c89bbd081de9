"""A workflow stage declares a reconciler as a tool does: its doubt is settled the same way."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    ConfigurationError,
    Phase,
    ReconcileContext,
    Reconciled,
    Sagacity,
    compensable,
    current_call,
)
from sagacity.workflows import WorkflowRuntime, WorkflowStatus, stage, workflow


@workflow("payout")
class Payout:
    def __init__(self, charged: bool) -> None:
        self.charged = charged
        self.provider: dict[str, str] = {}
        self.refunds: list[Any] = []

    @stage(order=1)
    @compensable(by="refund", reconcile="find_charge")
    def charge(self, amount: int) -> str:
        call = current_call()
        assert call is not None
        if self.charged:
            self.provider[call.call_id] = f"ch-{amount}"
        raise TimeoutError("the provider did not answer")

    def refund(self, ctx: CompensationContext) -> None:
        self.refunds.append(ctx.result)

    def find_charge(self, ctx: ReconcileContext) -> Reconciled:
        found = self.provider.get(ctx.call_id)
        return Reconciled.did_not_land() if found is None else Reconciled.landed(found)


class TestStages:
    @pytest.mark.parametrize("charged", [True, False])
    def test_a_stage_in_doubt_is_reconciled(self, store_url: str, charged: bool) -> None:
        """The stage's reconciler is asked when the run fails; a charge it finds is refunded."""
        with Sagacity.from_url(store_url) as sagacity:
            flow = Payout(charged)
            handle = WorkflowRuntime(sagacity, [flow]).start("payout", 5, run_id="p-1")
            assert handle.status is WorkflowStatus.COMPENSATED
            assert flow.refunds == (["ch-5"] if charged else [])
            (verdict,) = [e for e in sagacity.history("p-1") if e.phase is Phase.RECONCILED]
            assert verdict.payload["verdict"] == ("landed" if charged else "did_not_land")

    def test_a_stage_reconciler_that_names_nothing_is_refused(self) -> None:
        """As for a tool, at declaration."""

        @workflow("broken")
        class Broken:
            @stage(order=1)
            @compensable(by="undo", reconcile="missing")
            def act(self, value: int) -> int:
                return value

            def undo(self) -> None: ...

        with (
            Sagacity.from_url("memory://") as sagacity,
            pytest.raises(ConfigurationError, match="reconcile='missing', which does not exist"),
        ):
            WorkflowRuntime(sagacity, [Broken()])
