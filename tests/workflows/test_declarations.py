"""Declarations are checked when the runtime is built: a typo fails at start-up."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity import ApproverGroup, ConfigurationError, Reversibility, Sagacity, compensable
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


@pytest.fixture
def sagacity() -> Sagacity:
    return memory_sagacity()


class Allow(StageCheck):
    def check(self, ctx: CheckContext) -> CheckResult:
        return CheckResult.ok()


class NeedsLimit(StageCheck):
    def __init__(self, limit: int) -> None:
        self.limit = limit

    def check(self, ctx: CheckContext) -> CheckResult:
        return CheckResult.ok() if ctx.value <= self.limit else CheckResult.fail("over")


def refused(sagacity: Sagacity, *workflows: object, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        WorkflowRuntime(sagacity, workflows)


class TestRefused:
    def test_duplicate_orders(self, sagacity: Sagacity) -> None:
        """Two stages with one order are refused, naming both."""

        @workflow("dup")
        class Dup:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

            @stage(order=1)
            def b(self, x: int) -> int:
                return x

        refused(sagacity, Dup, match=r"stages 'a' and 'b' both have order 1")

    def test_by_naming_nothing(self, sagacity: Sagacity) -> None:
        """A compensation name that the class does not define is refused, naming it."""

        @workflow("typo")
        class Typo:
            @stage(order=1)
            @compensable(by="relase")
            def reserve(self, x: int) -> int:
                return x

        refused(sagacity, Typo, match=r"stage 'reserve' names compensation 'relase'")

    def test_gate_on_a_non_stage(self, sagacity: Sagacity) -> None:
        """A gate on a method that is not a stage is refused."""

        @workflow("stray-gate")
        class StrayGate:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

            @gate(reason="forgot @stage")
            def b(self, x: int) -> int:
                return x

        refused(sagacity, StrayGate, match=r"b has @gate but is not a @stage")

    def test_check_on_a_non_stage(self, sagacity: Sagacity) -> None:
        """A check on a method that is not a stage is refused."""

        @workflow("stray-check")
        class StrayCheck:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

            @check(Allow)
            def b(self, x: int) -> int:
                return x

        refused(sagacity, StrayCheck, match=r"b has @check but is not a @stage")

    def test_first_stage_without_a_parameter(self, sagacity: Sagacity) -> None:
        """A first stage that takes nothing cannot take the run's input."""

        @workflow("no-input")
        class NoInput:
            @stage(order=1)
            def a(self) -> int:
                return 1

        refused(sagacity, NoInput, match=r"stage 'a' cannot take the run's input")

    def test_first_stage_with_two_required_parameters(self, sagacity: Sagacity) -> None:
        """A first stage needing two arguments cannot be given the one input."""

        @workflow("two-inputs")
        class TwoInputs:
            @stage(order=1)
            def a(self, x: int, y: int) -> int:
                return x + y

        refused(sagacity, TwoInputs, match=r"'y' has none")

    def test_later_stage_that_cannot_take_the_output(self, sagacity: Sagacity) -> None:
        """A later stage that takes nothing cannot receive the previous stage's output."""

        @workflow("no-chain")
        class NoChain:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

            @stage(order=2)
            def b(self) -> int:
                return 2

        refused(sagacity, NoChain, match=r"stage 'b' cannot take the previous stage's output")

    def test_two_workflows_with_one_name(self, sagacity: Sagacity) -> None:
        """Two workflow classes declaring one name are refused, naming both classes."""

        @workflow("twin")
        class One:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

        @workflow("twin")
        class Other:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

        refused(sagacity, One, Other, match=r"two workflows are named 'twin' \(.*One and .*Other\)")

    def test_not_a_workflow(self, sagacity: Sagacity) -> None:
        """A class without @workflow is refused."""

        class Plain:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

        refused(sagacity, Plain, match=r"Plain is not declared with @workflow")

    def test_no_stages(self, sagacity: Sagacity) -> None:
        """A workflow without stages is refused."""

        @workflow("empty")
        class Empty:
            pass

        refused(sagacity, Empty, match=r"has no @stage methods")

    def test_a_check_that_is_not_a_stage_check(self, sagacity: Sagacity) -> None:
        """A check must be a StageCheck subclass or instance."""

        @workflow("bad-check")
        class BadCheck:
            @stage(order=1)
            @check(dict)  # type: ignore[arg-type]
            def a(self, x: int) -> int:
                return x

        refused(sagacity, BadCheck, match=r"check dict is not a StageCheck subclass")

    def test_a_check_class_that_needs_arguments(self, sagacity: Sagacity) -> None:
        """A check class that needs arguments must be given as an instance."""

        @workflow("check-args")
        class CheckArgs:
            @stage(order=1)
            @check(NeedsLimit)
            def a(self, x: int) -> int:
                return x

        refused(sagacity, CheckArgs, match=r"pass an instance built with its arguments")

    @pytest.mark.parametrize("timeout", [-1, float("nan"), "60", True])
    def test_a_bad_gate_timeout(self, sagacity: Sagacity, timeout: Any) -> None:
        """A gate timeout must be a finite number of seconds ≥ 0."""

        @workflow("bad-timeout")
        class BadTimeout:
            @stage(order=1)
            @gate(timeout_seconds=timeout)
            @compensable(reversibility=Reversibility.IRREVERSIBLE)
            def a(self, x: int) -> int:
                return x

        refused(sagacity, BadTimeout, match=r"timeout_seconds must be a number")

    @pytest.mark.parametrize("name", ["", "has space", "dot.ted", "x" * 49])
    def test_a_bad_workflow_name(self, sagacity: Sagacity, name: str) -> None:
        """A workflow name becomes a tool-name prefix: letters, digits, '_' and '-' only."""

        @workflow(name)
        class Named:
            @stage(order=1)
            def a(self, x: int) -> int:
                return x

        refused(sagacity, Named, match=r"a workflow name is 1 to 48")

    def test_a_workflow_class_that_needs_services(self, sagacity: Sagacity) -> None:
        """A class whose constructor needs services must be given as an instance."""

        @workflow("needs-services")
        class NeedsServices:
            def __init__(self, bank: object) -> None:
                self.bank = bank

            @stage(order=1)
            def a(self, x: int) -> int:
                return x

        refused(sagacity, NeedsServices, match=r"pass an instance built with its services")
        assert WorkflowRuntime(sagacity, [NeedsServices(bank=object())]).workflows == (
            "needs-services",
        )


class TestAccepted:
    def test_orders_with_gaps_run_in_ascending_order_and_names_default(
        self, sagacity: Sagacity
    ) -> None:
        """Stages run by order, not by definition order; names default to method names."""
        seen: list[str] = []

        @workflow("gaps")
        class Gaps:
            @stage(order=30)
            def last(self, x: int) -> int:
                seen.append("last")
                return x * 10

            @stage(order=5, name="first-one")
            def first(self, x: int) -> int:
                seen.append("first")
                return x + 1

        runtime = WorkflowRuntime(sagacity, [Gaps])
        handle = runtime.start("gaps", 1, run_id="g-1")
        assert seen == ["first", "last"]
        assert [s.name for s in handle.stages] == ["first-one", "last"]
        assert handle.result == 20

    def test_check_instances_and_stacked_checks_run_in_written_order(
        self, sagacity: Sagacity
    ) -> None:
        """Checks run top to bottom, left to right; the first failure stops the stage."""
        ran: list[str] = []

        class Named(StageCheck):
            def __init__(self, name: str, ok: bool = True) -> None:
                self.name = name
                self.ok = ok

            def check(self, ctx: CheckContext) -> CheckResult:
                ran.append(self.name)
                return CheckResult.ok() if self.ok else CheckResult.fail(f"{self.name} says no")

        @workflow("ordered-checks")
        class Ordered:
            @stage(order=1)
            @check(Named("a"), Named("b"))
            @check(Named("c", ok=False))
            @check(Named("d"))
            def only(self, x: int) -> int:
                return x

        handle = WorkflowRuntime(sagacity, [Ordered]).start("ordered-checks", 1, run_id="o-1")
        assert ran == ["a", "b", "c"]
        assert handle.stages[0].reason == "c says no"


def test_two_runtimes_on_one_sagacity(sagacity: Sagacity) -> None:
    """Built again with the same class, a workflow is replaced; another class is refused."""

    @workflow("again")
    class Again:
        @stage(order=1)
        def a(self, x: int) -> int:
            return x

    @workflow("again")
    class Impostor:
        @stage(order=1)
        def a(self, x: int) -> int:
            return -x

    WorkflowRuntime(sagacity, [Again()])
    assert WorkflowRuntime(sagacity, [Again()]).start("again", 2, run_id="x").result == 2
    refused(sagacity, Impostor, match=r"two workflows are named 'again' on this Sagacity")


def test_a_stage_tool_name_taken_by_a_wrapped_tool(sagacity: Sagacity) -> None:
    """A tool wrapped under a stage's tool name is refused: its undo would be replaced."""

    @compensable(by=lambda: None, name="taken.a")
    def tool(x: int) -> int:
        return x

    sagacity.wrap(tool)

    @workflow("taken")
    class Taken:
        @stage(order=1)
        def a(self, x: int) -> int:
            return x

    refused(sagacity, Taken, match=r"a tool named 'taken.a' is wrapped in this Sagacity")


def test_a_tool_wrapped_later_under_a_stage_tool_name(sagacity: Sagacity) -> None:
    """The other order: a tool wrapped after the runtime under a stage's tool name.

    So is one under the workflow's own; the run is still undone by the stage's own undo.
    """
    undone: list[str] = []

    @workflow("later")
    class Later:
        @stage(order=1)
        @compensable(by="undo")
        def a(self, x: int) -> int:
            return x

        def undo(self) -> None:
            undone.append("the stage's own")

        @stage(order=2)
        @gate(reason="look")
        def b(self, x: int) -> int:
            return x

    runtime = WorkflowRuntime(sagacity, [Later()])
    for name in ("later.a", "later"):

        @compensable(by=lambda: undone.append("another tool's"), name=name)
        def impostor(x: int) -> int:
            return x

        with pytest.raises(ConfigurationError, match=rf"the tool name '{name}' belongs to"):
            sagacity.wrap(impostor)
    runtime.start("later", 1, run_id="l-1")
    assert runtime.reject_gate("l-1", "b", "bob", "no").status is WorkflowStatus.COMPENSATED
    assert undone == ["the stage's own"]


def _payout(escalate_to: str, *, log: list[str]) -> type:
    """A fresh class of workflow 'all-or-nothing' whose gate escalates to `escalate_to`."""

    @workflow("all-or-nothing")
    class Payout:
        @stage(order=1)
        @compensable(by="release")
        def hold(self, amount: int) -> int:
            log.append(f"hold {amount}")
            return amount

        def release(self) -> None:
            log.append("release")

        @stage(order=2)
        @gate(reason="money leaves", timeout_seconds=600, escalate_to=escalate_to)
        def pay(self, amount: int) -> int:
            log.append(f"pay {amount}")
            return amount

    return Payout


class TestAllOrNothing:
    """A refused declaration registers nothing: the corrected one is built as if first."""

    @pytest.fixture
    def grouped(self) -> Sagacity:
        return Sagacity.from_url(
            "memory://",
            approver_groups=[ApproverGroup(name="leads", members=["carol"], ttl=600)],
        )

    def test_a_refused_gate_leaves_no_stage_registered(self, grouped: Sagacity) -> None:
        """The gate of stage 2 is refused: stage 1's undo, names and owner are not kept."""
        log: list[str] = []
        refused(grouped, _payout("nobody", log=log), match=r"stage 'pay'.*'nobody'")
        assert grouped._registry.get("all-or-nothing.hold") is None
        assert grouped._registry.reserved_by("all-or-nothing.hold") is None
        assert grouped._registry.reserved_by("all-or-nothing") is None

        @compensable(by=lambda: None, name="all-or-nothing.hold")
        def hold(amount: int) -> int:
            return amount

        # The name is free: no half-built workflow holds it.
        (wrapped,) = memory_sagacity().wrap(hold)  # control: the name itself is valid
        assert grouped.wrap(hold)[0].name == wrapped.name == "all-or-nothing.hold"

    def test_the_corrected_declaration_is_built_after_a_refusal(self, grouped: Sagacity) -> None:
        """A new class under the same name, its gate fixed, builds and runs; its gate escalates."""
        log: list[str] = []
        refused(grouped, _payout("nobody", log=log), match=r"escalate_to='nobody'")
        runtime = WorkflowRuntime(grouped, [_payout("leads", log=log)])
        paused = runtime.start("all-or-nothing", 7, run_id="aon-1")
        assert paused.status is WorkflowStatus.PAUSED_AT_GATE
        assert grouped.approval.escalations["all-or-nothing.pay"].escalate_to is not None
        rejected = runtime.reject_gate("aon-1", "pay", "carol", "no")
        assert rejected.status is WorkflowStatus.COMPENSATED
        assert log == ["hold 7", "release"]

    def test_a_refused_workflow_of_a_runtime_registers_none_of_the_others(
        self, grouped: Sagacity
    ) -> None:
        """Two workflows, the second refused: the first is not registered either."""

        @workflow("first-of-two")
        class First:
            @stage(order=1)
            @compensable(by="undo")
            def only(self, x: int) -> int:
                return x

            def undo(self) -> None:
                """Undo."""

        @workflow("first-of-two")
        class Other:
            @stage(order=1)
            def only(self, x: int) -> int:
                return -x

        refused(grouped, First, _payout("nobody", log=[]), match=r"'nobody'")
        assert grouped._registry.get("first-of-two.only") is None
        # Had First been registered, another class under its name would be refused.
        other = WorkflowRuntime(grouped, [Other])
        assert other.start("first-of-two", 3, run_id="fot-1").result == -3

    def test_a_refused_stage_escalation_registers_nothing(self, grouped: Sagacity) -> None:
        """A stage's own `compensable(escalate_to=)` refused: no stage of it is registered."""

        @workflow("own-escalation")
        class OwnEscalation:
            @stage(order=1)
            @compensable(by="undo")
            def first(self, x: int) -> int:
                return x

            def undo(self) -> None:
                """Undo."""

            @stage(order=2)
            @compensable(reversibility=Reversibility.IRREVERSIBLE, escalate_to="nobody")
            def second(self, x: int) -> int:
                return x

        refused(grouped, OwnEscalation, match=r"stage 'second': tool 'own-escalation.second'")
        assert grouped._registry.get("own-escalation.first") is None
        assert grouped._registry.reserved_by("own-escalation.second") is None
