"""Closing the loop: a decision on an approval request resumes the paused run by itself.

- `DecisionEvents`: wait for the decision on one saga or request, or follow every
  decision, sync or async, with a timeout. Decisions are read from the journal; on
  PostgreSQL, LISTEN/NOTIFY wakes the reader at once (polling where LISTEN is not
  available, such as PgBouncer in transaction mode), on SQLite and in memory a cheap
  poll does.
- `Worker`: runs the application's `Resumer`s for each decided saga, exactly once across
  any number of workers (the saga's lease decides who), and reports its health.
  `sagacity worker --app MODULE:OBJECT` runs one from the command line.

See docs/worker.md.
"""

from __future__ import annotations

from sagacity._decisions import WORK, Decision, DecisionOutcome, Resumer, pausing_as
from sagacity.worker._events import DecisionEvents
from sagacity.worker._health import WorkerHealth
from sagacity.worker._worker import Worker

__all__ = [
    "WORK",
    "Decision",
    "DecisionEvents",
    "DecisionOutcome",
    "Resumer",
    "Worker",
    "WorkerHealth",
    "pausing_as",
]
