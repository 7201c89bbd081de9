"""The calls a saga run started and has not seen end, and the end of the run itself.

Work may return (or raise) with calls still running: an `asyncio.gather` that raised at
the first failure, a task it never awaited, a thread pool it did not wait for. Those calls
journal their outcome later, through the same scope. `RunningCalls` counts them, so that
the run can wait for them before it decides how the saga ended; and once the run has
finished, it refuses every append, so that no entry ever follows the saga's ENDED.

A call runs from its INTENT (counted before the append, so that a waiter sees a call
whose INTENT is being committed) to its outcome (EXECUTED or FAILED). A failed attempt
that will be retried (FAILED `retried`) keeps it running: its next INTENT follows. An
INTENT that fails starts nothing, unless it was committed as its task was cancelled
(`CommittedThenCancelled`): FAILED `not_started` then answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import math
import threading
import time
from collections.abc import Callable

from sagacity import _telemetry
from sagacity.errors import ConfigurationError, SagaStateError
from sagacity.journal import JsonValue, Phase
from sagacity.journal._group import CommittedThenCancelled

__all__ = ["RunningCalls", "checked_wait"]

_INTENT = Phase.INTENT
_OUTCOMES = (Phase.EXECUTED, Phase.FAILED)
_RETRIED = "retried"
"""The FAILED kind of an attempt that will be tried again (see `Call.retry`)."""


def checked_wait(wait: float | datetime.timedelta) -> float:
    """`Sagacity(running_call_wait=…)` in seconds, refused unless finite and not negative."""
    if isinstance(wait, datetime.timedelta):
        wait = wait.total_seconds()
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < math.inf:
        raise ConfigurationError(
            f"running_call_wait must be a finite number of seconds, not negative, not {wait!r}"
        )
    return float(wait)


class RunningCalls:
    """The calls of one saga run between their INTENT and their outcome (thread-safe).

    The scope calls `admit` before each append and `landed` after it; `close` when the
    work returned, `finish` (or `afinish`) to end the run.
    """

    def __init__(self, saga_id: str) -> None:
        self.saga_id = saga_id
        self.finished = False
        """The run is over: every append is refused, so none can follow the saga's ENDED."""
        self._closed = False
        """The work returned: a call that has not begun does not begin now."""
        self._lock = threading.Lock()
        """Guards every field; the scope takes it under its own lock, never the reverse.
        Taken bare on the hot path (a `Condition`'s own `with` costs a Python call)."""
        self._changed = threading.Condition(self._lock)
        """Notified at each change while the run waits (`_watching`)."""
        self._running: dict[str, int] = {}
        """By call id (a count: a framework may start one id twice at once, the second to
        be refused as in doubt)."""
        self._retrying: set[str] = set()
        """Running calls whose failed attempt is journaled and whose next INTENT is not."""
        self._appending = 0
        """Appends that have begun and not yet landed."""
        self._watching = False
        """The run waits for its calls: each change wakes it."""
        self._wakers: list[Callable[[], None]] = []
        """What wakes async waiters, each on its own loop."""

    def admit(
        self, phase: Phase, tool_name: str | None, call_id: str | None, payload: JsonValue
    ) -> None:
        """Count an append beginning, and a call starting at its INTENT; refuse a late one.

        Raises:
            SagaStateError: The run is over, or the work returned before this call began.
        """
        with self._lock:
            if self.finished:
                raise _late(self.saga_id, phase, tool_name, call_id, payload)
            if phase is _INTENT and call_id is not None:
                if call_id in self._retrying:
                    self._retrying.discard(call_id)  # the next attempt of a running call
                elif self._closed:
                    # Its decision was taken before the work returned, its INTENT not yet
                    # journaled: it has not started, and does not now.
                    raise SagaStateError(
                        f"saga {self.saga_id!r}: its work returned before call {call_id!r} of "
                        f"tool {tool_name!r} began, so it is not run"
                    )
                else:
                    self._running[call_id] = self._running.get(call_id, 0) + 1
            self._appending += 1

    def landed(
        self,
        phase: Phase,
        call_id: str | None,
        payload: JsonValue,
        error: BaseException | None,
    ) -> None:
        """Count an append landed (or failed with `error`), and a call ended by it."""
        with self._lock:
            self._appending -= 1
            if call_id is not None and call_id in self._running:
                if phase is _INTENT:
                    ended = error is not None and not isinstance(error, CommittedThenCancelled)
                else:
                    ended = phase in _OUTCOMES
                    if ended and error is None and _retried(payload):
                        ended = False
                        self._retrying.add(call_id)  # its next attempt's INTENT follows
                if ended:
                    count = self._running.pop(call_id) - 1
                    if count:
                        self._running[call_id] = count
                    else:
                        self._retrying.discard(call_id)
            if self._watching:
                self._changed.notify_all()
                wakers, self._wakers = self._wakers, []
                for wake in wakers:
                    wake()

    def close(self) -> None:
        """The work returned: calls that have not begun are refused from now on."""
        with self._lock:
            self._closed = True

    def finish(self, wait: float) -> set[str]:
        """End the run: wait up to `wait` seconds for the running calls, then refuse appends.

        Appends under way are waited for, however long (a journal write), so that none
        lands after the saga's ENDED.

        Returns:
            The ids of the calls still running.
        """
        deadline = time.monotonic() + wait
        with self._lock:
            self._watching = True
            while self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            self.finished = True
            while self._appending:
                self._changed.wait()
            return set(self._running)

    async def afinish(self, wait: float) -> set[str]:
        """`finish` from async code: the loop runs the calls' tasks meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            with self._lock:
                self._watching = True
                if not self.finished and (not self._running or loop.time() >= deadline):
                    self.finished = True
                if self.finished and not self._appending:
                    return set(self._running)
                changed: asyncio.Future[None] = loop.create_future()
                self._wakers.append(functools.partial(_wake, loop, changed))
                finishing = self.finished
            timeout = None if finishing else max(0.0, deadline - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed, timeout)

    def abandon(self) -> None:
        """End the run at once (its work was interrupted): every append is refused."""
        with self._lock:
            self.finished = True


def _retried(payload: JsonValue) -> bool:
    return isinstance(payload, dict) and payload.get("kind") == _RETRIED


def _late(
    saga_id: str, phase: Phase, tool_name: str | None, call_id: str | None, payload: JsonValue
) -> SagaStateError:
    """Refuse an append after the run ended, logging what it would have recorded.

    A call's outcome that comes this late is evidence nobody else will see: the call stays
    in doubt in the journal, and the log is where a human resolving it finds what it did.
    """
    what = f"call {call_id!r} of tool {tool_name!r}" if call_id else "an entry"
    if phase is _INTENT:
        _telemetry.logger.warning(
            "saga %r: %s was to begin after the saga's run had ended; it is not run",
            saga_id,
            what,
        )
        return SagaStateError(
            f"saga {saga_id!r}: {what} was to begin after the saga's run had ended, so it is "
            "not run"
        )
    _telemetry.logger.error(
        "saga %r: %s came to %s %.500s after the saga's run had ended; it is not journaled "
        "(no entry follows the end): the call stays in doubt, settle it with Sagacity.resolve",
        saga_id,
        what,
        phase.name,
        payload,
    )
    return SagaStateError(
        f"saga {saga_id!r}: {what} came to {phase.name} after the saga's run had ended; it is "
        "not journaled and the call stays in doubt: settle it with Sagacity.resolve"
    )


def _wake(loop: asyncio.AbstractEventLoop, changed: asyncio.Future[None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits on it any more
        loop.call_soon_threadsafe(_resolve, changed)


def _resolve(changed: asyncio.Future[None]) -> None:
    if not changed.done():
        changed.set_result(None)
