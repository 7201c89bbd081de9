"""Runs beyond the refund paths: async stages, doubt, hostile input, two workers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    InvalidIdError,
    Phase,
    Reversibility,
    SagaBusyError,
    Sagacity,
    SagaNotFoundError,
    compensable,
    compensation,
    verify,
)
from sagacity.errors import ApprovalNotFoundError
from sagacity.testing import memory_sagacity
from sagacity.workflows import (
    CheckContext,
    CheckResult,
    StageCheck,
    StageStatus,
    WorkflowRuntime,
    WorkflowStatus,
    check,
    gate,
    stage,
    workflow,
)


class AsyncLimit(StageCheck):
    async def check(self, ctx: CheckContext) -> CheckResult:
        await asyncio.sleep(0)
        return CheckResult.ok() if ctx.value <= 100 else CheckResult.fail("over 100")


@workflow("async-order")
class AsyncOrder:
    def __init__(self) -> None:
        self.log: list[str] = []

    @stage(order=1)
    @compensable(by="unhold")
    async def hold(self, amount: int) -> int:
        await asyncio.sleep(0)
        self.log.append(f"hold {amount}")
        return amount

    @compensation
    async def unhold(self, ctx: CompensationContext) -> None:
        self.log.append(f"unhold {ctx.result}")

    @stage(order=2)
    @check(AsyncLimit)
    @gate(reason="charge the card")
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def charge(self, amount: int) -> str:
        self.log.append(f"charge {amount}")
        return f"ch-{amount}"


class TestAsyncStages:
    def test_astart_pauses_and_aresume_completes(self) -> None:
        """Async stages and an async check run on the caller's loop, through the gate."""
        sagacity = memory_sagacity()
        order = AsyncOrder()
        runtime = WorkflowRuntime(sagacity, [order])

        async def scenario() -> tuple[WorkflowStatus, WorkflowStatus, Any]:
            first = await runtime.astart("async-order", 40, run_id="a-1")
            runtime.approve_gate("a-1", "charge", "alice")
            done = await runtime.aresume("a-1")
            return first.status, done.status, done.result

        assert asyncio.run(scenario()) == (
            WorkflowStatus.PAUSED_AT_GATE,
            WorkflowStatus.COMPLETED,
            "ch-40",
        )
        assert order.log == ["hold 40", "charge 40"]

    def test_sync_start_of_an_async_workflow_runs_its_own_loop(self) -> None:
        """start() of a workflow with async parts runs them; an async check failing compensates."""
        sagacity = memory_sagacity()
        order = AsyncOrder()
        runtime = WorkflowRuntime(sagacity, [order])
        handle = runtime.start("async-order", 400, run_id="a-2")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert handle.error == "over 100"
        assert order.log == ["hold 400", "unhold 400"]

    def test_sync_start_inside_a_running_loop_says_to_await_astart(self) -> None:
        """start() of an async workflow from a coroutine is refused before anything runs."""
        from sagacity import SagaStateError

        sagacity = memory_sagacity()
        order = AsyncOrder()
        runtime = WorkflowRuntime(sagacity, [order])

        async def inside() -> None:
            with pytest.raises(SagaStateError, match=r"await runtime.astart"):
                runtime.start("async-order", 1, run_id="a-3")

        asyncio.run(inside())
        assert sagacity.history("a-3") == []
        assert order.log == []


@workflow("plain")
class Plain:
    """Two plain stages; the first hands over something that is not JSON when asked."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.verdict: Any = CheckResult.ok()

    @stage(order=1)
    @compensable(by="undo_a")
    def a(self, x: Any) -> Any:
        self.ran.append("a")
        return object() if x == "opaque" else x

    def undo_a(self) -> None:
        self.ran.append("undo a")

    @stage(order=2)
    def b(self, x: Any) -> Any:
        self.ran.append("b")
        return x


class Verdict(StageCheck):
    """Returns whatever the workflow object says, to test what a check may return."""

    def check(self, ctx: CheckContext) -> Any:
        verdict = ctx.workflow.verdict
        if isinstance(verdict, Exception):
            raise verdict
        return verdict


@workflow("checked")
class Checked(Plain):
    @stage(order=2)
    @check(Verdict)
    def b(self, x: Any) -> Any:
        self.ran.append("b")
        return x


class TestFailClosed:
    @pytest.mark.parametrize(
        ("verdict", "detail"),
        [
            (RuntimeError("budget service down"), "Verdict.check raised RuntimeError: budget"),
            (True, "Verdict.check returned True, not a CheckResult"),
            (None, "Verdict.check returned None, not a CheckResult"),
            (CheckResult(passed=False), "failed without a reason"),
        ],
    )
    def test_a_check_that_does_not_say_ok_fails_the_run(self, verdict: Any, detail: str) -> None:
        """A check that raises or answers anything but ok() refuses the stage, journaled."""
        sagacity = memory_sagacity()
        flow = Checked()
        flow.verdict = verdict
        handle = WorkflowRuntime(sagacity, [flow]).start("checked", 1, run_id="c-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert flow.ran == ["a", "undo a"]
        (refused,) = [e for e in sagacity.history("c-1") if e.phase is Phase.REFUSED]
        assert refused.payload["detail"].startswith(detail)

    def test_an_output_that_is_not_json_fails_the_run(self) -> None:
        """A stage output that cannot be journaled fails the run; the stage is undone."""
        sagacity = memory_sagacity()
        flow = Checked()
        handle = WorkflowRuntime(sagacity, [flow]).start("checked", "opaque", run_id="c-2")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert flow.ran == ["a", "undo a"]
        assert handle.error is not None
        assert "stage 'a' output" in handle.error

    @pytest.mark.parametrize("run_id", ["", "  ", "run\n1", "run\x00", "run\u2028", "x" * 513])
    def test_hostile_run_ids_are_refused_before_anything_runs(self, run_id: str) -> None:
        """A run id that cannot be stored or displayed is refused, nothing journaled."""
        sagacity = memory_sagacity()
        flow = Checked()
        with pytest.raises(InvalidIdError):
            WorkflowRuntime(sagacity, [flow]).start("checked", 1, run_id=run_id)
        assert flow.ran == []

    def test_unknown_runs_stages_and_workflows(self) -> None:
        """Reading or deciding what does not exist says what is missing."""
        sagacity = memory_sagacity()
        runtime = WorkflowRuntime(sagacity, [Checked()])
        with pytest.raises(SagaNotFoundError, match="run 'nope' has no journal entries"):
            runtime.get("nope")
        sagacity.saga("plain-saga", lambda: None)
        with pytest.raises(SagaNotFoundError, match="is not a run of a workflow registered"):
            runtime.resume("plain-saga")
        runtime.start("checked", 1, run_id="c-3")
        with pytest.raises(ApprovalNotFoundError, match="has no stage 'wire'"):
            runtime.approve_gate("c-3", "wire", "alice")
        with pytest.raises(ApprovalNotFoundError, match="no gate waits before stage 'b'"):
            runtime.reject_gate("c-3", "b", "alice", "no")
        from sagacity import ConfigurationError

        with pytest.raises(ConfigurationError, match="no workflow named 'other'"):
            runtime.start("other", 1)


@workflow("slow")
class Slow:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    @stage(order=1)
    def wait(self, x: int) -> int:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(10)
        return x


class TestTwoWorkers:
    @pytest.fixture
    def two(self, sqlite_url: str) -> Iterator[tuple[Sagacity, Sagacity]]:
        one, other = Sagacity.from_url(sqlite_url), Sagacity.from_url(sqlite_url)
        yield one, other
        one.close()
        other.close()

    def test_a_second_worker_cannot_resume_a_run_another_is_running(
        self, two: tuple[Sagacity, Sagacity]
    ) -> None:
        """While one worker runs a stage, another's resume is refused; the stage runs once."""
        one, other = two
        slow = Slow()
        first = WorkflowRuntime(one, [slow])
        second = WorkflowRuntime(other, [Slow()])
        handles: list[Any] = []
        worker = threading.Thread(target=lambda: handles.append(first.start("slow", 3, "s-1")))
        worker.start()
        assert slow.entered.wait(10)
        with pytest.raises(SagaBusyError):
            second.resume("s-1")
        slow.release.set()
        worker.join(10)
        assert handles[0].status is WorkflowStatus.COMPLETED
        assert slow.calls == 1
        assert second.resume("s-1").status is WorkflowStatus.COMPLETED
        assert verify(other.journal, "s-1").ok


def test_a_stage_resolved_not_run_runs_when_resumed() -> None:
    """A human's finding that an in-doubt stage did not run lets resume run it once."""
    sagacity = memory_sagacity()
    flow = Checked()
    runtime = WorkflowRuntime(sagacity, [flow])
    # The process died inside stage a: its INTENT is journaled with no outcome.
    start = runtime.definition("checked").start

    def died_inside_a() -> None:
        start.invoke((1,), call_id="workflow")
        sagacity.journal.append(
            "d-1",
            Phase.INTENT,
            tool_name="checked.a",
            call_id="a",
            payload={"input": {"x": 1}, "reversibility": "COMPENSATABLE"},
        )
        raise KeyboardInterrupt  # the process stops here: nothing else is written

    with pytest.raises(KeyboardInterrupt):
        sagacity.saga("d-1", died_inside_a)
    assert runtime.get("d-1").stages[0].status is StageStatus.IN_DOUBT
    assert runtime.resume("d-1").status is WorkflowStatus.NEEDS_ATTENTION
    assert flow.ran == []
    sagacity.resolve("d-1", "a", executed=False, by="operator-dana")
    assert runtime.resume("d-1").status is WorkflowStatus.COMPLETED
    assert flow.ran == ["a", "b"]


@workflow("quick-gate")
class QuickGate:
    def __init__(self) -> None:
        self.ran: list[str] = []

    @stage(order=1)
    @gate(reason="look quickly", timeout_seconds=1)
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send(self, x: int) -> int:
        self.ran.append(f"send {x}")
        return x


class TestApprovedThroughTheCore:
    def test_a_gate_approved_with_sagacity_approve_runs(self) -> None:
        """A gate is a core approval request: Sagacity.approve (the tool route) approves it."""
        sagacity = memory_sagacity()
        flow = QuickGate()
        runtime = WorkflowRuntime(sagacity, [flow])
        runtime.start("quick-gate", 7, run_id="q-1")
        (request,) = sagacity.pending("q-1")
        assert request.tool_name == "quick-gate.send"
        sagacity.approve("q-1", approver="alice", expected_sha256=request.input_sha256)
        assert runtime.resume("q-1").status is WorkflowStatus.COMPLETED
        assert flow.ran == ["send 7"]

    def test_an_approval_recorded_after_the_timeout_expires_the_gate(self) -> None:
        """Approved by the core's route after the gate's timeout: resume fails the run."""
        sagacity = memory_sagacity()
        flow = QuickGate()
        runtime = WorkflowRuntime(sagacity, [flow])
        runtime.start("quick-gate", 7, run_id="q-2")
        time.sleep(1.2)
        sagacity.approve("q-2", approver="alice")
        handle = runtime.resume("q-2")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert handle.stages[0].status is StageStatus.REJECTED
        assert flow.ran == []


@workflow("two-eyes")
class TwoEyes:
    def __init__(self) -> None:
        self.ran: list[int] = []

    @stage(order=1)
    @compensable(reversibility=Reversibility.IRREVERSIBLE, approvers=2)
    def wire(self, amount: int) -> int:
        self.ran.append(amount)
        return amount


class TestApproversOfAStage:
    def test_a_stage_declaring_two_approvers_waits_for_two_principals(self) -> None:
        """`approvers=2` holds for a stage as for a wrapped tool: one approval runs nothing."""
        sagacity = memory_sagacity()
        flow = TwoEyes()
        runtime = WorkflowRuntime(sagacity, [flow])
        handle = runtime.start("two-eyes", 5, run_id="t-1")
        assert handle.gate is not None
        assert handle.gate.approvers_required == 2
        runtime.approve_gate("t-1", "wire", "alice")
        assert runtime.resume("t-1").status is WorkflowStatus.PAUSED_AT_GATE
        assert flow.ran == []
        runtime.approve_gate("t-1", "wire", "bob")
        assert runtime.resume("t-1").status is WorkflowStatus.COMPLETED
        assert flow.ran == [5]
