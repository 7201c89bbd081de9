"""A retry cut short: an async tool's next attempt cancelled before it began, on every backend.

A tool declared with `retries` journals each attempt under one call id. A cancel that
comes while the tool waits out its backoff, or while the next attempt's INTENT commits,
finds that INTENT without a start: FAILED `not_started` says so, and the call, whose last
attempt failed, fails the saga.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from sagacity import CompensationContext, Phase, Sagacity, SagaOutcome, compensable
from sagacity.audit import verify
from tests._postgres import postgres_url_for
from tests.test_async_journal import AsyncAppends, released_after, until, writes_held

CALL_PHASES = (Phase.INTENT, Phase.EXECUTED, Phase.FAILED)

BACKOFF = 600.0
"""Long enough that a test never sees the retry start: only a cancel ends the wait."""


class Payments:
    """Reserve, then charge: the charge drops its connection `drops` times, and is retried."""

    def __init__(self, drops: int = 1) -> None:
        self.drops = drops
        self.attempts = 0
        self.log: list[str] = []

    @compensable(by="release")
    async def reserve(self, sku: str) -> str:
        """Reserve stock."""
        self.log.append(f"reserve {sku}")
        return f"res-{sku}"

    async def release(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(
        by="refund", retries=2, retry_on=ConnectionError, backoff=BACKOFF, max_backoff=BACKOFF
    )
    async def charge(self, amount: str) -> str:
        """Charge a card, retried on a dropped connection."""
        self.attempts += 1
        if self.attempts <= self.drops:
            raise ConnectionError(f"dropped on attempt {self.attempts}")
        self.log.append(f"charge {amount}")
        return f"ch-{amount}"

    async def refund(self, ctx: CompensationContext) -> None:
        self.log.append(f"refund {ctx.result}")


def shown(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None, Any, Any]]:
    """(phase, call id, attempt, kind) of each entry of the saga; a call's attempt and kind."""
    shown: list[tuple[str, str | None, Any, Any]] = []
    for e in sagacity.history(saga_id):
        payload = e.payload if e.phase in CALL_PHASES and isinstance(e.payload, dict) else {}
        shown.append((e.phase.name, e.call_id, payload.get("attempt"), payload.get("kind")))
    return shown


def retry_journaled(sagacity: Sagacity, saga_id: str) -> Callable[[], bool]:
    """True once the second attempt's INTENT is in the journal: the backoff is under way."""

    def journaled() -> bool:
        entries = sagacity.history(saga_id)
        last = entries[-1] if entries else None
        return (
            last is not None
            and last.phase is Phase.INTENT
            and isinstance(last.payload, dict)
            and last.payload.get("attempt") == 2
        )

    return journaled


CUT_RETRY = [
    ("INTENT", "reserve#1", None, None),
    ("EXECUTED", "reserve#1", None, None),
    ("INTENT", "charge#1", None, None),
    ("FAILED", "charge#1", 1, "retried"),
    ("INTENT", "charge#1", 2, None),
    ("FAILED", "charge#1", 2, "not_started"),
    ("COMPENSATING", "reserve#1", None, None),
    ("COMPENSATED", "reserve#1", None, None),
    ("ENDED", None, None, None),
]
"""The journal of a saga whose charge was cancelled in its backoff, and then compensated."""


class TestCancelledInTheBackoff:
    async def test_a_cancelled_task_journals_the_attempt_not_started_and_fails_the_saga(
        self, sagacity: Sagacity
    ) -> None:
        """The work cancels the charge's task in its backoff and returns: COMPENSATED.

        The second attempt's INTENT is answered by FAILED `not_started` (nothing is in
        doubt), the tool ran once, and the reservation is undone: the call failed.
        """
        payments = Payments()
        tools = {tool.name: tool for tool in sagacity.wrap(payments)}
        cancelled: list[BaseException] = []

        async def work() -> str:
            await tools["reserve"]("SKU-1")
            charging = asyncio.create_task(tools["charge"]("10.00"))
            await until(retry_journaled(sagacity, "cut"), "the retry's INTENT is journaled")
            charging.cancel()
            try:
                await charging
            except asyncio.CancelledError as error:
                cancelled.append(error)
            return "done"

        result = await sagacity.asaga("cut", work)

        assert [type(error) for error in cancelled] == [asyncio.CancelledError]
        assert (result.outcome, result.value, payments.attempts) == (
            SagaOutcome.COMPENSATED,
            "done",
            1,
        )
        assert isinstance(result.error, ConnectionError)
        assert str(result.error) == "dropped on attempt 1"
        assert result.compensation is not None
        assert result.compensation.in_doubt == []
        assert payments.log == ["reserve SKU-1", "release res-SKU-1"]
        assert shown(sagacity, "cut") == CUT_RETRY
        ended = sagacity.history("cut")[-1].payload
        assert (ended["outcome"], ended["error"]["type"]) == ("COMPENSATED", "ConnectionError")
        assert verify(sagacity.journal).ok

    async def test_a_timeout_in_the_backoff_ends_the_same_way(self, sagacity: Sagacity) -> None:
        """`asyncio.timeout` around the call, firing in its backoff: the same journal.

        The work catches the TimeoutError and goes on as if nothing had happened; the saga
        is compensated all the same.
        """
        payments = Payments()
        tools = {tool.name: tool for tool in sagacity.wrap(payments)}

        async def expire_in_the_backoff(deadline: asyncio.Timeout) -> None:
            await until(retry_journaled(sagacity, "cut"), "the retry's INTENT is journaled")
            deadline.reschedule(asyncio.get_running_loop().time())

        async def work() -> str:
            await tools["reserve"]("SKU-1")
            expiring: list[asyncio.Task[None]] = []
            try:
                async with asyncio.timeout(None) as deadline:
                    expiring.append(asyncio.create_task(expire_in_the_backoff(deadline)))
                    await tools["charge"]("10.00")
            except TimeoutError:
                pass
            await asyncio.gather(*expiring)
            return "timed out, went on"

        result = await sagacity.asaga("cut", work)

        assert (result.outcome, result.value, payments.attempts) == (
            SagaOutcome.COMPENSATED,
            "timed out, went on",
            1,
        )
        assert shown(sagacity, "cut") == CUT_RETRY
        assert payments.log == ["reserve SKU-1", "release res-SKU-1"]

    async def test_under_a_scope_that_cancels_again_the_not_started_is_journaled(
        self, sagacity: Sagacity
    ) -> None:
        """Under an anyio scope, which cancels at every await, FAILED `not_started` is committed."""
        payments = Payments()
        tools = {tool.name: tool for tool in sagacity.wrap(payments)}
        scope = anyio.CancelScope()

        async def work() -> str:
            await tools["reserve"]("SKU-1")

            async def cancel_in_the_backoff() -> None:
                await until(retry_journaled(sagacity, "cut"), "the retry's INTENT is journaled")
                scope.cancel()

            cancelling = asyncio.create_task(cancel_in_the_backoff())
            with scope:
                await tools["charge"]("10.00")
            await cancelling
            return "scope exited"

        result = await sagacity.asaga("cut", work)

        assert (result.outcome, result.value) == (SagaOutcome.COMPENSATED, "scope exited")
        assert shown(sagacity, "cut") == CUT_RETRY

    async def test_the_whole_saga_cancelled_leaves_nothing_in_doubt(
        self, sagacity: Sagacity
    ) -> None:
        """The saga's own task cancelled in the backoff: no ENDED, and no INTENT unanswered.

        A compensation walk afterwards finds nothing in doubt and undoes the reservation.
        """
        payments = Payments()
        tools = {tool.name: tool for tool in sagacity.wrap(payments)}

        async def work() -> str:
            await tools["reserve"]("SKU-1")
            return str(await tools["charge"]("10.00"))

        running = asyncio.create_task(sagacity.asaga("cut", work))
        await until(retry_journaled(sagacity, "cut"), "the retry's INTENT is journaled")
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

        assert shown(sagacity, "cut") == CUT_RETRY[:6]
        compensated = await sagacity.acompensate("cut")
        assert compensated.outcome is SagaOutcome.COMPENSATED
        assert compensated.compensation is not None
        assert compensated.compensation.in_doubt == []
        assert payments.log == ["reserve SKU-1", "release res-SKU-1"]


class TestCancelledAsTheFailureCommits:
    async def test_a_retried_failure_committed_under_a_cancel_fails_the_saga(
        self, shared_store_url: str
    ) -> None:
        """Cancelled while the first attempt's FAILED commits: no retry, and the saga fails.

        The FAILED lands (its kind says the attempt was to be retried), no next attempt is
        journaled or run, and the saga, whose work swallowed the cancel, is compensated.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        appends = AsyncAppends(sagacity)
        held = contextlib.ExitStack()
        failing = asyncio.Event()

        class HeldPayments(Payments):
            @compensable(by="refund", retries=2, retry_on=ConnectionError, backoff=0.0)
            async def charge(self, amount: str) -> str:
                """Charge a card; its failure's FAILED waits for the journal's writes."""
                let_go = held.enter_context(writes_held(shared_store_url, sagacity, "cut"))
                held.enter_context(released_after(let_go))
                failing.set()
                return await super().charge(amount)

        payments = HeldPayments()
        tools = {tool.name: tool for tool in sagacity.wrap(payments)}

        async def work() -> str:
            await tools["reserve"]("SKU-1")
            charging = asyncio.create_task(tools["charge"]("10.00"))
            await failing.wait()
            await until(lambda: appends.in_flight > 0, "the FAILED is in flight")
            charging.cancel()
            await asyncio.sleep(0.05)
            held.close()
            with contextlib.suppress(asyncio.CancelledError):
                await charging
            return "done"

        try:
            result = await sagacity.asaga("cut", work)
            assert (result.outcome, result.value, payments.attempts) == (
                SagaOutcome.COMPENSATED,
                "done",
                1,
            )
            assert isinstance(result.error, ConnectionError)
            assert shown(sagacity, "cut") == [*CUT_RETRY[:4], *CUT_RETRY[6:]]
        finally:
            held.close()
            sagacity.close()


class SeqHeld:
    """PostgreSQL: another transaction holds, uncommitted, one row of a saga's journal.

    An append of that seq waits for it; the appends before it commit.
    """

    def __init__(self, sagacity: Sagacity, saga_id: str, seq: int) -> None:
        import psycopg

        database = sagacity.journal.database  # type: ignore[attr-defined]
        self.conn = psycopg.connect(database.settings.conninfo, autocommit=False)
        self.watch = psycopg.connect(database.settings.conninfo, autocommit=True)
        self.conn.execute(
            f"INSERT INTO {database.tables.journal} VALUES "
            "(%s, %s, 'INTENT', NULL, NULL, NULL, 'null', '', '', '')",
            (saga_id, seq),
        )

    def waiting(self) -> bool:
        """Whether an append waits for the held row."""
        (count,) = self.watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (self.conn.info.backend_pid,),
        ).fetchone()  # type: ignore[misc]
        return bool(count)

    def let_go(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()
        self.watch.close()


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh schema of the PostgreSQL test server."""
    yield from postgres_url_for(request)


class TestCancelledAsTheRetryCommits:
    async def test_a_retry_intent_committed_under_a_cancel_is_answered_not_started(
        self, postgres_url: str
    ) -> None:
        """PostgreSQL: cancelled while the second attempt's INTENT commits, FAILED follows.

        The retried FAILED lands, the next INTENT waits for the database and is cancelled
        there; committed all the same, it is answered by FAILED `not_started`. The tool
        runs once, and the saga, whose work swallowed the cancel, is compensated.
        """
        sagacity = Sagacity.from_url(postgres_url)
        held = contextlib.ExitStack()
        holds: list[SeqHeld] = []
        failing = asyncio.Event()

        class HeldPayments(Payments):
            @compensable(by="refund", retries=2, retry_on=ConnectionError, backoff=0.0)
            async def charge(self, amount: str) -> str:
                """Charge a card; the retry's INTENT (seq 5) waits for the database."""
                holds.append(SeqHeld(sagacity, "cut", 5))
                held.callback(holds[0].close)
                held.enter_context(released_after(holds[0].let_go))
                failing.set()
                return await super().charge(amount)

        payments = HeldPayments()
        tools = {tool.name: tool for tool in sagacity.wrap(payments)}

        async def work() -> str:
            await tools["reserve"]("SKU-1")
            charging = asyncio.create_task(tools["charge"]("10.00"))
            await failing.wait()
            await until(holds[0].waiting, "the next INTENT waits for the held row")
            charging.cancel()
            await asyncio.sleep(0.05)
            held.close()
            with contextlib.suppress(asyncio.CancelledError):
                await charging
            return "done"

        try:
            result = await sagacity.asaga("cut", work)
            assert (result.outcome, result.value, payments.attempts) == (
                SagaOutcome.COMPENSATED,
                "done",
                1,
            )
            assert isinstance(result.error, ConnectionError)
            assert shown(sagacity, "cut") == CUT_RETRY
        finally:
            held.close()
            sagacity.close()
