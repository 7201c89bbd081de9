"""What crosses between a Temporal workflow and sagacity's activities: plain data.

Workflow code imports this module inside Temporal's sandbox, so it holds dataclasses and
names only: no journal, no I/O, nothing that could make a replay touch the world. Its
annotations are evaluated when defined (no `from __future__ import annotations`): the
sandbox's data converter reads them without this module's globals.
"""

import dataclasses
from typing import Any

__all__ = [
    "COMPENSATE_ACTIVITY",
    "COMPLETE_ACTIVITY",
    "DECISION_ACTIVITY",
    "DECISION_SIGNAL",
    "TEMPORAL",
    "CallInput",
    "CallOutput",
    "DecisionInput",
    "EndOutput",
]

COMPLETE_ACTIVITY = "sagacity.complete"
"""The activity that ends a saga whose workflow returned: COMPLETED, or compensated."""
COMPENSATE_ACTIVITY = "sagacity.compensate"
"""The activity that runs the saga's compensation walk, in reverse, each undo once."""
DECISION_ACTIVITY = "sagacity.decision"
"""The read-only activity that asks the journal how a request was decided."""
DECISION_SIGNAL = "sagacity.decision"
"""The signal that tells a waiting workflow a request was decided (a wake-up hint)."""
TEMPORAL = "temporal"
"""The resumer name a Temporal activity's approval requests journal (`pausing_as`)."""


@dataclasses.dataclass(frozen=True)
class CallInput:
    """One journaled call of a saga tool, as the workflow schedules it."""

    tool: str
    """The wrapped tool's name (also the activity's type)."""
    call_id: str
    """The call's id in the saga's journal: the workflow's id and the first activity id."""
    arguments: dict[str, Any]
    """The tool's keyword arguments, as JSON."""
    approved: str | None = None
    """Set once a human approved the call's request (this id): the call runs with the
    input of the newest request of the call in the journal, the one approved (an edited
    input included), not with `arguments`."""


@dataclasses.dataclass(frozen=True)
class CallOutput:
    """What a call came to: its result, or the approval request it waits on."""

    result: Any = None
    """The tool's result, as JSON (replayed from the journal on a retry)."""
    request_id: str | None = None
    """Set when the call waits for a human: the request to decide."""


@dataclasses.dataclass(frozen=True)
class DecisionInput:
    """Which request's decision the workflow asks the journal for."""

    call_id: str
    request_id: str


@dataclasses.dataclass(frozen=True)
class EndOutput:
    """How the saga ended, from the journal."""

    outcome: str
    """A `SagaOutcome` value: COMPLETED, COMPENSATED, COMPENSATION_FAILED, ..."""
    detail: str = ""
    """What a human should know: the failure, or what is left in doubt."""
