"""A saga's approval gates on one event loop: gates in turn, and the appends they wait for.

`SagaScope.gate` runs each sync step of the approval gate on a worker thread through these
(see there); the loop-side appends of the saga wait for the gates, and a gate for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from sagacity._offloop import finished_off_loop

__all__ = ["Gates"]

T = TypeVar("T")


class Gates:
    """A saga's approval gates on one event loop, and the loop-side appends they wait for."""

    __slots__ = ("gating", "idle_waiters", "loop", "turn", "writing", "written")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.turn = asyncio.Lock()
        """Taken by each gate in turn, in the order they were called (asyncio's is FIFO)."""
        self.gating = 0
        """Gates holding or waiting for `turn`: the saga's loop-side work waits."""
        self.idle_waiters: set[asyncio.Future[None]] = set()
        """Set when `gating` drops to 0: the loop-side work waiting for it goes on."""
        self.writing = 0
        """Async appends of the saga under way on the loop: a gate waits for them."""
        self.written: asyncio.Future[None] | None = None
        """Set when `writing` drops to 0 while a gate waits for it."""

    @property
    def idle(self) -> bool:
        return not self.gating and not self.writing

    async def run(self, step: Callable[[], T]) -> T:
        self.gating += 1
        try:
            async with self.turn:
                while self.writing:
                    self.written = self.loop.create_future()
                    await self.written
                return await finished_off_loop(step)
        finally:
            self.gating -= 1
            if not self.gating:
                for waiter in self.idle_waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    async def settled(self) -> None:
        """Wait until no gate runs or waits.

        On a future set when the last gate ends, never on `turn`: a gate cancelled while
        it waits for `turn` still counts until its task runs, and taking the free `turn`
        meanwhile would not wait at all, so the check would go round without ever letting
        that task run.
        """
        while self.gating:
            idle = self.loop.create_future()
            self.idle_waiters.add(idle)
            try:
                await idle
            finally:
                self.idle_waiters.discard(idle)

    async def settle_holding_cancels(self) -> asyncio.CancelledError | None:
        """`settled`, through cancels: the last that came meanwhile, for the caller to raise."""
        cancelled = None
        while self.gating:
            try:
                await self.settled()
            except asyncio.CancelledError as error:
                cancelled = error
        return cancelled

    def wrote(self) -> None:
        """An append under way has landed (or failed)."""
        self.writing -= 1
        if not self.writing and self.written is not None:
            if not self.written.done():
                self.written.set_result(None)
            self.written = None
