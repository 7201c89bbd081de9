"""Workflows of the Temporal tests: an order saga, and one that swallows a failed call."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from sagacity.integrations.temporal import TemporalSaga


@dataclasses.dataclass
class Order:
    order_id: str
    sku: str = "A-1"
    amount: str = "40.00"
    wire_to: str | None = None
    ship: bool = False
    poll_seconds: float = 30.0
    timeout_seconds: float = 300.0


@workflow.defn
class OrderWorkflow:
    """Reserve, charge, then wire (IRREVERSIBLE) and ship when the order says so."""

    @workflow.run
    async def run(self, order: Order) -> list[str]:
        done = []
        async with TemporalSaga(
            decision_poll=datetime.timedelta(seconds=order.poll_seconds),
            start_to_close_timeout=datetime.timedelta(seconds=order.timeout_seconds),
        ) as saga:
            done.append(await saga.call("reserve_inventory", sku=order.sku, qty=2))
            done.append(await saga.call("charge_card", amount=order.amount, card="4242"))
            if order.wire_to is not None:
                done.append(
                    await saga.call("send_wire_transfer", amount=order.amount, to=order.wire_to)
                )
            if order.ship:
                done.append(await saga.call("ship", order_id=order.order_id))
        return done


@workflow.defn
class SwallowingWorkflow:
    """Catches the failed shipment and says "done", as a model told of an error might."""

    @workflow.run
    async def run(self, order: Order) -> str:
        async with TemporalSaga() as saga:
            await saga.call("reserve_inventory", sku=order.sku)
            with contextlib.suppress(ActivityError):
                await saga.call("ship", order_id=order.order_id)
        return "done"
