"""`asyncio.timeout` around a tool call ends as its TimeoutError, whatever the call was doing.

When the deadline passes while the call's INTENT or outcome is being committed, sagacity
sees the append through and journals what it must before the cancel goes on. The caller
then gets a plain `CancelledError`, which the timeout turns into its TimeoutError (Python
3.11's takes no subclass of it): the work catches that and goes on, as it would have
without sagacity.
"""

from __future__ import annotations

import asyncio

from sagacity import Phase, Sagacity, SagaOutcome, compensable
from sagacity.audit import verify
from tests.test_async_journal import AsyncAppends, LetIn, released_after, until, writes_held


class TestATimeoutAsAnAppendCommits:
    async def test_a_timeout_as_the_intent_commits_is_the_works_timeout_error(
        self, shared_store_url: str
    ) -> None:
        """The deadline passes as the INTENT commits: not started, and the work goes on.

        The INTENT lands, FAILED `not_started` answers it, and the work's `except
        TimeoutError` catches the timeout: the saga ends COMPLETED, nothing having run.
        """
        sagacity = Sagacity.from_url(shared_store_url)
        ran: list[str] = []

        @compensable(by=lambda: None)
        async def reserve(sku: str) -> str:
            ran.append(sku)
            return f"res-{sku}"

        (tool,) = sagacity.wrap(reserve)
        appends = AsyncAppends(sagacity)
        deadlines: list[asyncio.Timeout] = []

        async def reserve_in_time() -> str:
            try:
                async with asyncio.timeout(None) as deadline:
                    deadlines.append(deadline)
                    return str(await tool("SKU-1"))
            except TimeoutError:
                return "timed out"

        work = LetIn(reserve_in_time)
        try:
            running = asyncio.create_task(sagacity.asaga("late", work))
            await work.entered.wait()
            with (
                writes_held(shared_store_url, sagacity, "late") as let_go,
                released_after(let_go),
            ):
                work.go.set()
                await until(lambda: appends.in_flight > 0, "the INTENT is in flight")
                (deadline,) = deadlines
                deadline.reschedule(asyncio.get_running_loop().time())
                await asyncio.sleep(0.05)
                let_go()
                result = await running
            assert (result.outcome, result.value, ran) == (
                SagaOutcome.COMPLETED,
                "timed out",
                [],
            )
            entries = sagacity.history("late")
            assert [e.phase for e in entries] == [Phase.INTENT, Phase.FAILED, Phase.ENDED]
            assert entries[1].payload["kind"] == "not_started"
            assert verify(sagacity.journal).ok
        finally:
            sagacity.close()
