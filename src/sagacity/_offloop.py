"""Store I/O from async code: on a worker thread the loop awaits, finished even if cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["FinishedThenCancelled", "finished_off_loop"]

T = TypeVar("T")


class FinishedThenCancelled(asyncio.CancelledError):
    """The task was cancelled while its step ran off the loop, and the step returned."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result
        """What the step returned."""


async def finished_off_loop(function: Callable[[], T]) -> T:
    """Run `function` on a worker thread; return or raise what it does.

    The loop is never blocked on it. A cancel of the awaiting task does not abandon it
    half done or unstarted: the task waits for it to finish, then raises
    `FinishedThenCancelled` with what it returned, or `CancelledError` if it raised.
    """
    running = asyncio.ensure_future(asyncio.to_thread(function))
    cancelled = False
    while not running.done():
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            cancelled = True
        except BaseException:
            break
    if cancelled:
        if running.cancelled() or running.exception() is not None:
            raise asyncio.CancelledError()  # its error, retrieved, is the cancel's now
        raise FinishedThenCancelled(running.result())
    return running.result()
