"""The CrewAI resumer: a decision kicks the crew off again under the saga.

CrewAI keeps no state of a paused run: the crew's run ended when the IRREVERSIBLE call
answered `[AWAITING_APPROVAL]`. So a resume is a new kickoff of the same crew inside the
saga's re-opened scope (`sagacity.Worker` calls the resumer there, under the saga's lease):

- approved: the crew runs again; the calls that ran before are replayed from the journal
  (same tool, same input: the same call id), and the approved call runs once, through the
  approval check. A resume killed after the call is replayed, never run twice.
- rejected or expired: CrewAI has no run to tell; nothing is kicked off and the worker
  runs the compensation walk, which undoes what the crew did before it paused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sagacity import Decision

__all__ = ["RESUMER", "CrewResumer"]

RESUMER = "crewai"
"""The resumer name a CrewAI pause journals with its approval request (`Decision.resumer`)."""


class CrewResumer:
    """Continues a crew that paused for approval, for `sagacity.Worker`.

    Args:
        crew_for: Builds the crew to run again for a decision (usually from
            `decision.saga_id`): the same agents, tasks and `crew_tools` as the first
            run, wrapped by the worker's Sagacity.
        inputs_for: The `kickoff(inputs=...)` of the crew for a decision; None kicks it off
            without inputs.
    """

    def __init__(
        self,
        crew_for: Callable[[Decision], Any],
        inputs_for: Callable[[Decision], Mapping[str, Any]] | None = None,
    ) -> None:
        self.crew_for = crew_for
        self.inputs_for = inputs_for

    def __call__(self, decision: Decision, /) -> object:
        """Kick the crew off again when the call was approved; else leave it to the walk."""
        if not decision.approved:
            return None
        crew = self.crew_for(decision)
        if self.inputs_for is None:
            return crew.kickoff()
        return crew.kickoff(inputs=dict(self.inputs_for(decision)))
