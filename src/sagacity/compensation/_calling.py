"""Calling one compensation from the walk: sync or async, in a thread, under its timeout.

A compensation's outcome is None when it succeeded, else the failure the walk journals
in its COMPENSATION_FAILED entry: a timeout leaves its outcome unknown, as for a tool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Awaitable
from typing import Any

from sagacity._classify import error_json
from sagacity._history import OUTCOME_UNKNOWN
from sagacity.compensation._context import CompensationContext
from sagacity.compensation._registry import Compensation

__all__ = ["run_async", "run_sync"]


class _TimedOut(Exception):
    """The walk stopped waiting for a compensation: its outcome is unknown."""


def run_sync(compensation: Compensation, context: CompensationContext) -> dict[str, Any] | None:
    """Call a compensation from the sync walk; None if it succeeded, else the failure."""
    timeout = compensation.timeout
    try:
        if timeout is None:
            _call_to_completion(compensation, context)
        elif compensation.is_async:
            _run_to_completion(compensation.call(context), timeout)
        else:
            _wait_for_thread(_start_thread(compensation, context), timeout)
    except _TimedOut as timed_out:
        return {"error": f"TimeoutError: {timed_out}", "kind": OUTCOME_UNKNOWN}
    except Exception as exc:
        return _failure(exc)
    return None


async def run_async(
    compensation: Compensation, context: CompensationContext
) -> dict[str, Any] | None:
    """Call a compensation from the async walk; None if it succeeded, else the failure."""
    timeout = compensation.timeout
    try:
        if timeout is None:
            outcome = compensation.call(context)
            if inspect.isawaitable(outcome):
                await outcome
        elif compensation.is_async:
            await _bounded(compensation.call(context), timeout)
        else:
            await _await_thread(_start_thread(compensation, context), timeout)
    except _TimedOut as timed_out:
        return {"error": f"TimeoutError: {timed_out}", "kind": OUTCOME_UNKNOWN}
    except Exception as exc:
        return _failure(exc)
    return None


def _failure(exc: Exception) -> dict[str, Any]:
    """A compensation raised. A timeout of its own leaves its outcome unknown, as for a tool."""
    failure: dict[str, Any] = {"error": _describe(exc)}
    if isinstance(exc, TimeoutError):
        failure["kind"] = OUTCOME_UNKNOWN
    return failure


def _call_to_completion(compensation: Compensation, context: CompensationContext) -> None:
    outcome = compensation.call(context)
    if inspect.isawaitable(outcome):
        _run_to_completion(outcome, None)


def _start_thread(
    compensation: Compensation, context: CompensationContext
) -> concurrent.futures.Future[None]:
    """Run a sync compensation in a daemon thread of its own, with the caller's context.

    A sync function cannot be stopped: past its timeout it is left running. A daemon
    thread, unlike an executor's, does not hold up the interpreter's exit meanwhile.
    """
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    variables = contextvars.copy_context()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            variables.run(_call_to_completion, compensation, context)
        except BaseException as exc:  # handed to the walk, which re-raises it
            future.set_exception(exc)
        else:
            future.set_result(None)

    threading.Thread(
        target=target, name=f"sagacity-compensation-{compensation.tool_name}", daemon=True
    ).start()
    return future


def _left_running(timeout: float) -> _TimedOut:
    return _TimedOut(
        f"compensation timed out after {timeout:g}s; it was left running in its worker thread"
    )


def _wait_for_thread(future: concurrent.futures.Future[None], timeout: float) -> None:
    done, _ = concurrent.futures.wait([future], timeout=timeout)
    if not done:
        raise _left_running(timeout)
    future.result()


async def _await_thread(future: concurrent.futures.Future[None], timeout: float) -> None:
    waiting = asyncio.wrap_future(future)
    done, _ = await asyncio.wait([waiting], timeout=timeout)
    if not done:
        # Whatever the thread ends with later is nobody's to read: do not log it as lost.
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise _left_running(timeout)
    waiting.result()


async def _bounded(awaitable: Awaitable[Any], timeout: float | None) -> None:
    """Await `awaitable`, cancelling it after `timeout` seconds (None: no bound)."""
    if timeout is None:
        await awaitable
        return
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            await awaitable
    except TimeoutError:
        if not scope.expired():
            raise  # the compensation's own timeout
    if scope.expired():  # also when it swallowed the cancellation and returned
        raise _TimedOut(f"compensation timed out after {timeout:g}s and was cancelled")


def _run_to_completion(awaitable: Awaitable[Any], timeout: float | None) -> None:
    """Run an async compensation from the sync walk, even if a loop runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # A private loop, never made the thread's current one: asyncio.run() would unset
        # a loop the caller keeps for reuse (PydanticAI's run_sync does).
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_bounded(awaitable, timeout))
        finally:
            loop.close()
        return
    # asyncio.run() refuses to nest in a running loop: give the coroutine a loop of its
    # own on another thread, and wait for it (the sync walk blocks either way).
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(context.run, asyncio.run, _bounded(awaitable, timeout)).result()


def _describe(exc: BaseException) -> str:
    error = error_json(exc)
    return f"{error['type']}: {error['message']}"
