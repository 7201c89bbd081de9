"""Group commit's turns: alone on the caller's thread, together while a commit is in flight."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import types
from collections.abc import Sequence
from typing import Any

import pytest

from sagacity.journal import Phase
from sagacity.journal._group import AppendRequest, CommittedThenCancelled, GroupCommit


class Recorder:
    """A stand-in database: commits return the request; the first commit waits on cue."""

    def __init__(self) -> None:
        self.first_started = threading.Event()
        self.release = threading.Event()
        self.alone: list[tuple[str, str]] = []
        self.batches: list[list[str]] = []

    def one(self, request: AppendRequest) -> Any:
        self.alone.append((request.saga_id, threading.current_thread().name))
        if request.saga_id == "first":
            self.first_started.set()
            assert self.release.wait(10)
        if request.saga_id == "refused":
            raise ValueError("refused alone")
        return request

    def many(self, requests: Sequence[AppendRequest]) -> list[Any]:
        self.batches.append([r.saga_id for r in requests])
        return [ValueError("refused in batch") if r.saga_id == "bad" else r for r in requests]


async def commit_held(group: GroupCommit, recorder: Recorder) -> threading.Thread:
    """A thread whose append of "first" is committing, held until `recorder.release`."""
    blocker = threading.Thread(target=group.append, args=(AppendRequest("first", Phase.INTENT),))
    blocker.start()
    assert await asyncio.to_thread(recorder.first_started.wait, 10)
    return blocker


def entries_group(recorder: Recorder) -> GroupCommit:
    """A group over `recorder` whose commits return entries, as far as a cancel needs one."""

    def entry(request: AppendRequest) -> Any:
        return types.SimpleNamespace(saga_id=request.saga_id, seq=1)

    return GroupCommit(
        lambda r: entry(recorder.one(r)),
        lambda rs: [entry(r) for r in recorder.many(rs)],
        name="test",
    )


def wait_until(condition: Any) -> None:
    for _ in range(1000):
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError("timed out")


class TestGroupCommit:
    def test_a_caller_alone_commits_on_its_own_thread(self) -> None:
        """No commit in flight: the append is committed by the caller, no thread hop."""
        recorder = Recorder()
        group = GroupCommit(recorder.one, recorder.many, name="test")
        request = AppendRequest("solo", Phase.INTENT)
        assert group.append(request) is request
        assert recorder.alone == [("solo", threading.current_thread().name)]
        assert recorder.batches == []

    def test_appends_during_a_commit_go_together_each_getting_its_own_result(self) -> None:
        """Sync and async appends queued behind a commit are one batch, in arrival order.

        Each caller gets its own entry, and the one the batch refused gets its own error.
        """
        recorder = Recorder()
        group = GroupCommit(recorder.one, recorder.many, name="test")
        results: dict[str, Any] = {}

        def append(saga_id: str) -> None:
            try:
                results[saga_id] = group.append(AppendRequest(saga_id, Phase.INTENT)).saga_id
            except ValueError as error:
                results[saga_id] = str(error)

        first = threading.Thread(target=append, args=("first",))
        first.start()
        assert recorder.first_started.wait(10)
        followers = []
        for saga_id in ("b", "bad"):
            followers.append(threading.Thread(target=append, args=(saga_id,)))
            followers[-1].start()
            queued = len(followers)
            wait_until(lambda n=queued: len(group._queue) == n)
        submitted = group.submit(AppendRequest("async", Phase.INTENT))
        recorder.release.set()
        for thread in (first, *followers):
            thread.join(10)
        assert submitted.result(10).saga_id == "async"
        assert recorder.batches == [["b", "bad", "async"]]
        assert results == {"first": "first", "b": "b", "bad": "refused in batch"}
        stats = group.stats
        assert (stats.commits, stats.batched, stats.largest) == (2, 3, 3)
        group.close()

    async def test_an_async_append_is_led_by_the_writer_thread(self) -> None:
        """From the loop, the append is committed on the writer thread, never the loop's."""
        recorder = Recorder()
        group = GroupCommit(recorder.one, recorder.many, name="test")
        entry = await group.aappend(AppendRequest("a", Phase.INTENT))
        assert entry.saga_id == "a"
        ((saga, thread),) = recorder.alone
        assert (saga, thread) == ("a", "test-writer")
        with pytest.raises(ValueError, match="refused alone"):
            await group.aappend(AppendRequest("refused", Phase.INTENT))
        group.close()

    async def test_an_append_committed_before_its_caller_waits_is_returned(self) -> None:
        """The writer may commit before the loop's task starts waiting: it is not lost."""
        recorder = Recorder()
        group = GroupCommit(recorder.one, recorder.many, name="test")
        submit = group.submit

        def committed_at_once(request: AppendRequest) -> Any:
            future = submit(request)
            future.result(10)  # the loop waits here: the writer is done before it returns
            return future

        group.submit = committed_at_once  # type: ignore[method-assign]
        entry = await asyncio.wait_for(group.aappend(AppendRequest("a", Phase.INTENT)), 10)
        assert entry.saga_id == "a"
        group.close()

    async def test_cancelled_once_committed_but_not_yet_woken_it_gets_its_entry(self) -> None:
        """A cancel between the commit and the task's turn: `CommittedThenCancelled`.

        The wake-up that arrives for the cancelled wait is dropped without an error.
        """
        recorder = Recorder()
        group = entries_group(recorder)
        errors: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context))
        blocker = await commit_held(group, recorder)
        waiting = asyncio.ensure_future(group.aappend(AppendRequest("x", Phase.INTENT)))
        await asyncio.sleep(0.05)  # queued behind "first"
        recorder.release.set()
        wait_until(lambda: len(recorder.alone) == 2 and not group._in_flight)  # blocks the loop
        waiting.cancel()  # its wake-up is queued on the loop, not yet run
        with pytest.raises(CommittedThenCancelled) as kept:
            await waiting
        await asyncio.to_thread(blocker.join, 10)
        group.close()
        await asyncio.sleep(0.01)
        assert kept.value.entry.saga_id == "x"
        assert errors == []

    async def test_a_cancelled_wait_for_a_queued_append_withdraws_it(self) -> None:
        """Cancelled before its batch starts, an append is never committed."""
        recorder = Recorder()
        group = GroupCommit(recorder.one, recorder.many, name="test")
        blocker = await commit_held(group, recorder)
        waiting = asyncio.ensure_future(group.aappend(AppendRequest("x", Phase.INTENT)))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        recorder.release.set()
        await asyncio.to_thread(blocker.join, 10)
        group.close()
        assert [saga for saga, _ in recorder.alone] == ["first"]
        assert recorder.batches == []

    async def test_a_cancelled_wait_for_a_queued_outcome_keeps_it(self) -> None:
        """An outcome is known: cancelled before its batch starts, it is committed all the same.

        The caller gets `CommittedThenCancelled` with the entry once it is durable.
        """
        recorder = Recorder()
        group = entries_group(recorder)
        blocker = await commit_held(group, recorder)
        waiting = asyncio.ensure_future(group.aappend(AppendRequest("x", Phase.EXECUTED)))
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.sleep(0.05)
        recorder.release.set()
        with pytest.raises(CommittedThenCancelled) as kept:
            await waiting
        await asyncio.to_thread(blocker.join, 10)
        group.close()
        assert kept.value.entry.saga_id == "x"
        committed_sagas = [saga for saga, _ in recorder.alone]
        committed_sagas += [saga for batch in recorder.batches for saga in batch]
        assert committed_sagas == ["first", "x"]

    def test_an_append_committed_after_its_loop_closed_wakes_no_one_and_the_writer_goes_on(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A loop closed with its task's append queued: the commit does not fail on it.

        The append is committed (it was asked for), the writer thread logs no error, and
        it commits the next append from another loop.
        """
        recorder = Recorder()
        group = GroupCommit(recorder.one, recorder.many, name="test")
        blocker = threading.Thread(
            target=group.append, args=(AppendRequest("first", Phase.INTENT),)
        )
        blocker.start()
        assert recorder.first_started.wait(10)
        loop = asyncio.new_event_loop()
        task = loop.create_task(group.aappend(AppendRequest("x", Phase.INTENT)))
        loop.run_until_complete(_turns(5))
        wait_until(lambda: len(group._queue) == 1)
        loop.close()  # the task never finishes: its loop is gone
        recorder.release.set()
        blocker.join(10)
        wait_until(lambda: [saga for saga, _ in recorder.alone] == ["first", "x"])
        assert not task.done()
        assert asyncio.run(group.aappend(AppendRequest("next", Phase.INTENT))).saga_id == "next"
        group.close()
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)
