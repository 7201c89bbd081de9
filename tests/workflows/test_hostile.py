"""Workflows attacked from outside: hostile names, checks that lie or hang, racing workers.

Each test keeps one attack; the property it checks is what a user relies on when the
attack comes: refused at start-up, fail closed, a stage runs once, undone in reverse.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    ConfigurationError,
    Phase,
    SagaBusyError,
    Sagacity,
    compensable,
    compensation,
    verify,
)
from sagacity.testing import memory_sagacity
from sagacity.workflows import (
    CheckContext,
    CheckResult,
    StageCheck,
    WorkflowRuntime,
    WorkflowStatus,
    check,
    gate,
    stage,
    workflow,
)
from tests.workflows._guarded import GuardedPayout


def _named(stage_name: Any) -> type:
    @workflow("named")
    class Named:
        @stage(order=1, name=stage_name)
        def first(self, x: int) -> int:
            return x

        @stage(order=2)
        def second(self, x: int) -> int:
            return x

    return Named


class TestHostileNames:
    @pytest.mark.parametrize(
        "stage_name",
        [
            "",
            "a\x00b",
            "a\nb",
            "pay\u202eyap",  # a right-to-left override: shows as another name
            "pay\u200b",  # a zero-width space: looks like 'pay'
            "x" * 49,
            "é",
            "a.b",  # would make the tool name `<workflow>.a.b`
            7,
        ],
    )
    def test_a_stage_name_that_cannot_be_a_call_id_is_refused(self, stage_name: Any) -> None:
        """A name given explicitly must be 1 to 48 letters, digits, '_' or '-': even ''."""
        with pytest.raises(ConfigurationError, match=r"stage name .* must be 1 to 48 letters"):
            WorkflowRuntime(memory_sagacity(), [_named(stage_name)])

    def test_a_very_long_name_is_refused_without_being_echoed_whole(self) -> None:
        """A 100 000-character name is refused in a message of readable length."""
        with pytest.raises(ConfigurationError) as refused:
            WorkflowRuntime(memory_sagacity(), [_named("x" * 100_000)])
        assert len(str(refused.value)) < 300
        assert "xxxxxxxx…" in str(refused.value)

    def test_a_stage_named_after_the_start_call_is_refused_at_start_up(self) -> None:
        """`workflow` is the start's call id: a stage under it would fail every run."""
        with pytest.raises(ConfigurationError, match=r"cannot be named 'workflow'"):
            WorkflowRuntime(memory_sagacity(), [_named("workflow")])

        @workflow("method-named")
        class MethodNamed:
            @stage(order=1)
            def workflow(self, x: int) -> int:
                return x

        with pytest.raises(ConfigurationError, match=r"cannot be named 'workflow'"):
            WorkflowRuntime(memory_sagacity(), [MethodNamed])

    def test_two_stages_with_one_huge_order_are_refused_by_name(self) -> None:
        """An order too long to print still gives the duplicate's ConfigurationError."""

        @workflow("huge-order")
        class HugeOrder:
            @stage(order=10**5000)
            def a(self, x: int) -> int:
                return x

            @stage(order=10**5000)
            def b(self, x: int) -> int:
                return x

        with pytest.raises(ConfigurationError, match=r"stages 'a' and 'b' both have order an int"):
            WorkflowRuntime(memory_sagacity(), [HugeOrder])

    def test_two_stages_with_one_explicit_name_are_refused(self) -> None:
        """`name=` equal to another stage's method name is a duplicate."""
        with pytest.raises(ConfigurationError, match=r"two stages are named 'second'"):
            WorkflowRuntime(memory_sagacity(), [_named("second")])

    def test_a_gate_reason_without_a_utf8_form_is_refused_at_start_up(self) -> None:
        """A lone surrogate in a gate's reason would fail every run at the gate: refused now."""

        @workflow("lone-reason")
        class LoneReason:
            @stage(order=1)
            @gate(reason="wire \ud800 money")
            def pay(self, x: int) -> int:
                return x

        with pytest.raises(ConfigurationError, match=r"stage 'pay': gate reason holds '\\ud800'"):
            WorkflowRuntime(memory_sagacity(), [LoneReason])

    def test_a_description_without_a_utf8_form_is_refused(self) -> None:
        """The description is shown beside every gate: a lone surrogate cannot be."""

        @workflow("lone-description", description="pay \udfff")
        class LoneDescription:
            @stage(order=1)
            def pay(self, x: int) -> int:
                return x

        with pytest.raises(ConfigurationError, match=r"its description holds '\\udfff'"):
            WorkflowRuntime(memory_sagacity(), [LoneDescription])

    @pytest.mark.parametrize(
        ("timeout", "shown"),
        [
            (1e300, "1e+300"),
            (10**20, "100000000000000000000"),
            (float("inf"), "inf"),
            (3660 * 24 * 3600 + 1, "316224001"),
            pytest.param(10**5000, "an int too long to print", id="5001-digits"),
        ],
    )
    def test_a_gate_timeout_past_any_date_is_refused_at_start_up(
        self, timeout: float, shown: str
    ) -> None:
        """A timeout whose expiry is no date made every read of the run fail: refused now."""

        @workflow("far-gate")
        class FarGate:
            @stage(order=1)
            @gate(timeout_seconds=timeout)
            def pay(self, x: int) -> int:
                return x

        with pytest.raises(
            ConfigurationError, match=r"to 316224000 \(ten years\), not "
        ) as refused:
            WorkflowRuntime(memory_sagacity(), [FarGate])
        assert str(refused.value).endswith(f"not {shown}")

    def test_a_gate_of_ten_years_is_read_and_expired(self) -> None:
        """The longest timeout allowed gives a date: the run reads, and expires on time."""
        from sagacity.testing import FakeClock

        @workflow("ten-year-gate")
        class TenYearGate:
            @stage(order=1)
            @gate(timeout_seconds=3660 * 24 * 3600)
            def pay(self, x: int) -> int:
                return x

        clock = FakeClock()
        runtime = WorkflowRuntime(Sagacity.from_url("memory://", clock=clock), [TenYearGate])
        handle = runtime.start("ten-year-gate", 1, run_id="t-1")
        assert handle.gate is not None
        assert handle.gate.expires_at is not None
        assert handle.gate.expires_at.year == 2036
        assert runtime.expire_gates() == []
        clock.advance(3660 * 24 * 3600)
        (expired,) = runtime.expire_gates()
        assert expired.status is WorkflowStatus.COMPENSATED

    def test_a_gate_reason_with_bidi_and_controls_is_journaled_as_it_is(self) -> None:
        """Such a reason is valid text: kept exactly (pages and the CLI escape it)."""
        reason = "pay \u202eevil\u202c\x07 now"

        @workflow("bidi-reason")
        class BidiReason:
            @stage(order=1)
            @gate(reason=reason)
            def pay(self, x: int) -> int:
                return x

        sagacity = memory_sagacity()
        handle = WorkflowRuntime(sagacity, [BidiReason]).start("bidi-reason", 1, run_id="b-1")
        assert handle.gate is not None
        assert handle.gate.reason == reason
        assert verify(sagacity.journal, "b-1").ok


class Answer(StageCheck):
    """Answers what it is given."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def check(self, ctx: CheckContext) -> object:  # type: ignore[override]
        return self.answer


def _checked(answer: object, ran: list[str]) -> object:
    """Workflow 'answered': `hold`, then `pay` behind the check `answer` (or one answering it)."""
    guard = answer if isinstance(answer, StageCheck) else Answer(answer)

    @workflow("answered")
    class Answered:
        @stage(order=1)
        @compensable(by="undo")
        def hold(self, x: int) -> int:
            ran.append("hold")
            return x

        @compensation
        def undo(self, ctx: CompensationContext) -> None:
            ran.append("undo hold")

        @stage(order=2)
        @check(guard)
        def pay(self, x: int) -> int:
            ran.append("pay")
            return x

    return Answered()


class Unprintable:
    """An object, or with `Unsayable` an error, that cannot be made text."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Unsayable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class Raises(StageCheck):
    def check(self, ctx: CheckContext) -> CheckResult:
        raise Unsayable


class TestChecksThatLie:
    @pytest.mark.parametrize(
        ("answer", "detail"),
        [
            (CheckResult(passed="no"), "whose passed is 'no', not True or False"),  # type: ignore[arg-type]
            (CheckResult(passed=1), "whose passed is 1, not True or False"),  # type: ignore[arg-type]
            (CheckResult(passed=None), "whose passed is None, not True or False"),  # type: ignore[arg-type]
            (False, "returned False, not a CheckResult"),
            ("ok", "returned 'ok', not a CheckResult"),
            (CheckResult, "returned <class"),
            (Unprintable(), "returned a Unprintable whose repr() raised RuntimeError"),
            (CheckResult(passed=False, reason=5), "5"),  # type: ignore[arg-type]
        ],
    )
    def test_a_result_that_is_not_exactly_ok_fails_closed(
        self, answer: object, detail: str
    ) -> None:
        """Only `passed is True` lets the stage run: a truthy 'no' refuses it, journaled."""
        ran: list[str] = []
        sagacity = memory_sagacity()
        handle = WorkflowRuntime(sagacity, [_checked(answer, ran)]).start("answered", 5, "a-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert ran == ["hold", "undo hold"]
        (refused,) = [e for e in sagacity.history("a-1") if e.phase is Phase.REFUSED]
        assert detail in refused.payload["detail"]
        assert refused.payload["reason"] == "check_failed"

    def test_an_error_whose_message_cannot_be_read_is_still_a_journaled_refusal(self) -> None:
        """A check raising an error whose str() raises: REFUSED is journaled, the run undone."""
        ran: list[str] = []
        sagacity = memory_sagacity()
        handle = WorkflowRuntime(sagacity, [_checked(Raises(), ran)]).start("answered", 5, "u-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert [(s.name, s.status.value) for s in handle.stages] == [
            ("hold", "COMPENSATED"),
            ("pay", "CHECK_FAILED"),
        ]
        (refused,) = [e for e in sagacity.history("u-1") if e.phase is Phase.REFUSED]
        assert refused.payload["detail"] == (
            "Raises.check raised Unsayable: <str() of the error raised RuntimeError>"
        )
        assert ran == ["hold", "undo hold"]

    def test_a_check_that_raises_a_base_exception_runs_nothing(self) -> None:
        """A check interrupted (KeyboardInterrupt) propagates; the stage never ran."""

        class Interrupted(StageCheck):
            def check(self, ctx: CheckContext) -> CheckResult:
                raise KeyboardInterrupt

        ran: list[str] = []
        sagacity = memory_sagacity()
        runtime = WorkflowRuntime(sagacity, [_checked(Interrupted(), ran)])
        with pytest.raises(KeyboardInterrupt):
            runtime.start("answered", 5, "k-1")
        assert ran == ["hold"]
        assert [e.call_id for e in sagacity.history("k-1") if e.phase is Phase.INTENT] == [
            "workflow",
            "hold",
        ]


class Meddler(StageCheck):
    """Edits what it is shown, then says ok."""

    def check(self, ctx: CheckContext) -> CheckResult:
        ctx.value["amount"] = 1_000_000
        ctx.input["order"]["amount"] = 1_000_000
        ctx.outputs["take"]["amount"] = 1_000_000
        return CheckResult.ok()


def _meddled(received: list[Any], *, gated: bool) -> object:
    @workflow("meddled")
    class Meddled:
        @stage(order=1)
        def take(self, amount):  # type: ignore[no-untyped-def]  # unannotated: gets the JSON
            return {"amount": amount}

        @stage(order=2)
        @check(Meddler)
        @gate(approval_required=gated)
        def pay(self, order):  # type: ignore[no-untyped-def]
            received.append(dict(order))
            order["amount"] += 1  # the stage's own copy: its output is journaled
            return order

        @stage(order=3)
        @check(Meddler)
        def file(self, order):  # type: ignore[no-untyped-def]
            received.append(order)
            return order

    return Meddled()


class TestChecksThatMeddle:
    @pytest.mark.parametrize("gated", [False, True])
    def test_a_check_editing_its_context_changes_nothing_the_stage_gets(self, gated: bool) -> None:
        """The stage runs with the journaled output, and the gate asks about it, not the edit."""
        received: list[Any] = []
        sagacity = memory_sagacity()
        runtime = WorkflowRuntime(sagacity, [_meddled(received, gated=gated)])
        handle = runtime.start("meddled", 5, run_id="m-1")
        if gated:
            assert handle.gate is not None
            assert handle.gate.input == {"order": {"amount": 5}}
            runtime.approve_gate("m-1", "pay", "alice", sha256=handle.gate.input_sha256)
            handle = runtime.resume("m-1")
        assert handle.status is WorkflowStatus.COMPLETED
        assert received == [{"amount": 5}, {"amount": 6}]
        intents = {
            e.call_id: e.payload["input"]
            for e in sagacity.history("m-1")
            if e.phase is Phase.INTENT and e.call_id in ("pay", "file")
        }
        assert intents == {"pay": {"order": {"amount": 5}}, "file": {"order": {"amount": 6}}}


class Hanging(StageCheck):
    """Blocks until released, then says ok."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def check(self, ctx: CheckContext) -> CheckResult:
        self.entered.set()
        assert self.release.wait(10)
        return CheckResult.ok()


@pytest.fixture
def two(sqlite_url: str) -> Iterator[tuple[Sagacity, Sagacity]]:
    """Two workers' Sagacity on one SQLite file."""
    one, other = Sagacity.from_url(sqlite_url), Sagacity.from_url(sqlite_url)
    yield one, other
    one.close()
    other.close()


class TestHangingCheck:
    def test_a_hanging_check_keeps_the_run_from_other_workers(
        self, two: tuple[Sagacity, Sagacity]
    ) -> None:
        """While a check hangs, another worker cannot take the run; released, it runs once."""
        one, other = two
        hanging = Hanging()
        ran: list[str] = []
        first = WorkflowRuntime(one, [_checked(hanging, ran)])
        second = WorkflowRuntime(other, [_checked(CheckResult.ok(), ran)])
        handles: list[Any] = []
        worker = threading.Thread(target=lambda: handles.append(first.start("answered", 5, "h-1")))
        worker.start()
        assert hanging.entered.wait(10)
        with pytest.raises(SagaBusyError):
            second.resume("h-1")
        seen = second.get("h-1")
        assert seen.status is WorkflowStatus.RUNNING
        assert [(s.name, s.status.value) for s in seen.stages] == [
            ("hold", "EXECUTED"),
            ("pay", "PENDING"),
        ]
        hanging.release.set()
        worker.join(10)
        assert handles[0].status is WorkflowStatus.COMPLETED
        assert ran == ["hold", "pay"]
        assert second.resume("h-1").status is WorkflowStatus.COMPLETED
        assert ran == ["hold", "pay"]


class AsyncHanging(StageCheck):
    """An async check that waits for ever while `hang` is set, then says ok."""

    def __init__(self) -> None:
        self.hang = True
        self.entered = asyncio.Event()

    async def check(self, ctx: CheckContext) -> CheckResult:
        if self.hang:
            self.entered.set()
            await asyncio.Event().wait()
        return CheckResult.ok()


def _async_checked(guard: StageCheck, ran: list[str]) -> object:
    @workflow("async-answered")
    class AsyncAnswered:
        @stage(order=1)
        async def hold(self, x: int) -> int:
            ran.append("hold")
            return x

        @stage(order=2)
        @check(guard)
        async def pay(self, x: int) -> int:
            ran.append("pay")
            return x

    return AsyncAnswered()


class TestCancelledHangingCheck:
    async def test_a_run_cancelled_in_a_hanging_check_is_resumed_elsewhere(
        self, two: tuple[Sagacity, Sagacity]
    ) -> None:
        """Cancelled while its async check hangs, the run lets go; another worker finishes it.

        Nothing of the stage was journaled, so the checks run again there and the stage
        that ran before is not run again.
        """
        one, other = two
        hanging = AsyncHanging()
        ran: list[str] = []
        first = WorkflowRuntime(one, [_async_checked(hanging, ran)])
        started = asyncio.ensure_future(first.astart("async-answered", 2, run_id="ah-1"))
        await asyncio.wait_for(hanging.entered.wait(), 10)
        started.cancel()
        with pytest.raises(asyncio.CancelledError):
            await started
        second = WorkflowRuntime(other, [_async_checked(hanging, ran)])
        assert second.get("ah-1").status is WorkflowStatus.RUNNING
        hanging.hang = False
        handle = await second.aresume("ah-1")
        assert handle.status is WorkflowStatus.COMPLETED
        assert ran == ["hold", "pay"]


class TestRacingResumers:
    def test_two_workers_resuming_one_approved_gate_run_the_stage_once(
        self, two: tuple[Sagacity, Sagacity]
    ) -> None:
        """The first resume holds the run inside the gated stage; the second is refused."""
        one, other = two
        payer, bystander = GuardedPayout(), GuardedPayout()
        first = WorkflowRuntime(one, [payer])
        second = WorkflowRuntime(other, [bystander])
        first.start("guarded-payout", 40, run_id="g-1")
        second.approve_gate("g-1", "pay", "alice")
        payer.release.clear()
        handles: list[Any] = []
        worker = threading.Thread(target=lambda: handles.append(first.resume("g-1")))
        worker.start()
        assert payer.paying.wait(10)
        with pytest.raises(SagaBusyError):
            second.resume("g-1")
        payer.release.set()
        worker.join(10)
        assert handles[0].status is WorkflowStatus.COMPLETED
        assert second.resume("g-1").status is WorkflowStatus.COMPLETED
        assert payer.log == ["hold 40", "pay 40", "receipt payment-40"]
        assert bystander.log == []
        intents = [e.call_id for e in other.history("g-1") if e.phase is Phase.INTENT]
        assert intents == ["workflow", "hold", "pay", "receipt"]
        assert verify(other.journal, "g-1").ok

    def test_a_worker_resuming_after_the_other_finished_changes_nothing(
        self, two: tuple[Sagacity, Sagacity]
    ) -> None:
        """Resumed again once completed, by the other worker: nothing runs, nothing journaled."""
        one, other = two
        payer, bystander = GuardedPayout(), GuardedPayout()
        first = WorkflowRuntime(one, [payer])
        second = WorkflowRuntime(other, [bystander])
        first.start("guarded-payout", 40, run_id="g-2")
        first.approve_gate("g-2", "pay", "alice")
        assert first.resume("g-2").status is WorkflowStatus.COMPLETED
        entries = len(other.history("g-2"))
        assert second.resume("g-2").status is WorkflowStatus.COMPLETED
        assert len(other.history("g-2")) == entries
        assert bystander.log == []


class TestFailureAfterTheGate:
    def test_a_stage_failing_after_the_approved_gate_undoes_in_reverse(
        self, two: tuple[Sagacity, Sagacity]
    ) -> None:
        """Approved in another process, the run fails at `receipt`: refund, then unhold."""
        one, other = two
        payer = GuardedPayout()
        payer.receipt_fails = True
        first = WorkflowRuntime(one, [payer])
        first.start("guarded-payout", 70, run_id="f-1")
        WorkflowRuntime(other, [GuardedPayout()]).approve_gate("f-1", "pay", "alice")
        handle = first.resume("f-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert handle.error is not None
        assert "receipt printer on fire" in handle.error
        assert payer.log == ["hold 70", "pay 70", "refund payment-70", "unhold 70"]
        assert [(s.name, s.status.value) for s in handle.stages] == [
            ("hold", "COMPENSATED"),
            ("pay", "COMPENSATED"),
            ("receipt", "FAILED"),
        ]
        undone = [e.call_id for e in one.history("f-1") if e.phase is Phase.COMPENSATED]
        assert undone[:2] == ["pay", "hold"]
        assert verify(one.journal, "f-1").ok


class TestHostileDecisions:
    @pytest.fixture
    def paused(self) -> tuple[Sagacity, WorkflowRuntime]:
        sagacity = memory_sagacity()
        runtime = WorkflowRuntime(sagacity, [GuardedPayout()])
        runtime.start("guarded-payout", 10, run_id="d-1")
        return sagacity, runtime

    @pytest.mark.parametrize("reason", [None, 5, b"no", ["no"]])
    def test_a_rejection_reason_that_is_not_text_is_refused(
        self, paused: tuple[Sagacity, WorkflowRuntime], reason: Any
    ) -> None:
        """A reason becomes the run's error and is journaled: not text, nothing is decided."""
        sagacity, runtime = paused
        entries = len(sagacity.history("d-1"))
        with pytest.raises(ValueError, match=r"a rejection's reason must be text"):
            runtime.reject_gate("d-1", "pay", "bob", reason)
        assert len(sagacity.history("d-1")) == entries
        assert runtime.get("d-1").gate.state == "waiting"  # type: ignore[union-attr]

    def test_a_reason_without_a_utf8_form_journals_nothing(
        self, paused: tuple[Sagacity, WorkflowRuntime]
    ) -> None:
        """A lone surrogate in the reason is refused by the journal: the gate still waits."""
        from sagacity import SerializationError

        sagacity, runtime = paused
        entries = len(sagacity.history("d-1"))
        with pytest.raises(SerializationError, match=r"cannot append REJECTED"):
            runtime.reject_gate("d-1", "pay", "bob", "no \ud800")
        assert len(sagacity.history("d-1")) == entries
        assert runtime.get("d-1").gate.state == "waiting"  # type: ignore[union-attr]
        assert runtime.reject_gate("d-1", "pay", "bob", "no").status is WorkflowStatus.COMPENSATED
