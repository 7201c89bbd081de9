"""Decisions as events: wait for the one on a saga or request, or follow them all."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
import time
from collections.abc import AsyncIterator, Generator
from typing import TYPE_CHECKING

from sagacity._decision_log import DecisionLog, decisions_in
from sagacity._decisions import Decision
from sagacity._history import SagaHistory, payload_of
from sagacity._ids import require_id
from sagacity.worker._watch import JournalWatch, open_watch

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["DecisionEvents", "default_poll_interval"]

_POLL_LOCAL = 0.2
"""Seconds between looks at a SQLite or memory journal: the decision latency there."""
_POLL_UNDER_LISTEN = 5.0
"""Seconds between safety looks when LISTEN/NOTIFY wakes the reader."""
_ASYNC_SLICE = 0.25
"""The longest an async waiter's thread blocks before its task may be cancelled."""


def default_poll_interval(watch: JournalWatch) -> float:
    """The poll interval a reader uses when none is given (see `Worker`)."""
    return _POLL_UNDER_LISTEN if watch.wakeup == "listen" else _POLL_LOCAL


class DecisionEvents:
    """The decisions on approval requests, as they land in the journal.

    Read from the journal, through the approval check's own counting (an approval that
    would not let the call run is no decision). On PostgreSQL a NOTIFY sent in the
    transaction that journals the decision wakes the reader; on SQLite and in memory it
    polls every `poll_interval` seconds (a look that finds nothing new costs a pragma).

    Args:
        sagacity: Whose journal and approval policy are read.
        poll_interval: Seconds between looks when nothing woke the reader (default 0.2 on
            SQLite and memory, 5 under LISTEN).
        listen: On PostgreSQL: LISTEN (True), poll only (False, behind PgBouncer in
            transaction mode), or try LISTEN and fall back to polling (None).

    Use it as a context manager, or `close()` it.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        *,
        poll_interval: float | None = None,
        listen: bool | None = None,
    ) -> None:
        self.sagacity = sagacity
        self._listen = listen
        self.watch = open_watch(sagacity.journal, listen=listen)
        self._watches: set[JournalWatch] = set()
        self.poll_interval = poll_interval or default_poll_interval(self.watch)
        self._closed = threading.Event()
        self._expiries_read: datetime.datetime | None = None

    def __enter__(self) -> DecisionEvents:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every wait and release the watch's connections."""
        self._closed.set()
        for watch in (self.watch, *self._watches):
            watch.interrupt()
        self.watch.close()

    def _log(self) -> DecisionLog:
        approval = self.sagacity.approval
        return DecisionLog(policy=approval.policy, declared=dict(approval.declared_approvers))

    def decisions(self, saga_id: str) -> list[Decision]:
        """Every decision the saga's journal records so far, oldest first."""
        history = SagaHistory.of(saga_id, self.sagacity.journal.entries(saga_id))
        return decisions_in(history, self._log(), self.sagacity.now())

    # -- one saga ------------------------------------------------------------------------

    def wait(
        self, saga_id: str, *, request_id: str | None = None, timeout: float | None = None
    ) -> Decision:
        """Return the decision on the saga's newest request (or `request_id`), waiting for it.

        A request decided already is answered at once. An edited request answers EDITED
        (its `replaced_by` is the request to wait on next).

        Raises:
            TimeoutError: No decision within `timeout` seconds.
        """
        require_id(saga_id, "saga id")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self._decided(saga_id, request_id)
            if found is not None:
                return found
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(
                    f"saga {saga_id!r}: no decision on "
                    + (f"request {request_id}" if request_id else "its newest request")
                    + f" within {timeout} s"
                )
            self._pause(left)

    async def await_decision(
        self, saga_id: str, *, request_id: str | None = None, timeout: float | None = None
    ) -> Decision:
        """`wait` from async code: the loop is never blocked; cancelling stops the wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = _ASYNC_SLICE if left is None else min(_ASYNC_SLICE, left)
            try:
                return await asyncio.to_thread(
                    self.wait, saga_id, request_id=request_id, timeout=step
                )
            except TimeoutError:
                if left is not None and left <= step:
                    raise

    def _decided(self, saga_id: str, request_id: str | None) -> Decision | None:
        history = SagaHistory.of(saga_id, self.sagacity.journal.entries(saga_id))
        if request_id is None:
            if not history.awaiting:
                return None
            newest = max(history.awaiting.values(), key=lambda e: e.seq)
            request_id = str(payload_of(newest).get("request_id"))
        found = [
            d
            for d in decisions_in(history, self._log(), self.sagacity.now())
            if d.request_id == request_id
        ]
        return found[-1] if found else None

    def _pause(self, left: float | None) -> None:
        pause = self.poll_interval if left is None else min(self.poll_interval, left)
        self.watch.wait(pause)
        self.watch.changed()  # the wait is per saga: whatever woke it, look again

    # -- every saga ----------------------------------------------------------------------

    def follow(self, *, timeout: float | None = None) -> Generator[Decision, None, None]:
        """Yield each decision made from now on, in every saga, as it lands.

        "Now" is this call, not the first `next()`. Stops when `timeout` seconds pass
        without one (None: never, until `close()`). Expiries are yielded when their time
        comes, for requests still stored. Each follower watches the journal on its own.
        """
        started = self.sagacity.now()
        watch = open_watch(self.sagacity.journal, listen=self._listen)
        self._watches.add(watch)
        watch.changed()  # what is there already is not news
        return self._following(watch, started, timeout)

    def _following(
        self, watch: JournalWatch, started: datetime.datetime, timeout: float | None
    ) -> Generator[Decision, None, None]:
        seen: set[tuple[str, str, str]] = set()
        quiet_since = time.monotonic()
        try:
            while not self._closed.is_set():
                fresh = self._fresh(watch.changed() | self._expiring(), started, seen)
                if fresh:
                    yield from fresh
                    quiet_since = time.monotonic()
                    continue
                left = None if timeout is None else timeout - (time.monotonic() - quiet_since)
                if left is not None and left <= 0:
                    return
                watch.wait(self.poll_interval if left is None else min(left, self.poll_interval))
        finally:
            self._watches.discard(watch)
            watch.close()

    async def afollow(self, *, timeout: float | None = None) -> AsyncIterator[Decision]:
        """`follow` from async code: each look runs on a worker thread."""
        iterator = self.follow(timeout=timeout)
        done = object()
        try:
            while True:
                item = await asyncio.to_thread(next, iterator, done)
                if item is done:
                    return
                assert isinstance(item, Decision)
                yield item
        finally:
            # Left early (a break, aclose, the loop's end): the follower's watch is closed
            # now, not when the garbage collector finds the generator. A look still running
            # on its thread (a cancel) cannot be closed; it ends at `close()`.
            with contextlib.suppress(ValueError):
                iterator.close()

    def _fresh(
        self, sagas: set[str], started: datetime.datetime, seen: set[tuple[str, str, str]]
    ) -> list[Decision]:
        fresh = []
        for saga_id in sorted(sagas):
            for decision in self.decisions(saga_id):
                key = (saga_id, decision.request_id, decision.outcome.value)
                if key in seen or decision.decided_at < started:
                    continue
                seen.add(key)
                fresh.append(decision)
        return sorted(fresh, key=lambda d: d.decided_at)

    def _expiring(self) -> set[str]:
        """The sagas of stored requests whose expiry passed since the last look.

        The store is read at most once a second: expiries are times, not rows.
        """
        now = self.sagacity.now()
        last = self._expiries_read
        if last is not None and (now - last).total_seconds() < 1.0:
            return set()
        self._expiries_read = now
        return {
            r.saga_id
            for r in self.sagacity.approvals.pending()
            if r.expires_at is not None
            and r.expires_at <= now
            and (last is None or r.expires_at > last - datetime.timedelta(seconds=1))
        }
