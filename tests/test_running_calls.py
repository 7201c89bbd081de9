"""Calls still running when the work returns: waited for, or left in doubt; never after ENDED.

Work that starts a tool in a thread or a task and returns before it finishes (an
`asyncio.gather` that raised first, a fire-and-forget task, a thread pool) ends only once
those calls have journaled their outcome, or `running_call_wait` has passed: then they are
in doubt, and an outcome that comes later is refused, never appended after the end.

Where the run waits, the straggler is let through exactly when the work has returned
(`SagaScope.close`, which the run calls then, also sets its event), so each test takes the
late path, on every backend; where it does not wait, the test lets it through afterwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import datetime
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    ConfigurationError,
    FailureKind,
    Phase,
    Sagacity,
    SagaOutcome,
    SagaResult,
    SagaStateError,
    compensable,
    compensation,
)
from sagacity._scope import SagaScope
from sagacity._summary import list_doubts, summarize


class Desk:
    """Book rooms, some of them on a thread or in a task that outlives the work."""

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity
        self.undone: list[str] = []
        self.started = threading.Event()
        """The straggling call has started: the work may return now."""
        self.let = threading.Event()
        """The straggling call may finish."""
        self.astarted = asyncio.Event()
        """`started`, for async tools."""
        self.alet = asyncio.Event()
        """`let`, for async tools."""
        self.fail_late = False
        self.tools = {tool.name: tool for tool in sagacity.wrap(self)}

    @compensable(by="cancel")
    def book(self, room: str) -> str:
        return room

    @compensable(by="cancel")
    def book_on_a_thread(self, room: str) -> str:
        self.started.set()
        assert self.let.wait(30), "the test never let the call finish"
        if self.fail_late:
            raise RuntimeError(f"room {room} went at the last moment")
        return room

    @compensable(by="cancel")
    async def abook(self, room: str) -> str:
        return room

    @compensable(by="cancel")
    async def abook_slowly(self, room: str) -> str:
        self.astarted.set()
        await self.alet.wait()
        if self.fail_late:
            raise RuntimeError(f"room {room} went at the last moment")
        return room

    @compensable(by="cancel")
    async def afail(self, room: str) -> str:
        raise RuntimeError(f"room {room} is gone")

    @compensation
    def cancel(self, ctx: CompensationContext) -> None:
        self.undone.append(ctx.result)

    def phases(self, saga_id: str) -> list[tuple[str, str | None]]:
        return [(e.phase.value, e.tool_name) for e in self.sagacity.history(saga_id)]


@pytest.fixture
def let_through_on_close(monkeypatch: pytest.MonkeyPatch) -> Callable[[Desk], None]:
    """Let a desk's straggler finish the moment the run's work has returned."""

    def arm(desk: Desk) -> None:
        close = SagaScope.close

        def closing(scope: SagaScope) -> None:
            close(scope)
            desk.let.set()
            desk.alet.set()

        monkeypatch.setattr(SagaScope, "close", closing)

    return arm


def desk_on(store_url: str, **options: Any) -> Iterator[Desk]:
    sagacity = Sagacity.from_url(store_url, **options)
    try:
        yield Desk(sagacity)
    finally:
        sagacity.close()


@pytest.fixture
def desk(store_url: str) -> Iterator[Desk]:
    """A desk whose sagas wait for running calls (the default wait)."""
    yield from desk_on(store_url)


@pytest.fixture
def impatient(store_url: str) -> Iterator[Desk]:
    """A desk whose sagas do not wait for running calls at all."""
    yield from desk_on(store_url, running_call_wait=0)


def assert_ended_last(desk: Desk, saga_id: str) -> dict[str, Any]:
    """No entry follows ENDED; return its payload."""
    entries = desk.sagacity.history(saga_id)
    assert [e.phase for e in entries].count(Phase.ENDED) == 1
    assert entries[-1].phase is Phase.ENDED
    payload = entries[-1].payload
    assert isinstance(payload, dict)
    return payload


class TestGatherThatRaisedFirst:
    async def test_the_call_left_running_is_waited_for_and_undone(
        self, desk: Desk, let_through_on_close: Callable[[Desk], None]
    ) -> None:
        """Its EXECUTED lands before the walk, which undoes it first (reverse execution)."""
        let_through_on_close(desk)
        tools = desk.tools

        async def work() -> None:
            await tools["abook"]("first")
            late = asyncio.ensure_future(tools["abook_slowly"]("late"))
            await desk.astarted.wait()  # its INTENT is journaled first: it runs
            await asyncio.gather(late, tools["afail"]("gone"))

        result = await desk.sagacity.asaga("s", work)

        assert result.outcome is SagaOutcome.COMPENSATED
        assert str(result.error) == "room gone is gone"
        assert desk.undone == ["late", "first"]
        assert desk.phases("s") == [
            ("INTENT", "abook"),
            ("EXECUTED", "abook"),
            ("INTENT", "abook_slowly"),
            ("INTENT", "afail"),
            ("FAILED", "afail"),
            ("EXECUTED", "abook_slowly"),
            ("COMPENSATING", "abook_slowly"),
            ("COMPENSATED", "abook_slowly"),
            ("COMPENSATING", "abook"),
            ("COMPENSATED", "abook"),
            ("ENDED", None),
        ]
        ended = assert_ended_last(desk, "s")
        assert ended["compensated"] == ["abook_slowly#1", "abook#1"]
        assert ended["in_doubt"] == []

    async def test_a_call_running_past_the_wait_is_in_doubt_and_its_outcome_refused(
        self, impatient: Desk, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Still running when the run ends: in doubt, and its late EXECUTED refused.

        The saga ends NEEDS_ATTENTION with the call listed in doubt; its EXECUTED is
        logged, not journaled, and `resolve` settles it, journaled after the end.
        """
        desk = impatient
        tools = desk.tools
        straggler: asyncio.Future[Any] | None = None

        async def work() -> None:
            nonlocal straggler
            await tools["abook"]("first")
            straggler = asyncio.ensure_future(tools["abook_slowly"]("late"))
            await desk.astarted.wait()  # its INTENT is journaled first: it runs
            await asyncio.gather(straggler, tools["afail"]("gone"))

        result = await desk.sagacity.asaga("s", work)

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert desk.undone == ["first"]
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["abook_slowly#1"]
        before = desk.phases("s")
        assert before == [
            ("INTENT", "abook"),
            ("EXECUTED", "abook"),
            ("INTENT", "abook_slowly"),
            ("INTENT", "afail"),
            ("FAILED", "afail"),
            ("COMPENSATING", "abook"),
            ("COMPENSATED", "abook"),
            ("ENDED", None),
        ]
        assert assert_ended_last(desk, "s")["in_doubt"] == ["abook_slowly#1"]

        desk.alet.set()
        assert straggler is not None
        with (
            caplog.at_level(logging.ERROR, logger="sagacity"),
            pytest.raises(SagaStateError, match="came to EXECUTED after the saga's run"),
        ):
            await straggler
        assert desk.phases("s") == before  # nothing follows ENDED
        assert "'abook_slowly#1' of tool 'abook_slowly' came to EXECUTED" in caplog.text
        assert "'result': 'late'" in caplog.text

        desk.sagacity.resolve("s", "abook_slowly#1", executed=True, result="late", by="ops")
        again = await desk.sagacity.acompensate("s")
        assert again.outcome is SagaOutcome.COMPENSATED
        assert desk.undone == ["first", "late"]
        assert desk.phases("s")[len(before) :] == [
            ("EXECUTED", "abook_slowly"),  # the resolution
            ("COMPENSATING", "abook_slowly"),
            ("COMPENSATED", "abook_slowly"),
            ("ENDED", None),  # a re-walk's end supersedes the last
        ]


class TestFireAndForgetTask:
    async def test_a_late_failure_compensates_instead_of_completing(
        self, desk: Desk, let_through_on_close: Callable[[Desk], None]
    ) -> None:
        """A task still running when the work returned fails later: the saga compensates.

        Its FAILED is journaled before the walk and the end.
        """
        let_through_on_close(desk)
        desk.fail_late = True
        tools = desk.tools
        tasks: list[asyncio.Task[Any]] = []

        async def work() -> str:
            await tools["abook"]("first")
            tasks.append(asyncio.create_task(tools["abook_slowly"]("late")))
            await desk.astarted.wait()
            return "done"

        result = await desk.sagacity.asaga("s", work)

        assert (result.outcome, result.value) == (SagaOutcome.COMPENSATED, "done")
        assert str(result.error) == "room late went at the last moment"
        assert desk.undone == ["first"]
        assert desk.phases("s") == [
            ("INTENT", "abook"),
            ("EXECUTED", "abook"),
            ("INTENT", "abook_slowly"),
            ("FAILED", "abook_slowly"),
            ("COMPENSATING", "abook"),
            ("COMPENSATED", "abook"),
            ("ENDED", None),
        ]
        assert assert_ended_last(desk, "s")["outcome"] == "COMPENSATED"
        with pytest.raises(RuntimeError, match="went at the last moment"):
            await tasks[0]

    async def test_a_late_success_completes(
        self, desk: Desk, let_through_on_close: Callable[[Desk], None]
    ) -> None:
        """The task executed after the work returned: COMPLETED, its EXECUTED before ENDED."""
        let_through_on_close(desk)
        tools = desk.tools
        tasks: list[asyncio.Task[Any]] = []

        async def work() -> str:
            tasks.append(asyncio.create_task(tools["abook_slowly"]("late")))
            await desk.astarted.wait()
            return "done"

        result = await desk.sagacity.asaga("s", work)

        assert result.outcome is SagaOutcome.COMPLETED
        assert desk.phases("s") == [
            ("INTENT", "abook_slowly"),
            ("EXECUTED", "abook_slowly"),
            ("ENDED", None),
        ]
        assert await tasks[0] == "late"

    async def test_a_task_that_starts_after_the_work_returned_is_refused(self, desk: Desk) -> None:
        """A task not yet started when the work returned is not run.

        Nothing of it is journaled, before or after the end.
        """
        tools = desk.tools
        tasks: list[asyncio.Task[Any]] = []

        async def work() -> str:
            await tools["abook"]("first")
            tasks.append(asyncio.create_task(tools["abook"]("never")))
            return "done"

        result = await desk.sagacity.asaga("s", work)

        assert result.outcome is SagaOutcome.COMPLETED
        with pytest.raises(SagaStateError, match="its work returned before tool 'abook'"):
            await tasks[0]
        assert desk.phases("s") == [("INTENT", "abook"), ("EXECUTED", "abook"), ("ENDED", None)]


class TestThreadPool:
    def run_with_pool(self, desk: Desk) -> tuple[Any, concurrent.futures.Future[Any]]:
        """Book, then book again on a pool's thread and return without waiting for it."""
        tools = desk.tools
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        submitted: list[concurrent.futures.Future[Any]] = []

        def work() -> str:
            tools["book"]("first")
            context = contextvars.copy_context()  # as agent frameworks hand the saga on
            submitted.append(pool.submit(context.run, tools["book_on_a_thread"], "late"))
            assert desk.started.wait(30)
            return "done"

        try:
            return desk.sagacity.saga("s", work), submitted[0]
        finally:
            pool.shutdown(wait=False)

    def test_a_late_success_is_journaled_before_the_end(
        self, desk: Desk, let_through_on_close: Callable[[Desk], None]
    ) -> None:
        """COMPLETED once the thread's call executed; its EXECUTED precedes ENDED."""
        let_through_on_close(desk)
        result, future = self.run_with_pool(desk)

        assert result.outcome is SagaOutcome.COMPLETED
        assert future.result(30) == "late"
        assert desk.phases("s") == [
            ("INTENT", "book"),
            ("EXECUTED", "book"),
            ("INTENT", "book_on_a_thread"),
            ("EXECUTED", "book_on_a_thread"),
            ("ENDED", None),
        ]
        assert_ended_last(desk, "s")

    def test_a_late_failure_compensates(
        self, desk: Desk, let_through_on_close: Callable[[Desk], None]
    ) -> None:
        """The thread's call failed after the work returned: the first booking is undone."""
        let_through_on_close(desk)
        desk.fail_late = True
        result, future = self.run_with_pool(desk)

        assert result.outcome is SagaOutcome.COMPENSATED
        assert desk.undone == ["first"]
        with pytest.raises(RuntimeError, match="went at the last moment"):
            future.result(30)
        assert desk.phases("s") == [
            ("INTENT", "book"),
            ("EXECUTED", "book"),
            ("INTENT", "book_on_a_thread"),
            ("FAILED", "book_on_a_thread"),
            ("COMPENSATING", "book"),
            ("COMPENSATED", "book"),
            ("ENDED", None),
        ]
        assert assert_ended_last(desk, "s")["compensated"] == ["book#1"]

    def test_a_thread_past_the_wait_is_in_doubt(self, impatient: Desk) -> None:
        """A thread still running when the run ends leaves its call in doubt.

        NEEDS_ATTENTION, the call counted in doubt and named in the error; its late
        outcome is refused, and nothing follows ENDED.
        """
        desk = impatient
        result, future = self.run_with_pool(desk)

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert desk.undone == ["first"]
        assert "'book_on_a_thread#1' of tool 'book_on_a_thread' were still running" in str(
            result.error
        )
        ended = assert_ended_last(desk, "s")
        assert ended["in_doubt"] == ["book_on_a_thread#1"]
        assert ended["error"]["type"] == "SagaStateError"
        assert summarize(desk.sagacity.journal, "s").in_doubt == 1
        before = desk.phases("s")

        desk.let.set()
        with pytest.raises(SagaStateError, match="after the saga's run had ended"):
            future.result(30)
        assert desk.phases("s") == before


class TestTheWait:
    @pytest.mark.parametrize("wait", [-1, float("nan"), float("inf"), "30", True])
    def test_a_wait_that_is_not_a_finite_number_of_seconds_is_refused(self, wait: Any) -> None:
        """The error names the option and the value."""
        with pytest.raises(ConfigurationError, match="running_call_wait must be"):
            Sagacity.from_url("memory://", running_call_wait=wait)

    def test_the_default_and_a_timedelta(self) -> None:
        """30 seconds by default; a timedelta is taken in seconds."""
        assert Sagacity.from_url("memory://").running_call_wait == 30.0
        given = Sagacity.from_url(
            "memory://", running_call_wait=datetime.timedelta(milliseconds=1500)
        )
        assert given.running_call_wait == 1.5


class TestCallsNotAttempts:
    def retried_three_times(self, sagacity: Sagacity) -> SagaResult:
        """The framework retried call tc-1 three times, each attempt in doubt, and gave up."""

        class Again(Exception):
            pass

        sagacity.add_classifier(lambda e: FailureKind.RETRYABLE if isinstance(e, Again) else None)

        @compensable(by=lambda: None)
        def look(query: str) -> str:
            raise Again("try again")

        (tool,) = sagacity.wrap(look)

        def work() -> None:
            for _ in range(3):
                with contextlib.suppress(Again):  # the framework asks its model again
                    tool.invoke(("shoes",), {}, call_id="tc-1")

        return sagacity.saga("s", work)

    def test_a_call_retried_under_one_id_is_in_doubt_once(
        self, sagacity: Sagacity, caplog: pytest.LogCaptureFixture
    ) -> None:
        """ENDED, the log line, the summary and the doubts list name the call once."""
        with caplog.at_level(logging.WARNING, logger="sagacity"):
            result = self.retried_three_times(sagacity)

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        ended = sagacity.history("s")[-1]
        assert ended.phase is Phase.ENDED
        assert ended.payload["in_doubt"] == ["tc-1"]
        assert "ended NEEDS_ATTENTION with 1 call(s) in doubt: tc-1;" in caplog.text
        assert summarize(sagacity.journal, "s").in_doubt == 1
        (doubt,) = list_doubts(sagacity.journal, saga_id="s")
        assert (doubt.call_id, doubt.seq) == ("tc-1", 5)  # the latest attempt

    @pytest.mark.parametrize("executed", [True, False])
    def test_resolving_the_call_settles_every_attempt(
        self, sagacity: Sagacity, executed: bool
    ) -> None:
        """One `resolve` of tc-1 settles it whole; the next walk ends the saga COMPENSATED."""
        self.retried_three_times(sagacity)

        sagacity.resolve("s", "tc-1", executed=executed, result="found", by="ops")

        assert list_doubts(sagacity.journal, saga_id="s") == []
        resolved = [
            (e.phase.value, e.ref_seq)
            for e in sagacity.history("s")
            if e.payload and isinstance(e.payload, dict) and "resolved_by" in e.payload
        ]
        assert resolved == (
            [("EXECUTED", 5)] if executed else [("FAILED", 1), ("FAILED", 3), ("FAILED", 5)]
        )
        again = sagacity.compensate("s")
        assert again.outcome is SagaOutcome.COMPENSATED
        assert again.compensation is not None
        assert [ref.call_id for ref in again.compensation.compensated] == (
            ["tc-1"] if executed else []
        )
