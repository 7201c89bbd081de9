"""Decisions on approval requests, read from the journal, and the resumers that act on them.

A decision is what a human (or the clock) said about an approval request: approved (it
has every approval it needs, as the approval check counts them), rejected, edited
(replaced by a request for a new input) or expired. Nothing here stores a decision: each
is derived from the saga's journal, so a missed notification costs latency, never
correctness.

A `Resumer` is the application's one declaration of how a paused run continues once a
decision lands; `sagacity.worker.Worker` calls it under the saga's lease.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import enum
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from sagacity.journal import JsonValue

__all__ = ["WORK", "Decision", "DecisionOutcome", "Resumer", "current_resumer", "pausing_as"]

WORK = "work"
"""The resumer name of a saga paused by plain code: no adapter journaled one."""


class DecisionOutcome(enum.Enum):
    """What was decided about an approval request."""

    APPROVED = "approved"
    """The request has every approval it needs, each counted by the approval check (four
    eyes, N of M, signatures where required): the call may run."""
    REJECTED = "rejected"
    """A principal rejected it: the call never runs, the saga is compensated."""
    EDITED = "edited"
    """A principal replaced its input: a new request (`Decision.replaced_by`) waits for
    its own approvals. Nothing is resumed for it."""
    EXPIRED = "expired"
    """Its `expires_at` passed before it was approved: treated as a rejection."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """One decision on one approval request, as the saga's journal records it."""

    saga_id: str
    """The saga that asked."""
    request_id: str
    """The request decided."""
    call_id: str
    """The call that waits: a resume runs it under this id."""
    tool: str
    """The tool that waits."""
    outcome: DecisionOutcome
    """What was decided."""
    decided_by: str | None
    """Who decided: the approver whose approval completed it, the rejecting principal, the
    editor; None for an expiry (or a rejection journaled without a principal)."""
    decided_at: datetime.datetime
    """When (UTC): the deciding entry's `recorded_at`; for an expiry, `expires_at`."""
    seq: int | None
    """The seq of the deciding entry (the completing APPROVED, the REJECTED); None for an
    expiry nothing journaled yet."""
    input: dict[str, JsonValue]
    """The exact input the request asked to run (for EDITED: the old input)."""
    input_sha256: str
    """`sha256(JCS(input))`."""
    approvers: tuple[str, ...] = ()
    """For APPROVED: every principal whose approval counts, oldest first."""
    reason: str | None = None
    """For REJECTED: the reason given; for EXPIRED: a sentence saying when it expired."""
    replaced_by: str | None = None
    """For EDITED: the id of the new request."""
    via: str | None = None
    """The channel the deciding entry journaled (`"inbox"`, `"cli"`, `"slack"`, ...); None
    for an expiry, or an entry journaled before channels were recorded."""
    resumer: str = WORK
    """The name of the resumer that continues the paused run, journaled with the request
    by whoever paused it: an adapter's name (e.g. `"langgraph"`, `"openai_agents"`,
    `"pydantic_ai"`, `"mcp"`), `"workflow"` for a workflow gate, or `WORK` (`"work"`) for
    plain code. `Worker` picks the resumer by it."""

    @property
    def approved(self) -> bool:
        """True when the call may run now."""
        return self.outcome is DecisionOutcome.APPROVED

    def to_json(self) -> dict[str, JsonValue]:
        """The decision as a JSON object (the webhook's and the event stream's form)."""
        return {
            "saga_id": self.saga_id,
            "request_id": self.request_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "outcome": self.outcome.value,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at.isoformat(),
            "seq": self.seq,
            "input": self.input,
            "input_sha256": self.input_sha256,
            "approvers": list(self.approvers),
            "reason": self.reason,
            "replaced_by": self.replaced_by,
            "via": self.via,
            "resumer": self.resumer,
        }


@runtime_checkable
class Resumer(Protocol):
    """How the application continues a run that paused for approval, once it is decided.

    A callable taking the `Decision`; a plain function, a bound method or an object with
    `__call__`, sync or async (`async def`: the worker awaits it on its event loop). It
    holds whatever the framework needs (the compiled graph and its checkpointer, the
    agent and where its `RunState` was saved, the workflow runtime) and finds the paused
    run from the decision, usually by `decision.saga_id` (e.g. the LangGraph thread id).

    `Worker` calls it **inside the saga's re-opened scope, under the saga's lease**, as the
    `work` of `Sagacity.resume_saga` (`aresume_saga` when async):

    - `APPROVED`: the resumer runs the framework's native resume (LangGraph
      `graph.invoke(Command(resume=...), config)`, OpenAI Agents `state.approve(item)` then
      `Runner.run(agent, state)`, PydanticAI `agent.run(..., deferred_tool_results=...)`,
      the workflow's next stage). The approved call runs when the framework calls the
      wrapped tool again, through the approval check (never on the framework's flag
      alone), exactly once: a resumer killed mid-resume is run again by another worker,
      and the journal replays the call or refuses it in doubt, never runs it twice. What
      the resumer returns is the saga's `SagaResult.value`.
    - `REJECTED` or `EXPIRED`: the resumer gives the framework its native "no" (LangGraph
      `Command(resume=...)` with the refusal, OpenAI Agents `state.reject(item)`,
      PydanticAI `ToolDenied`), so the agent is told. While the saga is open (a rejection
      journaled without its walk, an expiry), this runs inside the re-opened scope and the
      worker then runs the compensation walk, which undoes what the run did before and
      after the "no" (the saga ends COMPENSATED, COMPENSATION_FAILED or NEEDS_ATTENTION).
      A rejection decided where the tools are not (the inbox of `sagacity serve` without
      `--tools`, `sagacity reject` without `--tools`) ended the saga with its undo left
      waiting for them: the worker finishes the walk first, then calls the resumer
      **outside any saga** (`sagacity.adapter.current_scope()` is None), so the resumer
      must give the "no" without running a wrapped tool. A rejection whose walk finished
      where it was decided (`Sagacity.reject` in a process with the tools) is not given to
      a worker: that process tells its run itself.
    - `EDITED` decisions are never given to a resumer: the new request waits.

    Whatever the resumer raises ends the saga as a raising `work` does (compensated);
    the worker logs it and goes on with the next saga.

    A resumer with a true `takes_lease` attribute resumes the saga under its lease itself
    (`sagacity.workflows.WorkflowResumer` calls `WorkflowRuntime.resume`): the worker calls
    it outside any saga, once the journal says the decision waits, and the saga's lease
    inside it keeps a second worker from resuming it too.
    """

    def __call__(self, decision: Decision, /) -> object:
        """Continue the paused run of `decision.saga_id` (see the class docstring)."""
        ...


_resumer_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "sagacity_resumer", default=None
)


@contextlib.contextmanager
def pausing_as(name: str) -> Iterator[None]:
    """Name the resumer of the calls made in this context, for the requests they ask.

    Every approval request asked inside the block journals `name` (the AWAITING_APPROVAL
    payload's `"resumer"`), and `Worker` continues the paused run with the resumer of that
    name. An adapter wraps its calls of the hot path in it (`sagacity.adapter`); an
    application with two kinds of plain `work` can wrap each saga in its own. An edited
    request keeps the name of the one it replaces.

    Raises:
        ValueError: `name` is empty or not a string.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a resumer name must be a non-empty string, not {name!r}")
    token = _resumer_var.set(name)
    try:
        yield
    finally:
        _resumer_var.reset(token)


def current_resumer() -> str | None:
    """The resumer name `pausing_as` set in this context; None outside any."""
    return _resumer_var.get()
