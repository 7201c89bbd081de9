"""Live `execute_tool` and `compensate` spans: current while the tool runs, one per call.

Each test reads the SDK's in-memory exporter: the span tree, not a mock, is what a
backend receives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
)
from sagacity.observability import instrument, uninstrument
from sagacity.tools import SagaTool
from tests.observability.conftest import Telemetry


def children(telemetry: Telemetry, parent: ReadableSpan) -> list[str]:
    return [
        s.name
        for s in telemetry.finished()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


def tools(telemetry: Telemetry) -> list[ReadableSpan]:
    return [s for s in telemetry.finished() if s.name.startswith("execute_tool ")]


class Stock:
    """Tools that make a span of their own, as an HTTP client's instrumentation would."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.tracer = telemetry.tracer_provider.get_tracer("http")

    @compensable(by="release")
    def reserve(self, sku: str, secret: str = "s3cr3t") -> str:
        """Reserve stock for an order."""
        with self.tracer.start_as_current_span("POST /reservations"):
            return f"res-{sku}"

    @compensable(by="release")
    async def areserve(self, sku: str) -> str:
        """Reserve stock, asynchronously."""
        with self.tracer.start_as_current_span("POST /reservations"):
            await asyncio.sleep(0)
            return f"res-{sku}"

    @compensable(by="release")
    def ship(self, address: str) -> str:
        """Ship the order."""
        raise ConnectionError(f"carrier down for {address}")

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        """Release the reservation."""
        with self.tracer.start_as_current_span("DELETE /reservations"):
            pass


def wrapped(memory: Sagacity, telemetry: Telemetry) -> dict[str, SagaTool]:
    return {tool.name: tool for tool in memory.wrap(Stock(telemetry))}


class TestToolSpan:
    def test_the_tools_own_span_is_its_child_under_the_current_span(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """The tool's HTTP span sits under `execute_tool`, which sits under the work's span.

        Not forced to the saga span: a span the work made current (an agent step) is
        the parent, and the tool span encloses its child in time.
        """
        reserve = wrapped(memory, telemetry)["reserve"]
        app = telemetry.tracer_provider.get_tracer("app")

        def work() -> str:
            with app.start_as_current_span("agent step"):
                return str(reserve(sku="A-1"))

        assert memory.saga("s-1", work).outcome is SagaOutcome.COMPLETED
        (span,) = tools(telemetry)
        step = telemetry.named("agent step")
        assert span.name == "execute_tool reserve"
        assert span.parent is not None
        assert span.parent.span_id == step.context.span_id
        assert children(telemetry, span) == ["POST /reservations"]
        child = telemetry.named("POST /reservations")
        assert span.start_time is not None
        assert child.start_time is not None
        assert span.end_time is not None
        assert child.end_time is not None
        assert span.start_time <= child.start_time
        assert child.end_time <= span.end_time
        assert {s.context.trace_id for s in telemetry.finished()} == {span.context.trace_id}

    async def test_an_async_tool_nests_the_same(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """An async tool's span is current across its awaits."""
        areserve = wrapped(memory, telemetry)["areserve"]
        result = await memory.asaga("s-2", lambda: areserve(sku="B-2"))
        assert result.outcome is SagaOutcome.COMPLETED
        (span,) = tools(telemetry)
        assert children(telemetry, span) == ["POST /reservations"]
        saga = telemetry.named("saga s-2")
        assert span.parent is not None
        assert span.parent.span_id == saga.context.span_id

    def test_the_description_and_no_arguments_by_default(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """`gen_ai.tool.description` is the docstring; arguments and result are left out."""
        reserve = wrapped(memory, telemetry)["reserve"]
        memory.saga("s-3", lambda: reserve(sku="A-1", secret="hunter2"))
        attributes = dict(tools(telemetry)[0].attributes or {})
        assert attributes["gen_ai.tool.description"] == "Reserve stock for an order."
        assert "gen_ai.tool.call.arguments" not in attributes
        assert "gen_ai.tool.call.result" not in attributes
        assert not any("hunter2" in str(v) for v in attributes.values())

    def test_the_exception_is_recorded(self, telemetry: Telemetry, memory: Sagacity) -> None:
        """A raising tool's span has the exception event, error.type and an ERROR status."""
        tools_ = wrapped(memory, telemetry)
        reserve, ship = tools_["reserve"], tools_["ship"]

        def work() -> None:
            reserve(sku="A-1")
            ship(address="1 Main St")

        assert memory.saga("s-4", work).outcome is SagaOutcome.COMPENSATED
        span = telemetry.named("execute_tool ship")
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "ConnectionError"
        (event,) = span.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "ConnectionError"
        assert (event.attributes or {})["exception.message"] == "carrier down for 1 Main St"

    def test_the_duration_metric_of_the_genai_conventions(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """`gen_ai.execute_tool.duration`: one point per call, error.type on the failed one."""
        tools_ = wrapped(memory, telemetry)
        reserve, ship = tools_["reserve"], tools_["ship"]

        def work() -> None:
            reserve(sku="A-1")
            ship(address="1 Main St")

        memory.saga("s-5", work)
        points = sorted(
            (sorted(a.items()), n) for a, n in telemetry.points("gen_ai.execute_tool.duration")
        )
        assert points == [
            (
                [
                    ("error.type", "ConnectionError"),
                    ("gen_ai.operation.name", "execute_tool"),
                    ("gen_ai.tool.name", "ship"),
                ],
                1,
            ),
            ([("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", "reserve")], 1),
        ]
        assert len(telemetry.points("sagacity.tool.duration")) == 2


class TestCompensateSpan:
    def test_the_compensations_own_span_is_its_child(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """`compensate reserve` is current while the undo runs, under the saga span."""
        tools_ = wrapped(memory, telemetry)
        reserve, ship = tools_["reserve"], tools_["ship"]

        def work() -> None:
            reserve(sku="A-1")
            ship(address="1 Main St")

        memory.saga("s-6", work)
        undo = telemetry.named("compensate reserve")
        saga = telemetry.named("saga s-6")
        assert undo.parent is not None
        assert undo.parent.span_id == saga.context.span_id
        assert children(telemetry, undo) == ["DELETE /reservations"]
        assert children(telemetry, saga) == [
            "execute_tool reserve",
            "execute_tool ship",
            "compensate reserve",
        ]

    def test_an_undo_after_the_run_goes_under_the_current_span(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """A rejection undoes a paused saga under the rejecting request's span."""
        reserve = wrapped(memory, telemetry)["reserve"]

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(amount: str) -> str:
            return "wt-1"

        (send,) = memory.wrap(wire)

        def work() -> None:
            reserve(sku="A-1")
            send(amount="10")

        assert memory.saga("s-7", work).outcome is SagaOutcome.AWAITING_APPROVAL
        web = telemetry.tracer_provider.get_tracer("web")
        with web.start_as_current_span("POST /reject") as request:
            assert memory.reject("s-7", approver="alice", reason="no").outcome is (
                SagaOutcome.COMPENSATED
            )
        undo = telemetry.named("compensate reserve")
        assert undo.parent is not None
        assert undo.parent.span_id == request.get_span_context().span_id
        assert children(telemetry, undo) == ["DELETE /reservations"]


class TestOptIn:
    @pytest.fixture
    def recording(self, telemetry: Telemetry) -> Iterator[Telemetry]:
        instrument(
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
            record_arguments=True,
            record_results=True,
        )
        yield telemetry
        uninstrument()

    def test_arguments_and_result_when_asked(self, recording: Telemetry, memory: Sagacity) -> None:
        """The journaled input and result, as canonical JSON, only with the opt-in."""
        reserve = wrapped(memory, recording)["reserve"]
        memory.saga("s-8", lambda: reserve(sku="A-1"))
        attributes = dict(tools(recording)[0].attributes or {})
        assert json.loads(str(attributes["gen_ai.tool.call.arguments"])) == {
            "sku": "A-1",
            "secret": "s3cr3t",
        }
        assert json.loads(str(attributes["gen_ai.tool.call.result"])) == "res-A-1"


class TestFrameworkSpan:
    """A framework's own `execute_tool` span for the call is joined, never doubled."""

    @pytest.mark.parametrize(
        ("name", "attributes"),
        [
            ("execute_tool reserve", {}),  # Google ADK: attributes only when the call ends
            (
                "tools/call reserve",  # the MCP SDK's server span
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "reserve"},
            ),
        ],
    )
    def test_sagacity_attributes_go_on_the_framework_span(
        self,
        telemetry: Telemetry,
        memory: Sagacity,
        name: str,
        attributes: dict[str, Any],
    ) -> None:
        """One span for the call, the framework's, with sagacity's attributes and its child."""
        reserve = wrapped(memory, telemetry)["reserve"]
        framework = telemetry.tracer_provider.get_tracer("framework")

        def work() -> str:
            with framework.start_as_current_span(name, attributes=attributes):
                return str(reserve(sku="A-1"))

        memory.saga("s-9", work)
        (span,) = [s for s in telemetry.finished() if s.name == name]
        assert tools(telemetry) == ([span] if name.startswith("execute_tool") else [])
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == "framework"
        got = dict(span.attributes or {})
        assert got["sagacity.saga_id"] == "s-9"
        assert got["sagacity.phase"] == "EXECUTED"
        assert got["sagacity.reversibility"] == "COMPENSATABLE"
        assert children(telemetry, span) == ["POST /reservations"]
        assert telemetry.points("gen_ai.execute_tool.duration") == []  # the framework's own
        assert len(telemetry.points("sagacity.tool.calls")) == 1

    def test_another_tools_span_is_not_joined(self, telemetry: Telemetry, memory: Sagacity) -> None:
        """A framework span for another tool is a parent, not the call's span."""
        reserve = wrapped(memory, telemetry)["reserve"]
        framework = telemetry.tracer_provider.get_tracer("framework")

        def work() -> str:
            with framework.start_as_current_span(
                "execute_tool lookup",
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
            ):
                return str(reserve(sku="A-1"))

        memory.saga("s-10", work)
        own = telemetry.named("execute_tool reserve")
        outer = telemetry.named("execute_tool lookup")
        assert own.parent is not None
        assert own.parent.span_id == outer.context.span_id
        assert "sagacity.saga_id" not in (outer.attributes or {})


def test_no_span_is_current_after_the_call(telemetry: Telemetry, memory: Sagacity) -> None:
    """The tool's span is detached when the tool returns or raises: nothing leaks after it."""
    tools_ = wrapped(memory, telemetry)
    reserve, ship = tools_["reserve"], tools_["ship"]
    seen: list[str] = []

    def work() -> None:
        reserve(sku="A-1")
        seen.append(getattr(trace.get_current_span(), "name", ""))
        try:
            ship(address="x")
        except ConnectionError:
            seen.append(getattr(trace.get_current_span(), "name", ""))

    memory.saga("s-11", work)
    assert seen == ["saga s-11", "saga s-11"]
    assert getattr(trace.get_current_span(), "name", None) is None


def test_a_failed_compensation_records_its_error(telemetry: Telemetry, memory: Sagacity) -> None:
    """The undo's span has the journaled error's type, an exception event and ERROR."""

    def undo() -> None:
        raise PermissionError("the carrier refuses the cancel")

    @compensable(by=undo)
    def book(slot: str) -> str:
        return f"bk-{slot}"

    @compensable(by=undo)
    def pay(amount: str) -> str:
        raise ConnectionError("bank down")

    booked, paid = memory.wrap(book, pay)

    def work() -> None:
        booked(slot="9am")
        paid(amount="5")

    assert memory.saga("s-12", work).outcome.value == "COMPENSATION_FAILED"
    span = telemetry.named("compensate book")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "PermissionError"
    (event,) = span.events
    assert event.name == "exception"
    assert dict(event.attributes or {}) == {
        "exception.type": "PermissionError",
        "exception.message": "the carrier refuses the cancel",
    }
