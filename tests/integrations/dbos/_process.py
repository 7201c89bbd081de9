"""A DBOS application in a process of its own, that SIGKILLs itself at a named point.

python -m tests.integrations.dbos._process SCHEMA STORE_URL EFFECTS KILL_AT SAGA [start]

Launches DBOS on the test server's SCHEMA (which recovers the workflows a killed process
left pending), starts the order saga SAGA when told to, prints `ready`, and prints the
saga's outcome line once its workflow returned or raised. The tools are
`tests.integrations._ledger`'s; KILL_AT `-` kills nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

from sagacity import Sagacity
from sagacity.integrations._engine import Ran
from sagacity.integrations.dbos import SagaSteps
from tests.integrations._ledger import Ledger
from tests.integrations.dbos._workflows import STEPS, order_workflow
from tests.integrations.dbos.conftest import dbos_config

KEY = "chaos"


class KillingSteps(SagaSteps):
    """The steps, with the `:start` and `:done` kill points around each call."""

    def __init__(self, sagacity: Sagacity, ledger: Ledger) -> None:
        super().__init__(sagacity, [ledger])
        self.ledger = ledger

    def _call(
        self, tool: str, call_id: str | None, arguments: dict[str, Any], approved: bool
    ) -> Ran:
        self.ledger.point(f"{tool}:start")
        ran = super()._call(tool, call_id, arguments, approved)
        if ran.request_id is None:
            self.ledger.point(f"{tool}:done")
        return ran


def main(schema: str, url: str, effects: str, kill_at: str, saga_id: str, *start: str) -> None:
    with Sagacity.from_url(url) as sagacity:
        STEPS[KEY] = KillingSteps(sagacity, Ledger(Path(effects), kill_at))
        DBOS(config=dbos_config(schema))
        DBOS.launch()
        try:
            if start:
                order = {
                    "order_id": saga_id,
                    "sku": "A-1",
                    "amount": "40.00",
                    "wire_to": "ACME",
                    "poll": 0.2,
                }
                with SetWorkflowID(saga_id):
                    DBOS.start_workflow(order_workflow, KEY, order)
            print("ready", flush=True)
            try:
                DBOS.retrieve_workflow(saga_id).get_result()
            except Exception as error:
                print(f"ended {type(error).__name__}", flush=True)
            else:
                print("ended", flush=True)
        finally:
            DBOS.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:])
