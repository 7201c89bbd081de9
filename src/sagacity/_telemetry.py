"""The core's hooks for logs, traces and metrics: a log line or a None check when unconfigured.

The core imports no OpenTelemetry. `sagacity.observability.instrument()` (extra `otel`)
installs a `Tracing` object in `current`; until then every span hook is one module
attribute read and a None check, and only the log lines below exist:

- INFO, once per saga that ends or pauses: its outcome and counts;
- WARNING for a call in doubt, a compensation that failed, an approval refused.

Nothing is logged at INFO per tool call.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sagacity._history import SagaHistory
    from sagacity.approval._request import ApprovalRequest
    from sagacity.journal import JournalEntry

__all__ = [
    "ToolSpan",
    "Tracing",
    "approval_closed",
    "approval_event",
    "approval_refused",
    "current",
    "logger",
    "saga_ended",
]

logger = logging.getLogger("sagacity")
"""The logger every sagacity log line goes to."""


class ToolSpan(Protocol):
    """One call's live `execute_tool` span: current while the tool runs, ended at its outcome."""

    def detach(self) -> None:
        """The tool returned or raised: the span stops being current (it stays open)."""
        ...

    def outcome(self, entry: JournalEntry, error: BaseException | None) -> None:
        """The call's EXECUTED or FAILED was journaled: end the span (a retried one stays)."""
        ...


class Tracing(Protocol):
    """What `sagacity.observability` implements; the core calls it only when installed."""

    def saga_started(self, saga_id: str) -> object:
        """Start the saga's span under the caller's context; return a token to detach."""
        ...

    def saga_work_done(self, token: object) -> None:
        """The work returned: detach the saga's span from the context (it stays open)."""
        ...

    def saga_ended(self, saga_id: str, outcome: str, attributes: dict[str, Any]) -> None:
        """End the saga's span."""
        ...

    def tool_started(
        self,
        intent: JournalEntry,
        *,
        description: str,
        reversibility: str,
        arguments: dict[str, Any],
    ) -> ToolSpan:
        """The call's INTENT was journaled: start its span and make it current.

        When a framework's own `execute_tool` span for the same tool is current, the
        call's attributes go on that span instead, and no second span is made.
        """
        ...

    def compensation_started(self, saga_id: str, executed: JournalEntry) -> None:
        """A compensation's COMPENSATING was journaled: start its span."""
        ...

    def compensation_ended(
        self, saga_id: str, executed: JournalEntry, failure: dict[str, Any] | None
    ) -> None:
        """Its COMPENSATED or COMPENSATION_FAILED was journaled: end its span.

        `failure` is the COMPENSATION_FAILED payload (its error's type and message).
        """
        ...

    def approval_event(self, saga_id: str, name: str, attributes: dict[str, Any]) -> None:
        """An approval request, decision or refusal: a short span of its own."""
        ...

    def approval_closed(self, saga_id: str, attributes: dict[str, Any]) -> None:
        """A request was closed (run, rejected, declined, replaced, or its saga ended)."""
        ...


current: Tracing | None = None
"""The installed tracing, or None (the default: no OpenTelemetry cost at all)."""


def saga_ended(history: SagaHistory, outcome: str, compensation: Any = None) -> None:
    """Log the saga's end at INFO (WARNING for calls left in doubt) and end its span."""
    calls = len(history.calls)
    compensated = len(compensation.compensated) if compensation is not None else 0
    failed = len(compensation.failed) if compensation is not None else 0
    # Calls, not attempts: a call retried under one id is in doubt once.
    doubts = dict.fromkeys(ref.call_id for ref in compensation.in_doubt) if compensation else {}
    in_doubt = len(doubts)
    if in_doubt:
        logger.warning(
            "saga %r ended %s with %d call(s) in doubt: %s; resolve them (sagacity doubts)",
            history.saga_id,
            outcome,
            in_doubt,
            ", ".join(str(call_id) for call_id in doubts),
        )
    logger.info(
        "saga %r ended %s: %d entries, %d calls, %d compensated, %d compensations failed, "
        "%d in doubt",
        history.saga_id,
        outcome,
        len(history.entries),
        calls,
        compensated,
        failed,
        in_doubt,
    )
    tracing = current
    if tracing is not None:
        tracing.saga_ended(
            history.saga_id,
            outcome,
            {
                "sagacity.calls": calls,
                "sagacity.compensated": compensated,
                "sagacity.compensations_failed": failed,
                "sagacity.in_doubt": in_doubt,
            },
        )


def approval_event(saga_id: str, name: str, *, request_id: str, tool: str) -> None:
    """An approval request or decision: a span when tracing is installed."""
    tracing = current
    if tracing is not None:
        tracing.approval_event(
            saga_id, name, {"sagacity.request_id": request_id, "gen_ai.tool.name": tool}
        )


def approval_closed(request: ApprovalRequest, how: str) -> None:
    """A request was closed: `how` is consumed, rejected, declined, replaced or discarded.

    Called once per request, where the lifecycle deletes its stored copy, never per
    approval: a request that needs two approvers stays open until its call runs.
    """
    tracing = current
    if tracing is not None:
        tracing.approval_closed(
            request.saga_id,
            {
                "sagacity.request_id": request.request_id,
                "gen_ai.tool.name": request.tool_name,
                "sagacity.closed": how,
            },
        )


def approval_refused(saga_id: str, tool: str, reason: str, refusal: BaseException) -> None:
    """An approval check refused a call: a WARNING, and a span when tracing is installed."""
    logger.warning("saga %r: tool %r refused (%s): %s", saga_id, tool, reason, refusal)
    tracing = current
    if tracing is not None:
        tracing.approval_event(
            saga_id,
            "approval.refused",
            {
                "gen_ai.tool.name": tool,
                "sagacity.refusal": reason,
                "error.type": type(refusal).__name__,
            },
        )
