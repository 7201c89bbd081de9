"""Test doubles for users' own tests: in-memory stores, a fake clock, tools that fail on cue."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable
from typing import Any

from sagacity.approval import InMemoryApprovalStore
from sagacity.journal import InMemoryJournal
from sagacity.saga import Sagacity

__all__ = ["FailOn", "FakeClock", "memory_sagacity"]


class FakeClock:
    """A clock that stands still until told to move; pass it as `Sagacity(clock=...)`."""

    def __init__(self, start: datetime.datetime | None = None) -> None:
        self._now = start or datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime.datetime:
        """Return the current fake time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0, **delta: float) -> datetime.datetime:
        """Move the clock forward by `seconds` plus any `timedelta` keywords."""
        with self._lock:
            self._now += datetime.timedelta(seconds=seconds, **delta)
            return self._now


class FailOn:
    """Raise on chosen calls: `FailOn(3)` raises on the third call, `FailOn(2, 4)` on both.

    Call it at the top of a tool: `self.fail_on()`; it counts calls across threads.
    """

    def __init__(
        self,
        *calls: int,
        error: Callable[[int], BaseException] = lambda n: RuntimeError(f"failure on call {n}"),
    ) -> None:
        self._calls = set(calls)
        self._error = error
        self._count = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """How many calls were made."""
        return self._count

    def __call__(self) -> None:
        """Count a call; raise if it is one of the chosen ones."""
        with self._lock:
            self._count += 1
            number = self._count
        if number in self._calls:
            raise self._error(number)


def memory_sagacity(**options: Any) -> Sagacity:
    """A `Sagacity` on fresh in-memory stores."""
    return Sagacity(InMemoryJournal(), InMemoryApprovalStore(), **options)
