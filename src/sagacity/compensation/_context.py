"""What a compensation is given, and what a compensation walk reports."""

from __future__ import annotations

import dataclasses

from sagacity.journal import JsonValue

__all__ = ["CallRef", "CompensationContext", "CompensationReport"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompensationContext:
    """Passed to a compensation so it knows what to undo."""

    saga_id: str
    """The saga the effect belonged to."""
    tool_name: str
    """The tool that produced it."""
    call_id: str
    """The call that produced it: the idempotency key the tool was given. The same on
    every attempt of the compensation: hand it to the API the compensation calls."""
    input: dict[str, JsonValue]
    """The exact JSON arguments the tool ran with."""
    result: JsonValue
    """What the tool returned, as journaled: usually the handle to undo."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CallRef:
    """One tool call named in a `CompensationReport`."""

    seq: int
    """The seq of the call's EXECUTED entry (for a call in doubt: its INTENT)."""
    tool_name: str
    """The tool."""
    call_id: str
    """The call."""
    error: str | None = None
    """For a failed compensation or an unknown outcome: what went wrong."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompensationReport:
    """The state of a saga's compensations after a walk: what is undone, what is dirty."""

    saga_id: str
    """The saga walked."""
    compensated: list[CallRef]
    """Calls whose compensation has run, in the order they ran (reverse execution)."""
    failed: list[CallRef]
    """Calls whose compensation raised: still dirty, retried by the next walk."""
    skipped: list[CallRef]
    """Calls with no compensation declared (IRREVERSIBLE ones, say): left as they are."""
    in_doubt: list[CallRef]
    """Calls whose outcome is unknown (`Sagacity.resolve` settles them), and calls whose
    compensation started with its outcome unknown (`Sagacity.resolve_compensation`):
    never acted on, except a compensation declared idempotent, which the next walk runs
    again. Also calls that executed after the walk's last step, which the next walk
    undoes."""
    waiting: list[CallRef] = dataclasses.field(default_factory=list)
    """Calls whose compensation this process could not run, in the order they will run:
    the first has no compensation registered here (its tool is not wrapped in this
    process), the others come after it. Nothing was journaled for them: the walk stopped
    and left them to a process that wraps the tools (`Sagacity.compensate` there, or
    `sagacity compensate SAGA --tools MODULE:OBJECT`)."""

    @property
    def clean(self) -> bool:
        """True when every declared compensation has run and no call is in doubt."""
        return not self.failed and not self.in_doubt and not self.waiting
