"""The OpenTelemetry implementation of the core's tracing hooks."""

from __future__ import annotations

import datetime
import threading
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from sagacity import _telemetry
from sagacity.journal import JournalEntry

__all__ = ["OtelTracing", "instrument", "uninstrument"]

_SCOPE = "sagacity"


class OtelTracing:
    """Spans and metrics through the given (or the global) tracer and meter providers."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        from sagacity import __version__

        self.tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider=meter_provider)
        self.calls = meter.create_counter(
            "sagacity.tool.calls", unit="{call}", description="Journaled tool calls"
        )
        self.failures = meter.create_counter(
            "sagacity.tool.failures", unit="{call}", description="Tool calls journaled FAILED"
        )
        self.in_doubt = meter.create_counter(
            "sagacity.tool.in_doubt", unit="{call}", description="Calls whose outcome is unknown"
        )
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
        self.duration = meter.create_histogram(
            "sagacity.tool.duration",
            unit="s",
            description="Time from a call's INTENT to its EXECUTED or FAILED",
        )
        self._sagas: dict[str, Span] = {}
        self._compensations: dict[tuple[str, int], Span] = {}
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
        span = self._sagas.get(saga_id)
        return None if span is None else trace.set_span_in_context(span)

    # -- tool calls -----------------------------------------------------------------------

    def tool_call(self, intent: JournalEntry, outcome: JournalEntry, reversibility: str) -> None:
        """`execute_tool {tool}` (GenAI semantic conventions), timed by the two entries."""
        tool_name = str(intent.tool_name)
        began, ended = _nanos(intent.recorded_at), _nanos(outcome.recorded_at)
        phase = outcome.phase.value
        span = self.tracer.start_span(
            f"execute_tool {tool_name}",
            context=self._parent(intent.saga_id),
            kind=SpanKind.INTERNAL,
            start_time=began,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": str(intent.call_id),
                "gen_ai.tool.type": "function",
                "sagacity.saga_id": intent.saga_id,
                "sagacity.seq": intent.seq,
                "sagacity.reversibility": reversibility,
                "sagacity.phase": phase,
            },
        )
        attributes = {"gen_ai.tool.name": tool_name}
        self.calls.add(1, attributes)
        if phase == "FAILED":
            payload = outcome.payload if isinstance(outcome.payload, dict) else {}
            error = payload.get("error")
            kind = str(payload.get("kind"))
            error_type = error.get("type") if isinstance(error, dict) else None
            span.set_attribute("error.type", str(error_type or kind))
            span.set_attribute("sagacity.failure_kind", kind)
            span.set_status(Status(StatusCode.ERROR, str(error_type or kind)))
            self.failures.add(1, {**attributes, "sagacity.failure_kind": kind})
            if kind == "outcome_unknown":
                self.in_doubt.add(1, attributes)
        self.duration.record(max(ended - began, 0) / 1e9, attributes)
        span.end(end_time=ended)

    # -- compensations --------------------------------------------------------------------

    def compensation_started(self, saga_id: str, executed: JournalEntry) -> None:
        """Start `compensate {tool}` under the saga span."""
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
        with self._guard:
            self._compensations[(saga_id, executed.seq)] = span

    def compensation_ended(self, saga_id: str, executed: JournalEntry, failed: bool) -> None:
        """End the compensation's span."""
        with self._guard:
            span = self._compensations.pop((saga_id, executed.seq), None)
        outcome = "COMPENSATION_FAILED" if failed else "COMPENSATED"
        self.compensations.add(
            1, {"gen_ai.tool.name": str(executed.tool_name), "sagacity.phase": outcome}
        )
        if span is None:
            return
        span.set_attribute("sagacity.phase", outcome)
        if failed:
            span.set_attribute("error.type", "compensation_failed")
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
) -> None:
    """Turn on sagacity's spans and metrics, through the given or the global providers."""
    _telemetry.current = OtelTracing(tracer_provider, meter_provider)


def uninstrument() -> None:
    """Turn them off again: the core goes back to its no-op hooks."""
    _telemetry.current = None


def _nanos(recorded_at: str) -> int:
    """An entry's `recorded_at` as OpenTelemetry's nanoseconds since the epoch."""
    when = datetime.datetime.fromisoformat(recorded_at)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
