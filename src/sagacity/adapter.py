"""What an integration needs of the core: the open saga, its journal index, joining it.

For authors of framework adapters (the four in `sagacity.integrations` use only this
module and the package's public names). Application code does not need it.

- `current_scope()`: the saga open in this context, or None. Its `SagaScope` holds the
  saga's `history` (a `SagaHistory`: the journal indexed by call, request and decision),
  the `lock` that orders the saga's appends and decisions, `append` (journal an entry
  of the saga, fenced by its lease), `fail(error)`, `refusal` (a refusal raised when the
  work returns, even if the framework swallowed it), `failed`, `closed` and `owner`
  (the `Sagacity`).
- `Sagacity.join(saga_id)`: hold a saga open across requests; `SagaScope.entered()`
  makes it the open saga for one request's calls. `seal_for_replay(history)` turns the
  history of a saga that ended after it paused into one that only replays (nothing can
  be appended), for a scope that answers a client's resent call from the journal.
- `payload_of(entry)`: an entry's payload as a dict (empty when it is not an object);
  `CONTROL_FLOW`: the FAILED kind of a framework's control-flow exit.

Read the history under `scope.lock` when a decision depends on it: the framework may
run other calls of the saga in other threads at the same time. From async code, first
`await scope.settled()`: an approval gate of the saga may hold the lock on a worker
thread (`scope.gate(step)` runs a sync step so, alone among the saga's loop-side work).
`finished_off_loop(step)` runs a sync step on a worker thread that a cancel waits for
(`FinishedThenCancelled` carries what it returned); `entries_async(journal, saga_id)`
reads a saga's journal from async code without blocking the loop;
`rebuild_arguments(func, input, tool_name=...)` turns a journaled (JSON) input back into
the Python types of a tool's signature, for an adapter whose engine hands it JSON.

`pausing_as(name)`: the approval requests asked inside the block journal `name` as the
resumer that continues the paused run (`sagacity.Worker` picks its resumer by it); each
adapter wraps its calls of the hot path in it, with its own name. `agent_run(model=...,
run_id=...)`: what the framework exposes of the agent's run at the call, journaled in
the `initiated_by` of the requests asked inside the block.

`decisions_in(history, DecisionLog(policy=..., declared=...), now)`: every decision a
saga's history records, counted as the approval check counts (`DecisionEvents.decisions`
without its journal watch), for an adapter that asks once and does not wait.
"""

from __future__ import annotations

from sagacity._decision_log import DecisionLog, decisions_in
from sagacity._decisions import pausing_as
from sagacity._history import CONTROL_FLOW, CallState, SagaHistory, payload_of
from sagacity._offloop import FinishedThenCancelled, finished_off_loop
from sagacity._scope import SagaScope, current_scope
from sagacity.approval._provenance import agent_run
from sagacity.approval._resume import seal_for_replay
from sagacity.journal._protocol import entries_async
from sagacity.journal._rebuild import rebuild_arguments

__all__ = [
    "CONTROL_FLOW",
    "CallState",
    "DecisionLog",
    "FinishedThenCancelled",
    "SagaHistory",
    "SagaScope",
    "agent_run",
    "current_scope",
    "decisions_in",
    "entries_async",
    "finished_off_loop",
    "pausing_as",
    "payload_of",
    "rebuild_arguments",
    "seal_for_replay",
]
