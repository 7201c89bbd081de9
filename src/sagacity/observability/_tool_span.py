"""One call's live `execute_tool` span, and the framework spans sagacity joins instead.

A call has one `execute_tool` span. sagacity starts its own when the call's INTENT is
journaled and makes it current while the tool runs; when a framework already made one
for the same call (PydanticAI's instrumentation, Google ADK, the MCP SDK's server span
for `tools/call`), sagacity puts its `sagacity.*` attributes on that span and makes
none, so that a backend counts the call once.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics
from opentelemetry.trace import Span, Status, StatusCode

from sagacity.journal import JournalEntry, canonical_bytes

__all__ = ["FrameworkToolSpan", "ToolMetrics", "ToolSpan", "framework_span"]

_RETRIED = "retried"
_CONTROL_FLOW = "control_flow"


def framework_span(span: Span, tool_name: str) -> bool:
    """Whether `span` is a framework's own `execute_tool` span for a call of `tool_name`.

    Recognised by the GenAI conventions' attributes (`gen_ai.operation.name` =
    `execute_tool` and `gen_ai.tool.name`), or, for a framework that sets them only when
    the call ends (Google ADK), by the conventions' span name `execute_tool {tool}`.
    """
    if not span.is_recording():
        return False
    attributes = getattr(span, "attributes", None)
    if attributes is not None and attributes.get("gen_ai.operation.name") == "execute_tool":
        return bool(attributes.get("gen_ai.tool.name") == tool_name)
    return getattr(span, "name", None) == f"execute_tool {tool_name}"


class ToolMetrics:
    """The instruments a call records into."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.calls = meter.create_counter(
            "sagacity.tool.calls", unit="{call}", description="Journaled tool calls"
        )
        self.failures = meter.create_counter(
            "sagacity.tool.failures", unit="{call}", description="Tool calls journaled FAILED"
        )
        self.in_doubt = meter.create_counter(
            "sagacity.tool.in_doubt", unit="{call}", description="Calls whose outcome is unknown"
        )
        self.duration = meter.create_histogram(
            "sagacity.tool.duration",
            unit="s",
            description="Time from a call's INTENT to its EXECUTED or FAILED",
        )
        self.genai_duration = meter.create_histogram(
            "gen_ai.execute_tool.duration",
            unit="s",
            description="Duration of a tool execution (GenAI semantic conventions)",
        )

    def record(
        self, tool_name: str, outcome: JournalEntry, seconds: float, *, genai: bool
    ) -> dict[str, Any]:
        """Count the call and its duration; return the failure's attributes (empty if none).

        `genai` is False when a framework owns the call's span: it records the GenAI
        duration itself, and a second point would count the call twice.
        """
        attributes = {"gen_ai.tool.name": tool_name}
        self.calls.add(1, attributes)
        failure = _failure(outcome)
        if failure:
            kind = failure["sagacity.failure_kind"]
            self.failures.add(1, {**attributes, "sagacity.failure_kind": kind})
            if kind == "outcome_unknown":
                self.in_doubt.add(1, attributes)
        self.duration.record(seconds, attributes)
        if genai:
            genai_attributes = {"gen_ai.operation.name": "execute_tool", **attributes}
            if "error.type" in failure:
                genai_attributes["error.type"] = failure["error.type"]
            self.genai_duration.record(seconds, genai_attributes)
        return failure


class ToolSpan:
    """sagacity's own `execute_tool {tool}` span, current while the tool runs."""

    __slots__ = ("began", "metrics", "record_results", "span", "token", "tool_name")

    def __init__(
        self, span: Span, token: object, tool_name: str, metrics: ToolMetrics, record_results: bool
    ) -> None:
        self.span = span
        self.token: object | None = token
        self.tool_name = tool_name
        self.metrics = metrics
        self.record_results = record_results
        self.began = time.perf_counter()

    def detach(self) -> None:
        """The tool returned or raised: the span stops being current."""
        token, self.token = self.token, None
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def outcome(self, entry: JournalEntry, error: BaseException | None) -> None:
        """A retried attempt is an event on the span; a final outcome ends it."""
        span = self.span
        if _kind(entry) == _RETRIED:
            if error is not None:
                span.record_exception(error, attributes={"sagacity.retried": True})
            return
        failure = self.metrics.record(
            self.tool_name, entry, time.perf_counter() - self.began, genai=True
        )
        span.set_attribute("sagacity.phase", entry.phase.value)
        if failure:
            span.set_attributes(failure)
            if error is not None:
                span.record_exception(error)
            if failure["sagacity.failure_kind"] != _CONTROL_FLOW:
                span.set_status(Status(StatusCode.ERROR, str(failure.get("error.type"))))
        elif self.record_results and isinstance(entry.payload, dict):
            result = canonical_bytes(entry.payload.get("result")).decode()
            span.set_attribute("gen_ai.tool.call.result", result)
        span.end()


class FrameworkToolSpan:
    """A framework's `execute_tool` span for the call: sagacity adds to it, never ends it."""

    __slots__ = ("began", "metrics", "span", "tool_name")

    def __init__(self, span: Span, tool_name: str, metrics: ToolMetrics) -> None:
        self.span = span
        self.tool_name = tool_name
        self.metrics = metrics
        self.began = time.perf_counter()

    def detach(self) -> None:
        """Nothing to detach: the framework made its span current and will end it."""

    def outcome(self, entry: JournalEntry, error: BaseException | None) -> None:
        """Add the journaled outcome to the framework's span; its error and end are its own."""
        if _kind(entry) == _RETRIED:
            return
        failure = self.metrics.record(
            self.tool_name, entry, time.perf_counter() - self.began, genai=False
        )
        attributes: dict[str, Any] = {"sagacity.phase": entry.phase.value}
        if failure:
            attributes["sagacity.failure_kind"] = failure["sagacity.failure_kind"]
        self.span.set_attributes(attributes)


def _kind(entry: JournalEntry) -> object:
    payload = entry.payload
    return payload.get("kind") if isinstance(payload, dict) else None


def _failure(entry: JournalEntry) -> dict[str, Any]:
    """A FAILED entry's `error.type` and `sagacity.failure_kind`; empty for EXECUTED."""
    if entry.phase.value != "FAILED":
        return {}
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    kind = str(payload.get("kind"))
    error = payload.get("error")
    error_type = error.get("type") if isinstance(error, dict) else None
    return {"error.type": str(error_type or kind), "sagacity.failure_kind": kind}
