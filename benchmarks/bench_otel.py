"""The cost of OpenTelemetry support on one journaled call, in memory.

Run: `.venv/bin/python -m benchmarks bench_otel` (`SAGACITY_BENCH_QUICK=1` for a short
run that only proves the benchmark works).

Three configurations, each in a process of its own, alternated round by round so that
drift in the machine's speed falls on all alike:

- `without`: OpenTelemetry cannot even be imported (blocked in `sys.modules`);
- `installed`: OpenTelemetry and `sagacity.observability` imported, `instrument()` not
  called — the default of an application that has the extra but does not use it;
- `instrumented`: `instrument()` with an SDK tracer provider and meter provider that
  export nothing — what the spans and metrics themselves cost (for information).

Goal: `installed` within 5 % of `without` (the median of the per-round medians).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

QUICK = os.environ.get("SAGACITY_BENCH_QUICK") == "1"
ROUNDS = 3 if QUICK else 15
CALLS_PER_ROUND = 200 if QUICK else 2000
GOAL = 1.05
MODES = ("without", "installed", "instrumented")


def child(mode: str, calls: int) -> float:
    """Time `calls` wrapped calls in one saga on `memory://`; return µs per call."""
    if mode == "without":
        for name in ("opentelemetry", "opentelemetry.trace", "opentelemetry.metrics"):
            sys.modules[name] = None  # type: ignore[assignment]  # the import now fails
    elif mode in ("installed", "instrumented"):
        import sagacity.observability as observability

        if mode == "instrumented":
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.trace import TracerProvider

            observability.instrument(
                tracer_provider=TracerProvider(), meter_provider=MeterProvider()
            )
    from sagacity import CompensationContext, Sagacity, compensable, compensation

    class Inventory:
        @compensable(by="release_inventory")
        def reserve_inventory(self, sku: str, qty: int) -> str:
            return f"res-{sku}-{qty}"

        @compensation
        def release_inventory(self, ctx: CompensationContext) -> None:
            pass

    sagacity = Sagacity.from_url("memory://")
    tool = sagacity.wrap(Inventory())[0]
    elapsed = 0.0

    def work() -> None:
        nonlocal elapsed
        for _ in range(20):  # warm up
            tool(sku="SKU-42", qty=2)
        began = time.perf_counter()
        for _ in range(calls):
            tool(sku="SKU-42", qty=2)
        elapsed = time.perf_counter() - began

    sagacity.saga("bench", work)
    sagacity.close()
    return elapsed / calls * 1e6


def _round(mode: str) -> float:
    code = (
        "import json, sys; from benchmarks.bench_otel import child; "
        f"print(json.dumps(child({mode!r}, {CALLS_PER_ROUND})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Print µs per call for each configuration and whether `installed` meets the goal."""
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    for number in range(ROUNDS):
        order = MODES if number % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            results[mode].append(_round(mode))
    medians = {mode: statistics.median(values) for mode, values in results.items()}
    print(f"bench_otel: {ROUNDS} rounds of {CALLS_PER_ROUND} calls, memory://")
    for mode in MODES:
        print(f"  {mode:<13} {medians[mode]:7.2f} µs per call")
    ratio = medians["installed"] / medians["without"]
    verdict = "meets" if ratio <= GOAL else "MISSES"
    print(f"  installed / without = {ratio:.3f} ({verdict} the goal of {GOAL:.2f})")
    if QUICK:
        print("  (quick run: the sizes prove the benchmark works, not the figure)")


if __name__ == "__main__":
    main()
