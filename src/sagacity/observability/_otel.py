"""The OpenTelemetry implementation of the core's tracing hooks."""

from __future__ import annotations

import re
import threading
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from sagacity import _telemetry
from sagacity.journal import JournalEntry, canonical_bytes
from sagacity.observability._tool_span import (
    FrameworkToolSpan,
    ToolMetrics,
    ToolSpan,
    framework_span,
)

__all__ = ["OtelTracing", "instrument", "uninstrument"]

_SCOPE = "sagacity"


class OtelTracing:
    """Spans and metrics through the given (or the global) tracer and meter providers."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        record_arguments: bool = False,
        record_results: bool = False,
    ) -> None:
        from sagacity import __version__

        self.tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider=meter_provider)
        self.tool_metrics = ToolMetrics(meter)
        self.record_arguments = record_arguments
        self.record_results = record_results
        self.compensations = meter.create_counter(
            "sagacity.compensations",
            unit="{compensation}",
            description="Compensations run, by outcome",
        )
        self.pending = meter.create_up_down_counter(
            "sagacity.approvals.pending",
            unit="{request}",
            description="Approval requests asked and not yet closed (run, rejected, "
            "declined, replaced, or their saga ended)",
        )
        self._sagas: dict[str, Span] = {}
        self._compensations: dict[tuple[str, int], tuple[Span, object]] = {}
        self._guard = threading.Lock()

    # -- sagas ----------------------------------------------------------------------------

    def saga_started(self, saga_id: str) -> object:
        """Start the saga span as a child of the caller's current span, and make it current."""
        span = self.tracer.start_span(
            f"saga {saga_id}",
            kind=SpanKind.INTERNAL,
            attributes={"sagacity.saga_id": saga_id},
        )
        with self._guard:
            stale = self._sagas.pop(saga_id, None)
            self._sagas[saga_id] = span
        if stale is not None:  # a run that raised before it ended: close its span
            stale.end()
        return otel_context.attach(trace.set_span_in_context(span))

    def saga_work_done(self, token: object) -> None:
        """Detach the saga span; compensation and the end are parented to it explicitly."""
        otel_context.detach(token)  # type: ignore[arg-type]

    def saga_ended(self, saga_id: str, outcome: str, attributes: dict[str, Any]) -> None:
        """End the saga span with its outcome."""
        with self._guard:
            span = self._sagas.pop(saga_id, None)
        if span is None:
            return
        span.set_attributes({"sagacity.outcome": outcome, **attributes})
        if outcome in ("COMPENSATION_FAILED", "NEEDS_ATTENTION"):
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    def _parent(self, saga_id: str) -> otel_context.Context | None:
        """The saga's span while its run is open in this process; else the current context."""
        span = self._sagas.get(saga_id)
        return None if span is None else trace.set_span_in_context(span)

    # -- tool calls -----------------------------------------------------------------------

    def tool_started(
        self,
        intent: JournalEntry,
        *,
        description: str,
        reversibility: str,
        arguments: dict[str, Any],
    ) -> _telemetry.ToolSpan:
        """Start `execute_tool {tool}` under the current span, or join the framework's own."""
        tool_name = str(intent.tool_name)
        attributes: dict[str, Any] = {
            "sagacity.saga_id": intent.saga_id,
            "sagacity.call_id": str(intent.call_id),
            "sagacity.seq": intent.seq,
            "sagacity.reversibility": reversibility,
        }
        current = trace.get_current_span()
        if framework_span(current, tool_name):
            current.set_attributes(attributes)
            return FrameworkToolSpan(current, tool_name, self.tool_metrics)
        attributes.update(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": str(intent.call_id),
                "gen_ai.tool.type": "function",
            }
        )
        if description:
            attributes["gen_ai.tool.description"] = description
        if self.record_arguments:
            attributes["gen_ai.tool.call.arguments"] = canonical_bytes(arguments).decode()
        span = self.tracer.start_span(
            f"execute_tool {tool_name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        return ToolSpan(span, token, tool_name, self.tool_metrics, self.record_results)

    # -- compensations --------------------------------------------------------------------

    def compensation_started(self, saga_id: str, executed: JournalEntry) -> None:
        """Start `compensate {tool}` and make it current while the compensation runs.

        Its parent is the saga's span while the saga's run is open in this process (the
        undo after the work failed), else the current span (a later `compensate` or a
        rejection, under the operator's or the request's span).
        """
        span = self.tracer.start_span(
            f"compensate {executed.tool_name}",
            context=self._parent(saga_id),
            attributes={
                "sagacity.saga_id": saga_id,
                "sagacity.seq": executed.seq,
                "gen_ai.tool.name": str(executed.tool_name),
                "gen_ai.tool.call.id": str(executed.call_id),
            },
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        with self._guard:
            self._compensations[(saga_id, executed.seq)] = (span, token)

    def compensation_ended(
        self, saga_id: str, executed: JournalEntry, failure: dict[str, Any] | None
    ) -> None:
        """End the compensation's span, with the error it journaled; it stops being current."""
        with self._guard:
            live = self._compensations.pop((saga_id, executed.seq), None)
        outcome = "COMPENSATED" if failure is None else "COMPENSATION_FAILED"
        self.compensations.add(
            1, {"gen_ai.tool.name": str(executed.tool_name), "sagacity.phase": outcome}
        )
        if live is None:
            return
        span, token = live
        otel_context.detach(token)  # type: ignore[arg-type]
        span.set_attribute("sagacity.phase", outcome)
        if failure is not None:
            error_type, message = _journaled_error(failure)
            span.set_attribute("error.type", error_type)
            # The exception itself is gone (the journal keeps its type and message): the
            # event the SDK's record_exception would have made, from those.
            span.add_event(
                "exception", {"exception.type": error_type, "exception.message": message}
            )
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    # -- approvals ------------------------------------------------------------------------

    def approval_event(self, saga_id: str, name: str, attributes: dict[str, Any]) -> None:
        """A short span per approval request, decision or refusal."""
        if name == "approval.request":
            self.pending.add(1)
        span = self.tracer.start_span(
            name,
            context=self._parent(saga_id),
            attributes={"sagacity.saga_id": saga_id, **attributes},
        )
        if name == "approval.refused":
            span.set_status(Status(StatusCode.ERROR, str(attributes.get("error.type"))))
        span.end()

    def approval_closed(self, saga_id: str, attributes: dict[str, Any]) -> None:
        """A request was closed: one fewer pending, whatever number of approvals it had."""
        self.pending.add(-1)


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    *,
    record_arguments: bool = False,
    record_results: bool = False,
) -> None:
    """Turn on sagacity's spans and metrics, through the given or the global providers.

    Args:
        tracer_provider: Where spans go; the global provider when None.
        meter_provider: Where metrics go; the global provider when None.
        record_arguments: Put a call's journaled input on its span as
            `gen_ai.tool.call.arguments`. Off by default: arguments may hold secrets.
        record_results: Put a call's journaled result on its span as
            `gen_ai.tool.call.result`. Off by default, for the same reason.
    """
    _telemetry.current = OtelTracing(
        tracer_provider,
        meter_provider,
        record_arguments=record_arguments,
        record_results=record_results,
    )


def uninstrument() -> None:
    """Turn them off again: the core goes back to its no-op hooks."""
    _telemetry.current = None


def _journaled_error(failure: dict[str, Any]) -> tuple[str, str]:
    """A COMPENSATION_FAILED payload's error as (type, message): it journals `Type: message`."""
    error = str(failure.get("error") or "")
    kind, _, message = error.partition(": ")
    if message and re.fullmatch(r"[A-Za-z_][\w.]*", kind):
        return kind, message
    return str(failure.get("kind") or "compensation_failed"), error
