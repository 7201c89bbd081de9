"""A journal driven through another edge than `append`, for the conformance suite.

- `async`: every append is awaited on an event loop (`append_async`, the path async
  tools take): for SQLite a writer thread the loop awaits, for PostgreSQL the loop's
  async connections. So are the reads of a saga's entries (`entries_async`) and the
  takes of a lease (`aacquire_lease`, where the journal has it), as an async saga
  opens; releases and renewals run the sync methods, on a worker thread in an async
  saga.
- `batched`: every append is committed by the backend's group-commit batch path, as
  one of a batch (memory has none: its appends never wait).
- `async batched`: PostgreSQL only, every append committed by the loop's batch path.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from sagacity.journal import JournalEntry, Phase, SagaLease, SideEffectJournal
from sagacity.journal._group import AppendRequest
from sagacity.journal._protocol import append_async, entries_async

T = TypeVar("T")

EDGES = ["sync", "async", "batched", "async batched"]


class EventLoopThread:
    """One event loop running on its own thread, for sync tests to submit coroutines to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class DrivenJournal:
    """A journal driven through an edge (appends; reads and lease takes `async`)."""

    def __init__(self, journal: SideEffectJournal, edge: str, loops: EventLoopThread) -> None:
        self._journal = journal
        self._edge = edge
        self._loops = loops
        self.writer: Any = None
        """The loop's batch path (`async batched`), made on the loop on first use."""

    def append(self, saga_id: str, phase: Phase, **options: Any) -> JournalEntry:
        group = getattr(self._journal, "_group", None)
        if self._edge == "batched" and group is not None:
            (result,) = group._many([AppendRequest(saga_id, phase, **options)])
            if isinstance(result, BaseException):
                raise result
            return result
        if self._edge == "async batched":
            return self._on_loop(self._in_loop_batch(AppendRequest(saga_id, phase, **options)))
        return self._on_loop(append_async(self._journal, saga_id, phase, **options))

    def entries(self, saga_id: str) -> list[JournalEntry]:
        if self._edge != "async":
            return self._journal.entries(saga_id)
        return self._on_loop(entries_async(self._journal, saga_id))

    def acquire_lease(self, saga_id: str, owner: str, **times: Any) -> SagaLease:
        native = getattr(self._journal, "aacquire_lease", None)
        if self._edge != "async" or native is None:
            return self._journal.acquire_lease(saga_id, owner, **times)
        lease: SagaLease = self._on_loop(native(saga_id, owner, **times))
        return lease

    def _on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loops.loop).result()

    async def _in_loop_batch(self, request: AppendRequest) -> JournalEntry:
        if self.writer is None:
            self.writer = self._journal._new_loop_writer()  # type: ignore[attr-defined]
        (result,) = await self.writer._many([request])
        if isinstance(result, BaseException):
            raise result
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)


def driven(journal: SideEffectJournal, edge: str) -> Iterator[SideEffectJournal]:
    """Yield `journal` driven through `edge` (a fixture's body)."""
    if edge == "sync":
        yield journal
        return
    assert edge != "async batched" or hasattr(journal, "_loop_writers")  # see conftest.py
    loops = EventLoopThread()
    drive = DrivenJournal(journal, edge, loops)
    try:
        yield drive  # type: ignore[misc]  # a structural match
    finally:
        loops.close()
