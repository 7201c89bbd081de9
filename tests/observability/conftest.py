"""The SDK's in-memory span exporter and metric reader, installed through `instrument()`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sagacity import Sagacity
from sagacity.observability import instrument, uninstrument


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, name: str) -> ReadableSpan:
        (span,) = [s for s in self.finished() if s.name == name]
        return span

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        found = []
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        for point in item.data.data_points:
                            value = getattr(point, "value", None)
                            if value is None:
                                value = point.count  # a histogram: how many recorded
                            found.append((dict(point.attributes or {}), value))
        return found


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    installed = Telemetry()
    instrument(tracer_provider=installed.tracer_provider, meter_provider=installed.meter_provider)
    try:
        yield installed
    finally:
        uninstrument()
        installed.tracer_provider.shutdown()
        installed.meter_provider.shutdown()


@pytest.fixture
def memory() -> Iterator[Sagacity]:
    sagacity = Sagacity.from_url("memory://")
    yield sagacity
    sagacity.close()
