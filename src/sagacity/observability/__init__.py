"""OpenTelemetry spans and metrics for sagacity (extra `otel`).

`instrument()` turns them on; without it sagacity creates no span and records no metric,
and with the extra not installed this package cannot even be imported. Spans follow the
OpenTelemetry GenAI semantic conventions for tool execution (docs/observability.md).
"""

from __future__ import annotations

try:
    import opentelemetry.metrics  # imported for the guard only
    import opentelemetry.trace  # noqa: F401  # imported for the guard only
except ImportError as error:  # pragma: no cover - exercised with the extra blocked
    raise ImportError(
        "sagacity.observability needs OpenTelemetry: pip install 'sagacity[otel]'"
    ) from error

from sagacity.observability._otel import instrument, uninstrument

__all__ = ["instrument", "uninstrument"]
