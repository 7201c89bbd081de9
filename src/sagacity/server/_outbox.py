"""Notifications off the call's path: a bounded queue, one thread, retries with backoff.

The webhook, the e-mail and the Slack notifiers are each an `Outbox`: an approval hook
only puts what it will send on the queue and returns, so a slow or dead receiver delays
other notifications, never a tool call. One thread sends each item in turn (`_attempt`,
which a notifier defines); a failed attempt is tried again `retries` times, waiting
`backoff`, then twice that, and so on (capped at 60 s), then given up with an ERROR log
naming the event, saga and request. When the queue is full an item is dropped and
logged: the request itself is in the journal and the store, and the inbox lists it.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import queue
import threading
import time
from typing import Generic, Protocol, Self, TypeVar

from sagacity.errors import ConfigurationError

__all__ = ["Outbox", "Outgoing", "Undeliverable"]

_STOP = object()


class Undeliverable(Exception):
    """Raised by `_attempt` when the receiver refused for good: the item is given up at once.

    Retrying what a receiver refused permanently (an SMTP 5xx) only holds back the
    items queued behind it.
    """


class Outgoing(Protocol):
    """What an outbox sends, as its logs name it."""

    @property
    def event(self) -> str:
        """`approval.requested`, `approval.reminder`, `approval.approved`, ..."""
        ...

    @property
    def saga_id(self) -> str:
        """The saga it is about."""
        ...

    @property
    def request_id(self) -> str:
        """The approval request it is about."""
        ...

    @property
    def tool_name(self) -> str:
        """The tool that waits."""
        ...


ItemT = TypeVar("ItemT", bound=Outgoing)


class Outbox(abc.ABC, Generic[ItemT]):
    """A bounded queue of items and the one thread that sends them, retrying failures.

    Args:
        kind: What sends, for thread names and logs (`webhook`, `email`, `slack`).
        target: Where it sends, for logs (a URL, an SMTP server).
        log: The logger of its warnings and errors.
        retries: How many times a failed item is tried again.
        backoff: Seconds before the first retry; doubled for each next one (max 60 s).
        queue_size: How many items may wait; beyond that new ones are dropped.
    """

    def __init__(
        self,
        *,
        kind: str,
        target: str,
        log: logging.Logger,
        retries: int,
        backoff: float,
        queue_size: int,
    ) -> None:
        if retries < 0 or backoff < 0 or queue_size < 1:
            raise ConfigurationError(
                f"{kind} retries and backoff must not be negative, queue_size must be "
                f"positive (got {retries}, {backoff}, {queue_size})"
            )
        self.retries = retries
        self.backoff = backoff
        self._kind = kind
        self._target = target
        self._log = log
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._closed = threading.Event()
        self._count = threading.Lock()
        self.delivered = 0
        """How many items were delivered."""
        self.failed = 0
        """How many were given up on after every retry, or dropped on a full queue."""
        self._thread = threading.Thread(target=self._run, name=f"sagacity-{kind}", daemon=True)
        self._thread.start()

    def _queued(self, item: ItemT) -> None:
        """Put `item` on the queue and return at once; never raises."""
        try:
            if self._closed.is_set():
                self._log.warning(
                    "%s closed: %s of request %s not sent", self._kind, item.event, item.request_id
                )
                return
            self._queue.put_nowait(item)
        except queue.Full:
            self._failed()
            self._log.warning(
                "%s queue full: %s of saga %r request %s not sent to %s",
                self._kind,
                item.event,
                item.saga_id,
                item.request_id,
                self._target,
            )

    def _failed(self) -> None:
        with self._count:  # callers' threads and the sending thread both count
            self.failed += 1

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking items; send what is queued for up to `timeout` seconds."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._deliver(item)  # type: ignore[arg-type]  # only items are queued

    def _deliver(self, item: ItemT) -> None:
        wait = self.backoff
        attempts = 0
        problem = "not attempted"
        for attempt in range(self.retries + 1):
            if attempt:
                # While closing, a dead receiver must not hold the process for minutes.
                if self._closed.wait(0) and attempt > 1:
                    break
                time.sleep(min(wait, 60.0))
                wait *= 2
            attempts += 1
            try:
                problem = self._attempt(item)
            except Undeliverable as refusal:  # the receiver said never: no retry helps
                problem = str(refusal)
                break
            except Exception as error:  # a bug in one item must not stop the thread
                problem = f"{type(error).__name__}: {error}"
            if not problem:
                with self._count:
                    self.delivered += 1
                return
            self._log.warning(
                "%s %s: %s of saga %r request %s, attempt %d failed: %s",
                self._kind,
                self._target,
                item.event,
                item.saga_id,
                item.request_id,
                attempts,
                problem,
            )
        self._failed()
        self._log.error(
            "%s %s: gave up on %s of saga %r request %s (tool %r%s) after %d "
            "attempt(s); last: %s. The journal holds it: GET /sagacity/approvals and "
            "/sagacity/sagas list it",
            self._kind,
            self._target,
            item.event,
            item.saga_id,
            item.request_id,
            item.tool_name,
            self._detail(item),
            attempts,
            problem,
        )

    def _detail(self, item: ItemT) -> str:
        """More to name in the give-up log (", " and the detail), or nothing."""
        return ""

    @abc.abstractmethod
    def _attempt(self, item: ItemT) -> str:
        """Send `item` once; the problem, or "" when it was delivered (each channel's own).

        Raises:
            Undeliverable: The receiver refused it for good; it is not tried again.
        """
