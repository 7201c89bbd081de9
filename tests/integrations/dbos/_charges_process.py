"""A DBOS process that runs a workflow of many charges and SIGKILLs itself after one.

python -m tests.integrations.dbos._charges_process SCHEMA STORE_URL EFFECTS KILL_AFTER SAGA [start]

Launches DBOS on the test server's SCHEMA (which recovers the workflow a killed process
left pending), starts `charges_workflow` (`CHARGES` charges) as SAGA when told to, prints
`ready`, and prints `ended` once the workflow returned. KILL_AFTER `n` SIGKILLs the process
once its n-th call returned, its lease parked for the next; `-` kills nothing. Each charge
is a line in EFFECTS (`tests.integrations._ledger`).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

from sagacity import Sagacity
from sagacity.integrations._engine import Ran
from sagacity.integrations.dbos import SagaSteps
from tests.integrations._ledger import Ledger
from tests.integrations.dbos._workflows import STEPS, charges_workflow
from tests.integrations.dbos.conftest import dbos_config

KEY = "charges"
CHARGES = 12


class KillingSteps(SagaSteps):
    """The steps, killing the process after the `kill_after`-th call that returned."""

    def __init__(self, sagacity: Sagacity, ledger: Ledger, kill_after: int | None) -> None:
        super().__init__(sagacity, [ledger], linger=600.0)  # only a kill or an end frees it
        self.kill_after = kill_after
        self.returned = 0

    def _call(
        self, tool: str, call_id: str | None, arguments: dict[str, Any], approved: bool
    ) -> Ran:
        ran = super()._call(tool, call_id, arguments, approved)
        self.returned += 1
        if self.returned == self.kill_after:
            print(f"killed after {self.returned}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return ran


def main(schema: str, url: str, effects: str, kill_after: str, saga_id: str, *start: str) -> None:
    with Sagacity.from_url(url, lease_ttl=60.0) as sagacity:
        after = None if kill_after == "-" else int(kill_after)
        STEPS[KEY] = KillingSteps(sagacity, Ledger(Path(effects), "-"), after)
        DBOS(config=dbos_config(schema))
        DBOS.launch()
        try:
            if start:
                with SetWorkflowID(saga_id):
                    DBOS.start_workflow(charges_workflow, KEY, CHARGES)
            print("ready", flush=True)
            DBOS.retrieve_workflow(saga_id).get_result()
            print("ended", flush=True)
        finally:
            DBOS.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:])
