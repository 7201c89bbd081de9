"""The saga scope: the open saga that tool calls in this context journal into."""

from __future__ import annotations

import contextvars
import threading
from typing import TYPE_CHECKING, NamedTuple

from sagacity._history import SagaHistory
from sagacity.approval import ApprovalRequest
from sagacity.errors import SagacityError
from sagacity.journal import JournalEntry, JsonValue, Phase

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["CurrentCall", "SagaScope", "current_call"]


class CurrentCall(NamedTuple):
    """The journaled call running in this context: see `current_call`."""

    saga_id: str
    """The saga."""
    call_id: str
    """A stable idempotency key: the framework's tool-call id, or one sagacity made."""
    tool_name: str
    """The tool."""


class SagaScope:
    """One open saga, shared by every thread and task its work runs tools in.

    The context variable holds this object, never a copy of its state: frameworks copy
    contextvars into worker threads and tasks, and a `set()` made there would not reach
    the saga. Tools therefore mutate the object, under its lock.
    """

    def __init__(self, owner: Sagacity, saga_id: str, history: SagaHistory) -> None:
        self.owner = owner
        self.saga_id = saga_id
        self.history = history
        self.lock = threading.RLock()
        self.failed = False
        """A call failed: the saga compensates when its work returns, whatever it says."""
        self.refusal: SagacityError | None = None
        """A check refused a call before it ran (an approval check, a replay that is in
        doubt or does not match); raised when the work returns, even if it was caught."""
        self.closed = False
        """The work returned: calls that start now are refused (a stream left unconsumed)."""
        self.suspended: set[str] = set()
        """Calls the framework paused (a control-flow exit) that have not run again since."""
        self.awaiting: list[ApprovalRequest] = []
        """Requests this scope made."""
        self._counters: dict[str, int] = {}

    def next_call_id(self, tool_name: str) -> str:
        """Make the next call id for a tool without a framework id: `name#1`, `name#2`, ….

        Deterministic, so work run again after a crash or a resume finds the calls
        it made before in the journal and replays them instead of running them twice.
        """
        with self.lock:
            count = self._counters.get(tool_name, 0) + 1
            self._counters[tool_name] = count
        return f"{tool_name}#{count}"

    def peek_call_id(self, tool_name: str) -> str:
        """Return the id `next_call_id` will make next, without taking it."""
        with self.lock:
            return f"{tool_name}#{self._counters.get(tool_name, 0) + 1}"

    def append(
        self,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
    ) -> JournalEntry:
        """Append to the saga's journal and to the scope's index of it."""
        with self.lock:
            entry = self.owner.journal.append(
                self.saga_id,
                phase,
                tool_name=tool_name,
                call_id=call_id,
                ref_seq=ref_seq,
                payload=payload,
                expected_seq=expected_seq,
            )
            self.history.add(entry)
            return entry

    def close(self) -> None:
        """Mark the work returned: a call that starts later is refused, not journaled."""
        with self.lock:
            self.closed = True

    def refresh(self) -> None:
        """Re-read the journal: approvals may have been recorded by another process."""
        with self.lock:
            self.history = SagaHistory.of(self.saga_id, self.owner.journal.entries(self.saga_id))


_scope: contextvars.ContextVar[SagaScope | None] = contextvars.ContextVar(
    "sagacity_scope", default=None
)
_call: contextvars.ContextVar[CurrentCall | None] = contextvars.ContextVar(
    "sagacity_call", default=None
)


def current_scope() -> SagaScope | None:
    """Return the saga open in this context, if any."""
    return _scope.get()


def current_call() -> CurrentCall | None:
    """Inside a journaled tool, return `(saga_id, call_id, tool_name)`; else None.

    Hand `call_id` to payment and mail APIs as their idempotency key: it is the same
    when the call is retried, replayed or resumed.
    """
    return _call.get()
