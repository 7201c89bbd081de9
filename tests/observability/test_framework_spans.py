"""One `execute_tool` span per call under each framework's own instrumentation.

PydanticAI's instrumentation and the MCP SDK's server span make a span for a tool call
themselves: sagacity adds its attributes to it and makes no second one. One trace, one
tool span per call, and the span the tool makes is its child.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.capabilities import Instrumentation

from sagacity import CompensationContext, Sagacity, SagaOutcome, compensable, compensation
from sagacity.integrations.pydantic_ai import saga_toolset
from sagacity.observability import instrument, uninstrument
from tests.integrations.pydantic_ai._agents import ScriptedModel, call
from tests.observability.conftest import Telemetry

_GLOBAL: InMemorySpanExporter | None = None


def tool_spans(spans: list[ReadableSpan], tool: str) -> list[ReadableSpan]:
    """Spans that stand for one execution of `tool`, whoever made them."""
    return [
        s
        for s in spans
        if (
            (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"
            and (s.attributes or {}).get("gen_ai.tool.name") == tool
        )
        or s.name == f"execute_tool {tool}"
    ]


def child_names(spans: list[ReadableSpan], parent: ReadableSpan) -> list[str]:
    return [
        s.name for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


class Http:
    """Tools that make the span an HTTP client's instrumentation would."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    @compensable(by="cancel")
    def book(self, slot: str) -> str:
        """Book a delivery slot."""
        with self.tracer.start_as_current_span("POST /bookings"):
            return f"bk-{slot}"

    @compensable(by="cancel")
    def notify(self, to: str) -> str:
        """Notify the customer."""
        with self.tracer.start_as_current_span("POST /messages"):
            return "sent"

    @compensation
    def cancel(self, ctx: CompensationContext) -> None:
        """Cancel what was done."""


class TestPydanticAI:
    async def test_its_execute_tool_span_carries_sagacitys_attributes(
        self, telemetry: Telemetry
    ) -> None:
        """With the `Instrumentation` capability: PydanticAI's span per call, no second one."""
        sagacity = Sagacity.from_url("memory://")
        tools = Http(telemetry.tracer_provider.get_tracer("http"))
        agent: Agent[None, str] = Agent(
            ScriptedModel(
                [call("book", "call-1", slot="9am")], [call("notify", "call-2", to="ann")], "Done."
            ).model,
            toolsets=[saga_toolset(sagacity, tools)],
            capabilities=[
                Instrumentation(
                    settings=InstrumentationSettings(
                        tracer_provider=telemetry.tracer_provider,
                        meter_provider=telemetry.meter_provider,
                    )
                )
            ],
        )
        try:
            result = await sagacity.asaga("p-1", lambda: agent.run("Book and notify."))
        finally:
            sagacity.close()
        assert result.outcome is SagaOutcome.COMPLETED
        spans = telemetry.finished()
        assert len({s.context.trace_id for s in spans}) == 1
        for tool, call_id, child in (
            ("book", "call-1", "POST /bookings"),
            ("notify", "call-2", "POST /messages"),
        ):
            (span,) = tool_spans(spans, tool)
            assert span.instrumentation_scope is not None
            assert span.instrumentation_scope.name != "sagacity"  # PydanticAI's own
            attributes = dict(span.attributes or {})
            assert attributes["gen_ai.tool.call.id"] == call_id
            assert attributes["sagacity.saga_id"] == "p-1"
            assert attributes["sagacity.call_id"] == call_id
            assert attributes["sagacity.phase"] == "EXECUTED"
            assert child_names(spans, span) == [child]
        assert [a["gen_ai.tool.name"] for a, _ in telemetry.points("sagacity.tool.calls")] == [
            "book",
            "notify",
        ]


@pytest.fixture
def global_spans(telemetry: Telemetry) -> Iterator[InMemorySpanExporter]:
    """The global tracer provider, which the MCP SDK's own spans go to.

    It can be set once per process: a test gets it cleared, and sagacity is instrumented
    on it too.
    """
    global _GLOBAL
    if _GLOBAL is None:
        _GLOBAL = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_GLOBAL))
        trace.set_tracer_provider(provider)
    _GLOBAL.clear()
    instrument(meter_provider=telemetry.meter_provider)
    yield _GLOBAL
    uninstrument()
    _GLOBAL.clear()


class TestMcpServer:
    async def test_the_sdks_tools_call_span_carries_sagacitys_attributes(
        self, global_spans: InMemorySpanExporter
    ) -> None:
        """The MCP SDK's `tools/call {tool}` server span is the call's span: none is added."""
        from mcp import Client

        from sagacity.integrations.mcp import end_saga, mcp_server
        from tests.integrations.mcp._shop import meta

        sagacity = Sagacity.from_url("memory://")
        tools = Http(trace.get_tracer("http"))
        try:
            async with Client(mcp_server(sagacity, tools)) as client:
                booked = await client.call_tool("book", {"slot": "9am"}, meta=meta("m-1"))
                sent = await client.call_tool("notify", {"to": "ann"}, meta=meta("m-1"))
            assert not booked.is_error
            assert not sent.is_error
            ended = await end_saga(sagacity, "m-1")
            assert ended.outcome is SagaOutcome.COMPLETED
        finally:
            sagacity.close()
        spans = list(global_spans.get_finished_spans())
        for tool, child in (("book", "POST /bookings"), ("notify", "POST /messages")):
            (span,) = tool_spans(spans, tool)
            assert span.name == f"tools/call {tool}"
            assert span.kind is trace.SpanKind.SERVER
            attributes = dict(span.attributes or {})
            assert attributes["sagacity.saga_id"] == "m-1"
            assert attributes["sagacity.phase"] == "EXECUTED"
            assert child_names(spans, span) == [child]
