"""The compensation walk: reverse order, partial failure, the report, re-runs and resolve."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from sagacity import (
    CallRef,
    CompensationContext,
    CompensationReport,
    Phase,
    Sagacity,
    SagaNotFoundError,
    SagaOutcome,
    SagaStateError,
    SagaTool,
    compensable,
    verify,
)
from sagacity.testing import FailOn, memory_sagacity
from tests._shop import Shop, phases, tools_of


class Gateway:
    """A call whose outcome is unknown: it times out."""

    def __init__(self) -> None:
        self.undone: list[Any] = []

    @compensable(by="void")
    def authorize(self, amount: str) -> str:
        """Authorize a payment."""
        raise TimeoutError("gateway timed out")

    def void(self, ctx: CompensationContext) -> None:
        self.undone.append(ctx.result)


def full_order(tools: dict[str, SagaTool]) -> Any:
    """Reserve, wire (approved later), charge, a timed-out authorization, a failed shipment."""

    def work() -> str:
        tools["reserve_inventory"]("SKU-1")
        wired = str(tools["send_wire_transfer"]("900.00", "ACME"))
        if wired.startswith("[AWAITING_APPROVAL]"):
            return "waiting"
        tools["charge_card"]("5.00", "visa")
        with contextlib.suppress(TimeoutError):
            tools["authorize"]("5.00")
        tools["ship"]("o-1")
        return "done"

    return work


class TestCompensationWalk:
    def test_reverse_order_with_context(self, sagacity: Sagacity) -> None:
        """Compensations run newest first, each given its call's exact input and result."""
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["reserve_inventory"]("SKU-1", 3)
            tools["charge_card"]("20.00", "visa")
            tools["ship"]("o-1")

        sagacity.saga("s", work)
        assert shop.log[-2:] == ["refund ch-20.00", "release res-SKU-1-3"]
        assert shop.contexts == [
            CompensationContext(
                saga_id="s",
                tool_name="charge_card",
                call_id="charge_card#1",
                input={"amount": "20.00", "card": "visa"},
                result="ch-20.00",
            ),
            CompensationContext(
                saga_id="s",
                tool_name="reserve_inventory",
                call_id="reserve_inventory#1",
                input={"sku": "SKU-1", "qty": 3},
                result="res-SKU-1-3",
            ),
        ]

    def test_a_compensation_without_parameters_is_called_bare(self) -> None:
        """A compensation declared with no parameter is called with none."""
        sagacity = memory_sagacity()
        shop = Shop()
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["ship"]("o-1")
            raise RuntimeError("model gave up")

        sagacity.saga("s", work)
        assert shop.log == ["ship o-1", "cancel shipment"]

    def test_carries_on_past_a_failing_compensation(self, sagacity: Sagacity) -> None:
        """A compensation that raises is journaled COMPENSATION_FAILED; the rest still run.

        Each compensation's COMPENSATING intent precedes its outcome.
        """
        shop = Shop(ship_fails=True, refund_fails=FailOn(1))
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            tools["charge_card"]("20.00", "visa")
            tools["ship"]("o-1")

        result = sagacity.saga("s", work)
        assert result.outcome is SagaOutcome.COMPENSATION_FAILED
        entries = sagacity.history("s")
        assert phases(entries)[-5:] == [
            ("COMPENSATING", "charge_card", 4),
            ("COMPENSATION_FAILED", "charge_card", 4),
            ("COMPENSATING", "reserve_inventory", 2),
            ("COMPENSATED", "reserve_inventory", 2),
            ("ENDED", None, None),
        ]
        assert [e.payload for e in entries[-5:-1]] == [
            {"attempt": 1},
            {"error": "RuntimeError: failure on call 1"},
            {"attempt": 1},
            None,
        ]
        assert entries[-1].payload == {
            "outcome": "COMPENSATION_FAILED",
            "error": {"type": "RuntimeError", "message": "courier down"},
            "compensated": ["reserve_inventory#1"],
            "compensation_failed": ["charge_card#1"],
            "in_doubt": [],
        }
        assert shop.log[-1] == "release res-SKU-1-1"

    def test_report_lists_compensated_failed_skipped_and_in_doubt(self, sagacity: Sagacity) -> None:
        """The report says exactly what was undone, what is dirty, skipped and in doubt."""
        shop = Shop(ship_fails=True, refund_fails=FailOn(1))
        gateway = Gateway()
        tools = tools_of(sagacity, shop, gateway)
        sagacity.saga("s", full_order(tools))
        sagacity.approve("s", approver="alice")
        result = sagacity.resume_saga("s", full_order(tools))
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION  # in doubt outranks failed
        assert result.compensation == CompensationReport(
            saga_id="s",
            compensated=[
                CallRef(seq=2, tool_name="reserve_inventory", call_id="reserve_inventory#1")
            ],
            failed=[
                CallRef(
                    seq=8,
                    tool_name="charge_card",
                    call_id="charge_card#1",
                    error="RuntimeError: failure on call 1",
                )
            ],
            skipped=[
                CallRef(seq=6, tool_name="send_wire_transfer", call_id="send_wire_transfer#1")
            ],
            in_doubt=[
                CallRef(
                    seq=9,
                    tool_name="authorize",
                    call_id="authorize#1",
                    error="outcome unknown: TimeoutError: gateway timed out",
                )
            ],
        )
        assert result.compensation.clean is False
        assert gateway.undone == []
        assert shop.calls["send_wire_transfer"] == 1

    def test_a_failed_call_is_not_compensated(self) -> None:
        """Only EXECUTED calls are undone: the call that failed has nothing to undo."""
        sagacity = memory_sagacity()
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)
        result = sagacity.saga("s", lambda: tools["ship"]("o-1"))
        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.compensation == CompensationReport(
            saga_id="s", compensated=[], failed=[], skipped=[], in_doubt=[]
        )
        assert shop.log == []


class TestContextIsolation:
    def test_a_compensation_editing_its_context_leaves_the_journal_intact(self) -> None:
        """What a compensation is given is a copy: editing it does not edit the journal."""
        sagacity = memory_sagacity()

        class Cart:
            @compensable(by="empty")
            def fill(self, items: list[str]) -> dict[str, Any]:
                return {"cart": "c-1", "items": items}

            def empty(self, ctx: CompensationContext) -> None:
                ctx.input["items"].append("tampered")
                ctx.result["cart"] = "tampered"

            @compensable(by="empty")
            def pay(self) -> None:
                raise RuntimeError("declined")

        tools = tools_of(sagacity, Cart())

        def work() -> None:
            tools["fill"](["apple"])
            with contextlib.suppress(RuntimeError):
                tools["pay"]()

        assert sagacity.saga("s", work).outcome is SagaOutcome.COMPENSATED
        assert sagacity.history("s")[0].payload["input"] == {"items": ["apple"]}
        assert verify(sagacity.journal).ok


class TestAsyncCompensations:
    async def test_async_compensations_in_asaga(self, sagacity: Sagacity) -> None:
        """An async saga awaits async compensations, mixed with sync ones, newest first."""
        log: list[str] = []

        class Trip:
            @compensable(by="cancel_flight")
            async def book_flight(self, to: str) -> str:
                return f"fl-{to}"

            async def cancel_flight(self, ctx: CompensationContext) -> None:
                await asyncio.sleep(0)
                log.append(f"cancel {ctx.result}")

            @compensable(by="cancel_hotel")
            def book_hotel(self, city: str) -> str:
                return f"ht-{city}"

            def cancel_hotel(self, ctx: CompensationContext) -> None:
                log.append(f"cancel {ctx.result}")

        tools = tools_of(sagacity, Trip())

        async def work() -> None:
            await tools["book_flight"]("Oslo")
            tools["book_hotel"]("Oslo")
            raise RuntimeError("visa refused")

        result = await sagacity.asaga("trip", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert log == ["cancel ht-Oslo", "cancel fl-Oslo"]

    def test_async_compensation_in_a_sync_saga(self) -> None:
        """The sync walk runs an async compensation to completion on a loop of its own."""
        log: list[str] = []

        class Booking:
            @compensable(by="cancel")
            def book(self) -> str:
                return "bk-1"

            async def cancel(self, ctx: CompensationContext) -> None:
                await asyncio.sleep(0)
                log.append(f"cancel {ctx.result}")

        sagacity = memory_sagacity()
        (book,) = sagacity.wrap(Booking())

        def work() -> None:
            book()
            raise RuntimeError("no")

        assert sagacity.saga("s", work).outcome is SagaOutcome.COMPENSATED
        assert log == ["cancel bk-1"]

    async def test_sync_saga_called_while_a_loop_runs(self) -> None:
        """A sync saga called from async code still runs its async compensations."""
        log: list[str] = []

        class Booking:
            @compensable(by="cancel")
            def book(self) -> str:
                return "bk-1"

            async def cancel(self) -> None:
                await asyncio.sleep(0)
                log.append("cancelled")

        sagacity = memory_sagacity()
        (book,) = sagacity.wrap(Booking())

        def work() -> None:
            book()
            raise RuntimeError("no")

        assert sagacity.saga("s", work).outcome is SagaOutcome.COMPENSATED
        assert log == ["cancelled"]


class TestCompensateAgain:
    def test_retries_only_what_is_not_compensated(self, sagacity: Sagacity) -> None:
        """compensate() re-runs the failed compensation and never repeats a successful one.

        The re-run is journaled as the compensation's second attempt.
        """
        shop = Shop(ship_fails=True, refund_fails=FailOn(1))
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            tools["charge_card"]("20.00", "visa")
            tools["ship"]("o-1")

        assert sagacity.saga("s", work).outcome is SagaOutcome.COMPENSATION_FAILED
        before = len(sagacity.history("s"))
        result = sagacity.compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log.count("release res-SKU-1-1") == 1
        assert shop.log.count("refund ch-20.00") == 1
        assert phases(sagacity.history("s")[before:]) == [
            ("COMPENSATING", "charge_card", 4),
            ("COMPENSATED", "charge_card", 4),
            ("ENDED", None, None),
        ]
        assert sagacity.history("s")[before].payload == {"attempt": 2}
        assert sagacity.history("s")[-1].payload == {
            "outcome": "COMPENSATED",
            "compensated": ["reserve_inventory#1", "charge_card#1"],
            "compensation_failed": [],
            "in_doubt": [],
        }
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.compensated] == [
            "reserve_inventory#1",
            "charge_card#1",
        ]

    def test_a_compensated_saga_is_left_alone(self, sagacity: Sagacity) -> None:
        """compensate() of a saga already COMPENSATED calls nothing and journals nothing."""
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            tools["ship"]("o-1")

        sagacity.saga("s", work)
        entries = sagacity.history("s")
        result = sagacity.compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log.count("release res-SKU-1-1") == 1
        assert sagacity.history("s") == entries

    async def test_acompensate(self) -> None:
        """`acompensate` retries from async code."""
        sagacity = memory_sagacity()
        shop = Shop(ship_fails=True, refund_fails=FailOn(1))
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["charge_card"]("1.00", "visa")
            tools["ship"]("o-1")

        sagacity.saga("s", work)
        result = await sagacity.acompensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log[-1] == "refund ch-1.00"

    def test_a_crashed_saga_is_compensated_by_another_process(self, sqlite_url: str) -> None:
        """A saga that died mid-work is compensated later by a process that wrapped the tools."""
        crashed = Sagacity.from_url(sqlite_url)
        tools = tools_of(crashed, Shop())

        class Crash(BaseException):
            pass

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            tools["charge_card"]("20.00", "visa")
            raise Crash

        with pytest.raises(Crash):
            crashed.saga("s", work)
        crashed.close()

        later = Sagacity.from_url(sqlite_url)
        shop = Shop()
        tools_of(later, shop)
        result = later.compensate("s")
        later.close()
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["refund ch-20.00", "release res-SKU-1-1"]

    def test_a_compensation_not_wrapped_here_waits_until_it_is(self) -> None:
        """With the tools not wrapped in this process, the walk leaves them; wrap, retry."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())

        class Crash(BaseException):
            pass

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            raise Crash

        with pytest.raises(Crash):
            sagacity.saga("s", work)
        elsewhere = Sagacity(sagacity.journal, sagacity.approvals)
        result = elsewhere.compensate("s")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert result.compensation.failed == []
        (waiting,) = result.compensation.waiting
        assert waiting.error == (
            "no compensation for tool 'reserve_inventory' is registered in this process"
        )
        shop = Shop()
        tools_of(elsewhere, shop)
        assert elsewhere.compensate("s").outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["release res-SKU-1-1"]

    def test_a_completed_saga_is_not_compensated(self, sagacity: Sagacity) -> None:
        """compensate() refuses a COMPLETED saga: there is no failure to undo."""
        shop = Shop()
        tools = tools_of(sagacity, shop)
        sagacity.saga("s", lambda: tools["reserve_inventory"]("SKU-1"))
        with pytest.raises(SagaStateError, match="'s' ended COMPLETED"):
            sagacity.compensate("s")
        assert shop.log == ["reserve SKU-1"]

    def test_an_unknown_saga(self) -> None:
        """compensate() of a saga with no entries raises SagaNotFoundError."""
        with pytest.raises(SagaNotFoundError, match="'ghost'"):
            memory_sagacity().compensate("ghost")

    def test_a_saga_waiting_for_approval_is_abandoned(self, sagacity: Sagacity) -> None:
        """compensate() of a waiting saga undoes its calls and deletes its requests."""
        shop = Shop()
        tools = tools_of(sagacity, shop)

        def work() -> Any:
            tools["reserve_inventory"]("SKU-1")
            return tools["send_wire_transfer"]("9.00", "ACME")

        sagacity.saga("s", work)
        result = sagacity.compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert sagacity.pending("s") == []
        assert shop.log == ["reserve SKU-1", "release res-SKU-1-1"]
        assert shop.calls["send_wire_transfer"] == 0


class TestResolve:
    def _timed_out(self, sagacity: Sagacity) -> Gateway:
        gateway = Gateway()
        tools = tools_of(sagacity, gateway)

        def work() -> None:
            with contextlib.suppress(TimeoutError):
                tools["authorize"]("5.00")

        result = sagacity.saga("s", work)
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["authorize#1"]
        return gateway

    def test_resolved_as_executed_is_then_compensated(self, sagacity: Sagacity) -> None:
        """resolve(executed=True) journals EXECUTED; the next walk compensates it."""
        gateway = self._timed_out(sagacity)
        entry = sagacity.resolve("s", "authorize#1", executed=True, result="auth-77", by="ops")
        assert (entry.phase, entry.ref_seq, entry.call_id) == (Phase.EXECUTED, 1, "authorize#1")
        assert entry.payload == {"result": "auth-77", "resolved_by": "ops"}
        result = sagacity.compensate("s")
        assert gateway.undone == ["auth-77"]
        assert result.compensation is not None
        assert result.compensation.in_doubt == []
        assert [ref.call_id for ref in result.compensation.compensated] == ["authorize#1"]

    def test_resolved_as_not_executed_is_settled(self, sagacity: Sagacity) -> None:
        """resolve(executed=False) journals FAILED; the call is neither in doubt nor undone."""
        gateway = self._timed_out(sagacity)
        entry = sagacity.resolve("s", "authorize#1", executed=False, by="ops")
        assert entry.phase is Phase.FAILED
        assert entry.payload == {"kind": "not_run", "error": None, "resolved_by": "ops"}
        result = sagacity.compensate("s")
        assert result.compensation == CompensationReport(
            saga_id="s", compensated=[], failed=[], skipped=[], in_doubt=[]
        )
        assert gateway.undone == []

    def test_only_an_in_doubt_call_can_be_resolved(self, sagacity: Sagacity) -> None:
        """A settled call, or an unknown one, cannot be resolved; a name is required."""
        self._timed_out(sagacity)
        sagacity.resolve("s", "authorize#1", executed=False, by="ops")
        with pytest.raises(SagaStateError, match="'authorize#1' is not in doubt"):
            sagacity.resolve("s", "authorize#1", executed=True, by="ops")
        with pytest.raises(SagaStateError, match="'nope' is not in doubt"):
            sagacity.resolve("s", "nope", executed=True, by="ops")
        with pytest.raises(ValueError, match="by must name"):
            sagacity.resolve("s", "authorize#1", executed=True, by=" ")
