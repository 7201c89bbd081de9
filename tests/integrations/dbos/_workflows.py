"""Workflows of the DBOS tests: the order saga, and one that swallows a failed call.

DBOS registers workflows at import; the steps they use are looked up by a key the test
passes, so each test gives them its own Sagacity.
"""

from __future__ import annotations

import contextlib
from typing import Any

from dbos import DBOS

from sagacity.integrations.dbos import DBOSSaga, SagaSteps

STEPS: dict[str, SagaSteps] = {}
"""The steps of each test (or worker process), by key."""


@DBOS.workflow()
def order_workflow(key: str, order: dict[str, Any]) -> list[Any]:
    done = []
    with DBOSSaga(STEPS[key], decision_poll=order.get("poll", 30.0)) as saga:
        done.append(saga.call("reserve_inventory", sku=order["sku"], qty=2))
        done.append(saga.call("charge_card", amount=order["amount"], card="4242"))
        if order.get("wire_to"):
            done.append(
                saga.call("send_wire_transfer", amount=order["amount"], to=order["wire_to"])
            )
        if order.get("ship"):
            done.append(saga.call("ship", order_id=order["order_id"]))
    return done


@DBOS.workflow()
def swallowing_workflow(key: str, order: dict[str, Any]) -> str:
    with DBOSSaga(STEPS[key]) as saga:
        saga.call("reserve_inventory", sku=order["sku"])
        with contextlib.suppress(RuntimeError):
            saga.call("ship", order_id=order["order_id"])
    return "done"


@DBOS.workflow()
def charges_workflow(key: str, count: int) -> list[Any]:
    """`count` charges in a row, each a step: the lingering lease's usual case."""
    with DBOSSaga(STEPS[key]) as saga:
        return [saga.call("charge_card", amount=f"{n}.00", card="4242") for n in range(count)]
