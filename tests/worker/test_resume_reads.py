"""A resume reads the saga's journal once, and what is appended meanwhile still stops it.

The worker's read that found the decision stands for the read under the lease when the
lease's take finds the same head, and the approved call's check uses it: an entry
appended after that read (a rejection, another worker's INTENT) makes the INTENT's
conditional append fail, and the check runs again on a fresh read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sagacity import Phase, Reversibility, Sagacity, Worker, compensable
from sagacity.errors import ApprovalRejectedError
from sagacity.journal import JournalEntry
from tests.worker._shop import Shop, pause


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
def sagacity(store_url: str, shop: Shop) -> Iterator[Sagacity]:
    instance = Sagacity.from_url(store_url)
    instance.wrap(shop)
    yield instance
    instance.close()


class _Traced:
    """A worker whose resumes count their reads and appends of one saga's journal.

    `before_lease` and `after_lease` run just before and just after its lease is taken.
    """

    def __init__(self, sagacity: Sagacity, saga_id: str) -> None:
        self.reads = 0
        self.resuming = False
        self.appended: list[Phase] = []
        """The phases this worker's resumes tried to append."""
        self.before_lease: Callable[[], None] | None = None
        self.after_lease: Callable[[], None] | None = None
        self.worker = Worker(sagacity)
        journal = sagacity.journal
        entries, acquire, resume = journal.entries, journal.acquire_lease, self.worker.resume
        append = journal.append

        def appending(saga: str, phase: Phase, *args: Any, **kwargs: Any) -> JournalEntry:
            if saga == saga_id and self.resuming:
                self.appended.append(phase)
            return append(saga, phase, *args, **kwargs)

        def counted(saga: str, *args: Any, **kwargs: Any) -> list[JournalEntry]:
            if saga == saga_id and self.resuming:  # not the listing of what is due
                self.reads += 1
            return entries(saga, *args, **kwargs)

        def resuming(saga: str) -> bool:
            self.resuming = True
            try:
                return resume(saga)
            finally:
                self.resuming = False

        def acquired(saga: str, *args: Any, **kwargs: Any) -> Any:
            if saga == saga_id and self.before_lease is not None:
                self.before_lease()
            lease = acquire(saga, *args, **kwargs)
            if saga == saga_id and self.after_lease is not None:
                self.after_lease()
            return lease

        journal.entries = counted  # type: ignore[method-assign]
        journal.acquire_lease = acquired  # type: ignore[method-assign]
        journal.append = appending  # type: ignore[method-assign]
        aacquire = getattr(journal, "aacquire_lease", None)
        if aacquire is not None:  # PostgreSQL takes the lease of an async resume on its loop

            async def aacquired(saga: str, *args: Any, **kwargs: Any) -> Any:
                if saga == saga_id and self.before_lease is not None:
                    self.before_lease()
                lease = await aacquire(saga, *args, **kwargs)
                if saga == saga_id and self.after_lease is not None:
                    self.after_lease()
                return lease

            journal.aacquire_lease = aacquired  # type: ignore[attr-defined]
        self.worker.resume = resuming  # type: ignore[method-assign]


def _awaiting(sagacity: Sagacity, saga_id: str) -> JournalEntry:
    return next(e for e in sagacity.history(saga_id) if e.phase is Phase.AWAITING_APPROVAL)


def _reject_raw(sagacity: Sagacity, saga_id: str) -> Callable[[], None]:
    """An unfenced REJECTED of the saga's request, as a writer outside the lease appends it."""
    asked = _awaiting(sagacity, saga_id)

    def reject() -> None:
        sagacity.journal.append(
            saga_id,
            Phase.REJECTED,
            ref_seq=asked.seq,
            payload={
                "request_id": asked.payload["request_id"],
                "approver": "bob",
                "reason": "wrong account",
            },
        )

    return reject


def _wire_intents(sagacity: Sagacity, saga_id: str) -> list[JournalEntry]:
    """The INTENTs of the approved call's tool (`wire`, or the async `send`)."""
    return [
        e
        for e in sagacity.history(saga_id)
        if e.phase is Phase.INTENT and e.tool_name in ("wire", "send")
    ]


class TestOneRead:
    def test_an_approved_call_resumes_on_the_read_that_found_it(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """Nothing appended between the worker's read and the INTENT: one read, one run."""
        pause(sagacity, "r-1")
        sagacity.approve("r-1", approver="alice")
        traced = _Traced(sagacity, "r-1")
        assert traced.worker.run_once() == 1
        assert shop.log == ["hold 100", "wire 100 to acme"]
        assert traced.reads == 1
        assert [e.phase.value for e in sagacity.history("r-1")][-3:] == [
            "INTENT",
            "EXECUTED",
            "ENDED",
        ]

    def test_an_entry_before_the_lease_is_read_under_it(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """Rejected between the worker's read and the lease: the head moved, so it reads again.

        The read under the lease finds the rejection: the approved call is not run.
        """
        pause(sagacity, "r-1")
        sagacity.approve("r-1", approver="alice")
        traced = _Traced(sagacity, "r-1")
        traced.before_lease = _reject_raw(sagacity, "r-1")
        traced.worker.run_once()
        assert traced.reads == 2
        assert Phase.INTENT not in traced.appended  # the decision changed: not even tried
        assert "wire 100 to acme" not in shop.log
        assert _wire_intents(sagacity, "r-1") == []

    def test_two_workers_racing_on_a_rejection_compensate_once(
        self, shared_store_url: str, shop: Shop
    ) -> None:
        """Another worker compensates the rejected saga between this one's read and its lease.

        The lease's take finds the head moved: this worker reads again, finds the saga
        ended and does nothing (the undo is not run twice).
        """
        with Sagacity.from_url(shared_store_url) as sagacity:
            sagacity.wrap(shop)
            pause(sagacity, "r-1")
            with Sagacity.from_url(shared_store_url) as elsewhere:  # it has no tools
                elsewhere.reject("r-1", approver="bob", reason="wrong account")
            traced = _Traced(sagacity, "r-1")
            other = Worker(sagacity)

            def other_first() -> None:
                traced.before_lease = None
                assert other.run_once() == 1

            traced.before_lease = other_first
            assert traced.worker.run_once() == 0
            assert shop.log == ["hold 100", "release hold-100"]
            assert sagacity.history("r-1")[-1].payload["outcome"] == "COMPENSATED"


class TestAppendedAfterTheRead:
    def test_a_rejection_after_the_lease_stops_the_call(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """Rejected after the lease's take, before the INTENT: the tool never runs.

        The INTENT is refused (the head moved), then the check, on a fresh read, refuses
        the call.
        """
        pause(sagacity, "r-1")
        sagacity.approve("r-1", approver="alice")
        traced = _Traced(sagacity, "r-1")
        traced.after_lease = _reject_raw(sagacity, "r-1")
        traced.worker.run_once()
        assert "wire 100 to acme" not in shop.log
        assert _wire_intents(sagacity, "r-1") == []
        assert traced.reads >= 2  # read again once the INTENT was refused

    def test_another_writers_intent_after_the_lease_runs_the_call_once(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """Another worker's INTENT lands after the lease's take: this worker runs nothing.

        Its INTENT is refused (the head moved) and, on a fresh read, the approval is spent.
        """
        pause(sagacity, "r-1")
        sagacity.approve("r-1", approver="alice")
        asked = _awaiting(sagacity, "r-1")
        traced = _Traced(sagacity, "r-1")

        def other_intent() -> None:
            sagacity.journal.append(
                "r-1",
                Phase.INTENT,
                tool_name="wire",
                call_id=asked.call_id,
                payload={
                    "input": asked.payload["input"],
                    "reversibility": "IRREVERSIBLE",
                    "request_id": asked.payload["request_id"],
                },
            )

        traced.after_lease = other_intent
        traced.worker.run_once()
        assert "wire 100 to acme" not in shop.log
        assert len(_wire_intents(sagacity, "r-1")) == 1  # the other writer's alone


class _AsyncShop:
    """An IRREVERSIBLE tool of async code: the worker resumes it through `aresume`."""

    def __init__(self) -> None:
        self.log: list[str] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def send(self, to: str) -> str:
        """Send a payment."""
        self.log.append(f"send to {to}")
        return "sent"


class TestAsyncResume:
    def test_an_async_call_resumes_on_the_read_that_found_it(self, store_url: str) -> None:
        """The async resume uses the worker's read too; a rejection after the lease stops it."""
        shop = _AsyncShop()
        with Sagacity.from_url(store_url) as sagacity:
            sagacity.wrap(shop)
            send = sagacity.tool("send")
            for saga in ("a-1", "a-2"):

                async def work() -> str:
                    return str(await send(to="acme"))

                result = asyncio.run(sagacity.asaga(saga, work))
                assert result.outcome.value == "AWAITING_APPROVAL", result
                sagacity.approve(saga, approver="alice")
            traced = _Traced(sagacity, "a-1")
            assert traced.worker.resume("a-1") is True
            assert shop.log == ["send to acme"]
            assert traced.reads == 1
            rejected = _Traced(sagacity, "a-2")
            rejected.after_lease = _reject_raw(sagacity, "a-2")
            with pytest.raises(ApprovalRejectedError):
                rejected.worker.resume("a-2")
            assert shop.log == ["send to acme"]
            assert _wire_intents(sagacity, "a-2") == []
