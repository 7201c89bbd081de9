"""ADK's own `execute_tool` span is the call's only span: sagacity enriches it.

ADK opens an `execute_tool {tool}` span around every tool call; sagacity, instrumented,
puts its `sagacity.*` attributes on that span instead of starting a second one, so a
tracing backend counts each call once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.adk.telemetry import tracing as adk_tracing
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sagacity import Sagacity, SagaOutcome
from sagacity.integrations.adk import function_tools
from sagacity.observability import instrument, uninstrument
from tests.integrations.adk._agents import Desk, Orders, SwallowErrors, scripted


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Finished spans of ADK and sagacity, both on one tracer provider of the test's own.

    ADK takes its tracer from `google.adk.telemetry.tracing.tracer` at each call: the
    test gives it one of its own provider, leaving the process's global provider alone.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(adk_tracing, "tracer", provider.get_tracer("gcp.vertex.agent"))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    instrument(tracer_provider=provider, meter_provider=meters)
    try:
        yield exporter
    finally:
        uninstrument()
        meters.shutdown()
        provider.shutdown()


def execute_tool_spans(finished: list[ReadableSpan], tool: str) -> list[ReadableSpan]:
    """Every span that stands for one execution of `tool`, whoever made it."""
    return [
        span
        for span in finished
        if span.name.startswith(f"execute_tool {tool}")
        or (
            (span.attributes or {}).get("gen_ai.operation.name") == "execute_tool"
            and (span.attributes or {}).get("gen_ai.tool.name") == tool
        )
    ]


class TestOneSpanPerCall:
    async def test_each_call_has_adks_span_with_sagacitys_attributes(
        self, spans: InMemorySpanExporter
    ) -> None:
        """Three calls, the third failing under a swallowing plugin: three spans, ADK's.

        Each carries the saga, the call id and its journaled phase; none is sagacity's.
        """
        sagacity = Sagacity.from_url("memory://")
        orders = Orders(ship_fails=True)
        desk = Desk(
            scripted(
                [("reserve_inventory", "call-1", {"sku": "SKU-1"})],
                [("charge_card", "call-2", {"amount": "40.00", "card": "4242"})],
                [("ship", "call-3", {"order_id": "o-1"})],
            ),
            function_tools(sagacity, orders),
            plugins=[SwallowErrors()],
        )
        session = await desk.new_session()
        try:
            result = await sagacity.asaga("span-1", lambda: desk.turn(session, "go"))
        finally:
            sagacity.close()

        assert result.outcome is SagaOutcome.COMPENSATED
        finished = list(spans.get_finished_spans())
        for tool, call_id, phase in (
            ("reserve_inventory", "call-1", "EXECUTED"),
            ("charge_card", "call-2", "EXECUTED"),
            ("ship", "call-3", "FAILED"),
        ):
            (span,) = execute_tool_spans(finished, tool)
            assert span.instrumentation_scope is not None
            assert span.instrumentation_scope.name != "sagacity"  # ADK's own
            attributes = dict(span.attributes or {})
            assert attributes["gen_ai.tool.call.id"] == call_id
            assert attributes["sagacity.saga_id"] == "span-1"
            assert attributes["sagacity.call_id"] == call_id
            assert attributes["sagacity.phase"] == phase
        assert not [
            s
            for s in finished
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name == "sagacity"
            and s.name.startswith("execute_tool")
        ]
