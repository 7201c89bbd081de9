"""Store I/O from async code: on a worker thread the loop awaits, finished even if cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

__all__ = ["finished_off_loop"]

T = TypeVar("T")


async def finished_off_loop(function: Callable[[], T]) -> T:
    """Run `function` on a worker thread; return or raise what it does.

    The loop is never blocked on it. A cancel of the awaiting task does not abandon it
    half done or unstarted: the task waits for it to finish, then raises
    `CancelledError`; what it wrote is in the store, and the caller can tell from its
    own state.
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
        if not running.cancelled():
            running.exception()  # retrieved: its error is the cancel's now
        raise asyncio.CancelledError()
    return running.result()
