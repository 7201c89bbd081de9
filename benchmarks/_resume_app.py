"""The application the resume benchmark's worker processes run (`sagacity worker --app`).

The approved tool appends `<saga id> <time.time()>` to a file as it starts: the end of
the latency measured (the APPROVED commit is its start, taken in the deciding process).
"""

from __future__ import annotations

import os
import time

from sagacity import Reversibility, Sagacity, Worker, compensable

_STARTS = os.environ["SAGACITY_BENCH_STARTS"]


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire(saga: str, amount: int) -> str:
    """Wire money: note when it started, and which saga it belongs to."""
    started = time.time()
    with open(_STARTS, "a", encoding="utf-8") as out:
        out.write(f"{saga} {started!r}\n")
    return f"tx-{saga}"


sagacity = Sagacity.from_url(os.environ["SAGACITY_BENCH_URL"])
sagacity.wrap(wire)
worker = Worker(
    sagacity,
    poll_interval=float(os.environ["SAGACITY_BENCH_POLL"])
    if os.environ.get("SAGACITY_BENCH_POLL")
    else None,
)
