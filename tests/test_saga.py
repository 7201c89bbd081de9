"""`Sagacity.saga` / `asaga`: the saga scope, outcomes, the ENDED entry and exact journals."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from sagacity import (
    CallRef,
    CompensationReport,
    InvalidIdError,
    NestedSagaError,
    Phase,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    compensable,
    current_call,
)
from sagacity.testing import memory_sagacity
from tests._shop import Shop, journal_failure, journal_intent, order_then_wire, phases, tools_of


class TestSagaOutcomes:
    def test_happy_saga_journal(self, sagacity: Sagacity) -> None:
        """A saga whose calls succeed journals INTENT/EXECUTED pairs and ENDED COMPLETED."""
        tools = tools_of(sagacity, Shop())

        def work() -> str:
            tools["reserve_inventory"]("SKU-1", 2)
            tools["charge_card"]("20.00", "visa-1")
            return "Order placed"

        result = sagacity.saga("order-1", work)
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == "Order placed"
        assert result.error is None
        assert result.compensation is None
        assert result.pending == []
        entries = sagacity.history("order-1")
        assert phases(entries) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("INTENT", "charge_card", None),
            ("EXECUTED", "charge_card", 3),
            ("ENDED", None, None),
        ]
        assert entries[1].payload == {"result": "res-SKU-1-2"}
        assert entries[4].payload == {"outcome": "COMPLETED"}
        assert [e.seq for e in entries] == [1, 2, 3, 4, 5]

    def test_compensated_saga_journal(self, sagacity: Sagacity) -> None:
        """FAILED, then each undo's COMPENSATING and COMPENSATED, newest first, then ENDED."""
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["reserve_inventory"]("SKU-1", 2)
            tools["charge_card"]("20.00", "visa-1")
            tools["ship"]("order-1")

        result = sagacity.saga("order-1", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, RuntimeError)
        assert str(result.error) == "courier down"
        entries = sagacity.history("order-1")
        assert phases(entries) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("INTENT", "charge_card", None),
            ("EXECUTED", "charge_card", 3),
            ("INTENT", "ship", None),
            ("FAILED", "ship", 5),
            ("COMPENSATING", "charge_card", 4),
            ("COMPENSATED", "charge_card", 4),
            ("COMPENSATING", "reserve_inventory", 2),
            ("COMPENSATED", "reserve_inventory", 2),
            ("ENDED", None, None),
        ]
        assert entries[-1].payload == {
            "outcome": "COMPENSATED",
            "error": {"type": "RuntimeError", "message": "courier down"},
            "compensated": ["charge_card#1", "reserve_inventory#1"],
            "compensation_failed": [],
            "in_doubt": [],
        }
        assert shop.log == [
            "reserve SKU-1",
            "charge 20.00",
            "refund ch-20.00",
            "release res-SKU-1-2",
        ]

    def test_swallowed_failure_still_compensates(self, sagacity: Sagacity) -> None:
        """Work that catches a tool's failure and returns normally still ends COMPENSATED."""
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)

        def agent() -> str:
            tools["reserve_inventory"]("SKU-1")
            # The framework makes the error a message; the model says it succeeded.
            with contextlib.suppress(RuntimeError):
                tools["ship"]("order-1")
            return "Your order has shipped!"

        result = sagacity.saga("order-1", agent)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.value == "Your order has shipped!"
        assert repr(result.error) == "RuntimeError('courier down')"  # swallowed, still known
        assert result.compensation == CompensationReport(
            saga_id="order-1",
            compensated=[
                CallRef(seq=2, tool_name="reserve_inventory", call_id="reserve_inventory#1")
            ],
            failed=[],
            skipped=[],
            in_doubt=[],
        )
        assert shop.log == ["reserve SKU-1", "release res-SKU-1-1"]

    def test_work_that_raises_is_reported_not_raised(self) -> None:
        """saga() reports a failed saga: the work's exception is in `error`."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())
        boom = KeyError("model output unparsable")

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            raise boom

        result = sagacity.saga("s", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.error is boom
        assert result.value is None

    def test_an_empty_saga_completes(self) -> None:
        """A saga that called no tool journals only ENDED."""
        sagacity = memory_sagacity()
        result = sagacity.saga("nothing", lambda: 42)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, 42)
        assert phases(sagacity.history("nothing")) == [("ENDED", None, None)]

    def test_awaiting_approval_is_an_outcome_without_ended(self, sagacity: Sagacity) -> None:
        """A saga paused on an IRREVERSIBLE call reports AWAITING_APPROVAL and stays open."""
        shop = Shop()
        tools = tools_of(sagacity, shop)
        result = sagacity.saga("wire-1", order_then_wire(tools))
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert str(result.value).startswith("[AWAITING_APPROVAL] send_wire_transfer was not run")
        (request,) = result.pending
        assert (request.tool_name, request.input) == (
            "send_wire_transfer",
            {"amount": "900.00", "to": "ACME"},
        )
        assert shop.calls["send_wire_transfer"] == 0
        assert phases(sagacity.history("wire-1")) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("AWAITING_APPROVAL", "send_wire_transfer", None),
        ]

    def test_work_returning_a_coroutine_is_an_error(self) -> None:
        """Async work given to saga() is not silently dropped: it fails and says so."""
        sagacity = memory_sagacity()

        async def work() -> None: ...

        result = sagacity.saga("s", work)
        assert isinstance(result.error, TypeError)
        assert "asaga" in str(result.error)
        assert result.outcome is SagaOutcome.COMPENSATED


class TestSagaStates:
    def test_reusing_an_ended_saga_id_raises(self, sagacity: Sagacity) -> None:
        """A saga id is used once: after ENDED, saga() raises SagaStateError."""
        sagacity.saga("s", lambda: None)
        with pytest.raises(SagaStateError, match="'s' ended COMPLETED at seq 1"):
            sagacity.saga("s", lambda: None)

    def test_a_saga_waiting_for_approval_cannot_be_opened_again(self, sagacity: Sagacity) -> None:
        """saga() refuses an id that waits for approval: that is resume_saga's job."""
        tools = tools_of(sagacity, Shop())
        sagacity.saga("wire-1", order_then_wire(tools))
        with pytest.raises(SagaStateError, match="waiting for approval"):
            sagacity.saga("wire-1", order_then_wire(tools))

    def test_a_saga_with_a_failed_call_is_compensated_when_resumed(
        self, sagacity: Sagacity
    ) -> None:
        """A failed call in the journal fails the resumed saga: its approved wire never runs.

        One saga can span several requests (MCP): a later one may record the failure.
        """
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)

        def first_request() -> None:
            tools["reserve_inventory"]("SKU-1")
            tools["send_wire_transfer"]("10", "bob")

        assert sagacity.saga("s", first_request).outcome is SagaOutcome.AWAITING_APPROVAL
        # A later request of the same saga (as over MCP) records a failure of its own.
        intent = journal_intent(
            sagacity, "s", "ship#9", tool_name="ship", tool_input={"order_id": "o-1"}
        )
        journal_failure(sagacity, intent)
        sagacity.approve("s", approver="alice")
        result = sagacity.resume_saga("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.calls["send_wire_transfer"] == 0
        assert isinstance(result.error, SagaStateError)
        assert "IRREVERSIBLE tool 'send_wire_transfer' is not run" in str(result.error)
        assert [ref.tool_name for ref in result.compensation.compensated] == ["reserve_inventory"]

    def test_a_call_that_starts_after_the_work_returned_is_refused(self) -> None:
        """Work that returns before its calls start (a stream left unconsumed) runs nothing late.

        A call that starts once the saga has ended raises SagaStateError and is not run,
        instead of journaling into an ended saga.
        """
        sagacity = memory_sagacity()
        shop = Shop()
        tools = tools_of(sagacity, shop)
        context = sagacity.saga("s", contextvars.copy_context).value

        assert sagacity.history("s")[-1].phase is Phase.ENDED
        with pytest.raises(SagaStateError, match="work returned before tool 'reserve_inventory'"):
            context.run(tools["reserve_inventory"], "SKU-1")
        assert shop.calls["reserve_inventory"] == 0
        assert [e.phase for e in sagacity.history("s")] == [Phase.ENDED]

    def test_a_generator_returned_by_the_work_is_refused(self) -> None:
        """Work that returns an unread generator fails with a TypeError; nothing in it runs."""
        sagacity = memory_sagacity()
        shop = Shop()
        tools = tools_of(sagacity, shop)

        def stream() -> Any:
            yield tools["reserve_inventory"]("SKU-1")

        result = sagacity.saga("s", stream)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert "work returned a stream (generator) that was never read" in str(result.error)
        assert shop.calls["reserve_inventory"] == 0

    def test_a_retried_failure_still_compensates_after_a_crash(self, sagacity: Sagacity) -> None:
        """A call that failed, then succeeded on retry, fails the saga when it is re-opened too."""
        shop = Shop()
        tools_of(sagacity, shop)  # registers the compensation
        journal_failure(sagacity, journal_intent(sagacity, "s", "r1"))
        retry = journal_intent(sagacity, "s", "r1")
        sagacity.journal.append(
            "s", Phase.EXECUTED, tool_name="reserve_inventory", call_id="r1",
            ref_seq=retry.seq, payload={"result": "res-SKU-1-1"},
        )  # fmt: skip
        result = sagacity.saga("s", lambda: None)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["release res-SKU-1-1"]

    def test_nested_saga_raises(self) -> None:
        """Opening a saga inside another raises NestedSagaError; the outer one goes on."""
        sagacity = memory_sagacity()
        errors: list[NestedSagaError] = []

        def outer() -> str:
            try:
                sagacity.saga("inner", lambda: None)
            except NestedSagaError as error:
                errors.append(error)
            return "outer done"

        result = sagacity.saga("outer", outer)
        assert result.value == "outer done"
        assert "'inner' cannot open inside saga 'outer'" in str(errors[0])
        assert sagacity.history("inner") == []

    async def test_nested_asaga_raises_in_a_task(self) -> None:
        """A task started by a saga's work sees the saga, so it cannot open another."""
        sagacity = memory_sagacity()

        async def inner() -> None: ...

        async def outer() -> None:
            await asyncio.create_task(sagacity.asaga("inner", inner))

        result = await sagacity.asaga("outer", outer)
        assert isinstance(result.error, NestedSagaError)

    def test_an_empty_saga_id_is_refused(self) -> None:
        """A saga id must be a non-empty string."""
        with pytest.raises(InvalidIdError, match="saga id '' is empty or blank"):
            memory_sagacity().saga("", lambda: None)

    def test_sagas_run_one_after_another_in_one_context(self) -> None:
        """The scope is reset when a saga returns: the next one opens cleanly."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())
        for saga_id in ("a", "b"):
            assert sagacity.saga(saga_id, lambda: tools["reserve_inventory"]("X")).outcome is (
                SagaOutcome.COMPLETED
            )
        assert sagacity.journal.list_sagas() == ["a", "b"]


class TestSagaScope:
    def test_visible_in_a_thread_pool_with_copied_context(self, sagacity: Sagacity) -> None:
        """Tools run in pool threads with a copied context journal into the saga."""
        shop = Shop()
        tools = tools_of(sagacity, shop)

        def work() -> list[str]:
            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
                futures = [
                    pool.submit(
                        contextvars.copy_context().run, tools["reserve_inventory"], f"SKU-{n}"
                    )
                    for n in range(4)
                ]
                return sorted(f.result() for f in futures)

        result = sagacity.saga("s", work)
        assert result.outcome is SagaOutcome.COMPLETED
        entries = sagacity.history("s")
        assert len(entries) == 9
        intents = {e.seq: str(e.call_id) for e in entries if e.phase is Phase.INTENT}
        assert sorted(intents.values()) == [f"reserve_inventory#{n}" for n in range(1, 5)]
        for entry in entries:
            if entry.phase is Phase.EXECUTED:
                assert intents[entry.ref_seq or 0] == entry.call_id

    def test_a_failure_in_a_pool_thread_fails_the_saga(self, sagacity: Sagacity) -> None:
        """The saga object is shared, not copied: a failure in a thread reaches it."""
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                future = pool.submit(contextvars.copy_context().run, tools["ship"], "o-1")
                assert isinstance(future.exception(), RuntimeError)

        assert sagacity.saga("s", work).outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["reserve SKU-1", "release res-SKU-1-1"]

    def test_a_plain_thread_does_not_see_the_saga(self) -> None:
        """A thread started without the context is outside the saga: nothing is journaled."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())
        seen: list[Any] = []

        def in_thread() -> None:
            seen.append(tools["reserve_inventory"]("SKU-1"))

        def work() -> None:
            thread = threading.Thread(target=in_thread)
            thread.start()
            thread.join()

        sagacity.saga("s", work)
        assert seen == ["res-SKU-1-1"]
        assert phases(sagacity.history("s")) == [("ENDED", None, None)]

    async def test_visible_in_to_thread_and_tasks(self, sagacity: Sagacity) -> None:
        """asyncio.to_thread and tasks copy the context: their tool calls are journaled."""
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)

        async def work() -> None:
            await asyncio.to_thread(tools["reserve_inventory"], "SKU-1")
            task = asyncio.create_task(asyncio.to_thread(tools["charge_card"], "5.00", "visa"))
            await task
            with pytest.raises(RuntimeError):
                await asyncio.to_thread(tools["ship"], "o-1")

        result = await sagacity.asaga("s", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log == [
            "reserve SKU-1",
            "charge 5.00",
            "refund ch-5.00",
            "release res-SKU-1-1",
        ]

    async def test_async_tools_in_gathered_tasks(self, sagacity: Sagacity) -> None:
        """Async tools awaited in concurrent tasks each journal one call with its own id."""
        seen: list[Any] = []

        class Mail:
            @compensable(by="recall")
            async def send(self, to: str) -> str:
                seen.append(current_call())
                await asyncio.sleep(0)
                return f"mail-{to}"

            async def recall(self) -> None: ...

        (send,) = sagacity.wrap(Mail())

        async def work() -> list[str]:
            return list(await asyncio.gather(*(send(to) for to in ("a", "b", "c"))))

        result = await sagacity.asaga("s", work)
        assert result.value == ["mail-a", "mail-b", "mail-c"]
        assert sorted(str(call.call_id) for call in seen) == ["send#1", "send#2", "send#3"]
        assert [e.phase for e in sagacity.history("s")].count(Phase.EXECUTED) == 3


class TestAsaga:
    async def test_async_saga_with_async_tools_and_compensations(self, sagacity: Sagacity) -> None:
        """An async saga awaits async tools and async compensations, newest first."""
        log: list[str] = []

        class Hotel:
            @compensable(by="cancel")
            async def book(self, room: str) -> str:
                log.append(f"book {room}")
                return f"bk-{room}"

            async def cancel(self, ctx: Any) -> None:
                await asyncio.sleep(0)
                log.append(f"cancel {ctx.result}")

            @compensable(by="cancel")
            async def upgrade(self, room: str) -> str:
                raise RuntimeError("no suites left")

        tools = tools_of(sagacity, Hotel())

        async def work() -> None:
            await tools["book"]("101")
            await tools["book"]("102")
            await tools["upgrade"]("101")

        result = await sagacity.asaga("s", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert log == ["book 101", "book 102", "cancel bk-102", "cancel bk-101"]
        assert phases(sagacity.history("s"))[-5:] == [
            ("COMPENSATING", "book", 4),
            ("COMPENSATED", "book", 4),
            ("COMPENSATING", "book", 2),
            ("COMPENSATED", "book", 2),
            ("ENDED", None, None),
        ]


class TestSagasPage:
    def test_examples_run(self) -> None:
        """The examples of docs/sagas.md run in order and their assertions hold."""
        page = Path(__file__).resolve().parent.parent / "docs" / "sagas.md"
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        assert len(blocks) == 6
        namespace: dict[str, Any] = {"__name__": "sagas_md"}
        for block in blocks:
            exec(compile(block, str(page), "exec"), namespace)
        assert namespace["UNDONE"] == ["release res-SKU-1-2", "release res-X"]
