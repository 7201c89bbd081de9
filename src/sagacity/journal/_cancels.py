"""Cancelling a task that awaits an append: the caller never guesses what was written.

An append whose batch has not started is withdrawn (`AppendWithdrawn`), unless it records
an outcome; one under way is seen through, and `CommittedThenCancelled` carries its entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sagacity.journal._entry import JournalEntry, Phase

T = TypeVar("T")

__all__ = [
    "RECORDS_AN_OUTCOME",
    "AppendWithdrawn",
    "CommittedThenCancelled",
    "cancel_of",
    "committed",
    "finished",
    "kept",
    "through_cancels",
]


class AppendWithdrawn(asyncio.CancelledError):
    """The awaiting task was cancelled before its append's batch started: nothing was written."""


class CommittedThenCancelled(asyncio.CancelledError):
    """The awaiting task was cancelled while its append was committed; it was written."""

    def __init__(self, entry: JournalEntry) -> None:
        super().__init__(f"saga {entry.saga_id!r}: seq {entry.seq} was committed, then cancelled")
        self.entry = entry
        """The entry, durable in the journal."""


RECORDS_AN_OUTCOME = frozenset(
    {Phase.EXECUTED, Phase.FAILED, Phase.COMPENSATED, Phase.COMPENSATION_FAILED}
)
"""Phases whose entry says what happened: once asked for, never withdrawn by a cancel."""


async def through_cancels(
    awaitable: Awaitable[T],
) -> tuple[asyncio.Future[T], asyncio.CancelledError | None]:
    """Await `awaitable` to its end in a task of its own, whatever cancels its caller.

    Returns the finished task and the last cancel that came meanwhile (None if none
    did), for the caller to raise once it has what it must not lose. A canceller that
    cancels again at every await (anyio's cancel scopes do) only makes this wait go
    round: the task itself is not cancelled.
    """
    running = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not running.done():
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError as error:
            if running.cancelled():  # cancelled itself, with the loop
                raise
            cancelled = error
        except Exception:
            pass  # the task holds it
    return running, cancelled


async def finished(
    awaitable: Awaitable[T],
    then_cancelled: Callable[[T], asyncio.CancelledError],
    cancelled: asyncio.CancelledError | None = None,
) -> T:
    """Await `awaitable` through any cancel (see `through_cancels`), and return its result.

    Cancelled (now, or before, as `cancelled` says), it raises `then_cancelled(result)`,
    or a plain `CancelledError` if `awaitable` failed: its error is the cancel's now.
    """
    done, again = await through_cancels(awaitable)
    caught = again or cancelled
    if caught is None:
        return done.result()
    if done.exception() is not None:
        raise cancel_of(asyncio.CancelledError(), caught)
    raise cancel_of(then_cancelled(done.result()), caught)


async def kept(
    appending: Awaitable[JournalEntry], cancelled: asyncio.CancelledError | None = None
) -> JournalEntry:
    """Await an append through any cancel: its fate comes first (see `finished`).

    Cancelled, it raises `CommittedThenCancelled` with the entry, or a `CancelledError`
    if the append failed: written or not, unknown.
    """
    return await finished(appending, CommittedThenCancelled, cancelled)


def cancel_of(error: asyncio.CancelledError, caught: asyncio.CancelledError) -> BaseException:
    """`error` to raise for the cancel `caught`, so that its canceller knows it as its own.

    anyio, for one, recognizes its cancel by its message: a `CancelledError` whose message,
    or that of one before it in a `__context__` chain of `CancelledError`s, starts with
    its own. The chain alone does not last: a `raise` made while another exception is
    handled, in this frame or up the stack (a tool's error, an error of the work's own),
    chains to that one instead, as does a future's result raised again. So `error`'s
    message starts with the message of `caught`, if it has one; and its `__context__` is
    `caught` (raise it outside an `except` block to keep it).
    """
    cause = caught.args[0] if caught.args and isinstance(caught.args[0], str) else None
    if cause is not None and not (error.args and str(error.args[0]).startswith(cause)):
        error.args = (f"{cause}: {error.args[0]}", *error.args[1:]) if error.args else (cause,)
    error.__context__ = caught
    return error


async def committed(
    waiting: asyncio.Future[JournalEntry], withdraw: Callable[[], bool], *, phase: Phase
) -> JournalEntry:
    """Await a queued append's future without blocking the event loop.

    Cancellation never leaves the caller guessing: an append whose batch has not
    started is withdrawn (`AppendWithdrawn`: nothing is written), unless it records an
    outcome, which is known and must not be lost; one already being committed is waited
    for (a commit takes milliseconds), and `CommittedThenCancelled` carries its entry.
    Both are `CancelledError`s, so the task ends cancelled as asked, and the caller,
    which never sees the entry returned, does not act on it: a tool whose INTENT was
    being committed is not started.

    Args:
        waiting: The append's future, which the loop's batch settles.
        withdraw: Takes the append out of its queue if its batch has not started, and
            says whether it did.
        phase: The entry's phase: one that records an outcome is never withdrawn.
    """
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError as cancelled:
        if phase not in RECORDS_AN_OUTCOME and withdraw():
            raise cancel_of(AppendWithdrawn(), cancelled) from None
        caught = cancelled
    return await kept(waiting, caught)  # under way: waited for through any further cancel
