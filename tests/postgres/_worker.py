"""A separate process for the multi-process tests: `python -m tests.postgres._worker CMD …`.

`append URL SAGA COUNT`: open a journal, print `ready`, wait for a line on stdin, append
COUNT entries to SAGA, print one JSON line of [began_ns, returned_ns, seq, hash] each.
`ask|approve|resume URL SAGA LOG`: one step of an approval that spans three processes;
the wire-transfer tool appends a JSON line to LOG each time it really runs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sagacity import Phase, Reversibility, Sagacity, compensable


class Payments:
    """An IRREVERSIBLE tool that leaves a trace of every real run in a file."""

    def __init__(self, log: Path) -> None:
        self.log = log

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, amount: str, to: str) -> str:
        """Wire money: cannot be undone."""
        with self.log.open("a") as out:
            out.write(json.dumps({"amount": amount, "to": to}) + "\n")
        return f"wire-{to}-{amount}"


def append(url: str, saga_id: str, count: int) -> None:
    from sagacity.journal.postgres import PostgresJournal

    journal = PostgresJournal(url)
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        began = time.monotonic_ns()
        entry = journal.append(saga_id, Phase.INTENT, payload={"n": i})
        print(json.dumps([began, time.monotonic_ns(), entry.seq, entry.hash]))
    print(json.dumps(journal.stats.retries), flush=True)
    journal.close()


def approval_step(step: str, url: str, saga_id: str, log: Path) -> None:
    sagacity = Sagacity.from_url(url)
    (wire,) = sagacity.wrap(Payments(log))
    if step == "ask":
        result = sagacity.saga(saga_id, lambda: wire(amount="250.00", to="acct-77"))
        (request,) = result.pending
        print(json.dumps([result.outcome.value, request.request_id, request.input_sha256]))
    elif step == "approve":
        (request,) = sagacity.pending(saga_id)
        entry = sagacity.approve(
            saga_id, approver="alice@example.com", expected_sha256=request.input_sha256
        )
        print(json.dumps([entry.phase.value, entry.seq]))
    else:
        result = sagacity.resume_saga(saga_id)
        print(json.dumps([result.outcome.value, result.value]))
    sagacity.close()


if __name__ == "__main__":
    command, url, saga, extra = sys.argv[1:5]
    if command == "append":
        append(url, saga, int(extra))
    else:
        approval_step(command, url, saga, Path(extra))
