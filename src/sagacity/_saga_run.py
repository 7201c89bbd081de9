"""A run of a saga's work inside its scope, sync or async, and what the work returned.

The work runs with the scope open in its context (`scope_var`); then the run waits for the
calls it left running (`SagaScope.finish_calls`) and refuses a result that would run calls
outside the saga (a coroutine, an unread stream).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from sagacity import _telemetry
from sagacity._scope import SagaScope, scope_var
from sagacity.errors import SagaStateError

__all__ = ["arun_in", "run_coroutine", "run_in"]

T = TypeVar("T")


def run_in(scope: SagaScope, work: Callable[[], Any]) -> tuple[Any, Exception | None]:
    """Run `work` with `scope` open; return what it returned, or what it raised.

    Then wait for the calls it left running, up to the scope's `running_call_wait` (see
    `finish_calls`).
    """
    tracing = _telemetry.current
    span = None if tracing is None else tracing.saga_started(scope.saga_id)
    token = scope_var.set(scope)
    value: Any = None
    error: Exception | None = None
    try:
        try:
            value = work()
        except Exception as raised:
            error = raised
        finally:
            scope_var.reset(token)
            scope.close()
            if tracing is not None:
                tracing.saga_work_done(span)
        scope.finish_calls(scope.running_call_wait)
    except BaseException:
        scope.calls.abandon()  # interrupted: the saga stays open, and nothing more lands in it
        raise
    if error is not None:
        return None, error
    if inspect.iscoroutine(value):
        value.close()  # never started: nothing in it ran
        return None, TypeError(
            f"saga {scope.saga_id!r}: work returned a coroutine; run async work with "
            "`await sagacity.asaga(...)`"
        )
    return _unconsumed_stream(scope, value)


async def arun_in(
    scope: SagaScope, work: Callable[[], Awaitable[Any]]
) -> tuple[Any, Exception | None]:
    """Run async `work` with `scope` open (see `run_in`)."""
    tracing = _telemetry.current
    span = None if tracing is None else tracing.saga_started(scope.saga_id)
    token = scope_var.set(scope)
    outcome: Any = None
    error: Exception | None = None
    try:
        try:
            outcome = work()
            if inspect.isawaitable(outcome):
                outcome = await outcome
        except Exception as raised:
            outcome, error = None, raised
        finally:
            scope_var.reset(token)
            try:
                await scope.settled()  # a gate that a call of the work began ends before the saga
            finally:
                scope.close()
            if tracing is not None:
                tracing.saga_work_done(span)
        await scope.afinish_calls(scope.running_call_wait)
    except BaseException:
        scope.calls.abandon()  # interrupted: the saga stays open, and nothing more lands in it
        raise
    if error is not None:
        return None, error
    return _unconsumed_stream(scope, outcome)


def _unconsumed_stream(scope: SagaScope, value: Any) -> tuple[Any, Exception | None]:
    """Refuse a generator returned by the work: read later, its calls would run unjournaled.

    A lazy stream (LangGraph's `graph.stream()`, say) runs in the reader's context, where
    no saga is open. Closed before it started, it has run nothing.
    """
    if inspect.isgenerator(value) or inspect.isasyncgen(value):
        if inspect.isgenerator(value):
            value.close()  # an async generator that never started needs no closing
        return None, TypeError(
            f"saga {scope.saga_id!r}: work returned a stream ({type(value).__name__}) that was "
            "never read; consume it inside the work, e.g. `lambda: list(graph.stream(...))`"
        )
    return value, None


def run_coroutine(coroutine: Coroutine[Any, Any, T], what: str) -> T:
    """Run an async resume to completion from sync code that has no event loop running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise SagaStateError(f"{what} and an event loop is running here: await aresume_saga instead")
