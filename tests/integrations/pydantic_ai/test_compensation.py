"""Scenario 1 and the hot path: PydanticAI swallows a failure, the saga still compensates."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import warnings
from typing import Any

import pytest
from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolset,
    RunContext,
    ToolDenied,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition

from sagacity import (
    CompensationContext,
    CurrentCall,
    FailureKind,
    NoSagaError,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    compensable,
    verify,
)
from sagacity.integrations.pydantic_ai import SagaCapability, classify_exception, saga_toolset
from tests.integrations.pydantic_ai._agents import (
    OrderTools,
    ScriptedModel,
    agent_with,
    call,
    journal_of,
)

ORDER = [
    [call("reserve_inventory", "call-1", sku="SKU-1", qty=2)],
    [call("charge_card", "call-2", amount_cents=1999)],
    [call("ship_order", "call-3", address="1 Main St")],
    "Done: your order is on its way.",
]
"""The scripted model: three tools, the third fails, then it claims success."""

JOURNAL = [
    ("INTENT", "reserve_inventory", "call-1"),
    ("EXECUTED", "reserve_inventory", "call-1"),
    ("INTENT", "charge_card", "call-2"),
    ("EXECUTED", "charge_card", "call-2"),
    ("INTENT", "ship_order", "call-3"),
    ("FAILED", "ship_order", "call-3"),
    ("COMPENSATING", "charge_card", "call-2"),
    ("COMPENSATED", "charge_card", "call-2"),
    ("COMPENSATING", "reserve_inventory", "call-1"),
    ("COMPENSATED", "reserve_inventory", "call-1"),
    ("ENDED", None, None),
]
UNDONE = [("refund_card", "ch-1999"), ("release_inventory", "res-SKU-1-2")]


@dataclasses.dataclass
class RecoverToolErrors(AbstractCapability[Any]):
    """A capability that turns any tool error into a result the model reads as success."""

    async def on_tool_execute_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        error: Exception,
    ) -> Any:
        return f"could not do it: {error}"


SWALLOWING = {
    "ToolFailed": (ToolFailed("the carrier is not answering"), [], "failed"),
    "on_tool_execute_error": (RuntimeError("carrier down"), [RecoverToolErrors()], "success"),
}
"""PydanticAI's two ways of handing a tool's failure to the model: (error, capabilities,
the outcome the model is shown)."""


def current_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's current event loop, as PydanticAI's `run_sync` finds it; None if unset."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return asyncio.get_event_loop()
    except RuntimeError:
        return None


class TestSwallowedFailure:
    @pytest.mark.parametrize("config", SWALLOWING.keys())
    async def test_swallowed_failure_compensates_in_reverse_order(
        self, sagacity: Sagacity, config: str
    ) -> None:
        """A swallowed failure still ends the saga COMPENSATED, in reverse order.

        The third tool fails, PydanticAI tells the model, the model says done; the charge is
        refunded, then the stock released.
        """
        error, capabilities, shown = SWALLOWING[config]
        shop = OrderTools(ship_error=error)
        model = ScriptedModel(*ORDER)
        agent = agent_with(model, saga_toolset(sagacity, shop), capabilities=capabilities)

        result = await sagacity.asaga("order-1", lambda: agent.run("Ship two SKU-1."))

        assert result.value.output == "Done: your order is on its way."
        assert result.error is error  # swallowed by the framework, still known
        assert [outcome for _, outcome, _ in model.tool_returns()] == ["success", "success", shown]
        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "order-1") == JOURNAL
        assert shop.undone == UNDONE
        failed = sagacity.history("order-1")[5].payload
        assert failed["kind"] == "failure"
        assert failed["error"]["type"] == type(error).__name__
        assert verify(sagacity.journal, "order-1").ok

    def test_swallowed_failure_under_run_sync_compensates(self, sagacity: Sagacity) -> None:
        """`agent.run_sync` inside `Sagacity.saga` compensates the same way.

        The saga reaches the tools through PydanticAI's own event loop, and the async refund
        runs too, on a loop of its own: the loop `run_sync` keeps for reuse is still this
        thread's current loop afterwards.
        """
        shop = OrderTools()
        agent = agent_with(ScriptedModel(*ORDER), saga_toolset(sagacity, shop))
        kept: list[asyncio.AbstractEventLoop] = []

        def work() -> Any:
            output = agent.run_sync("Ship two SKU-1.")
            kept.append(current_loop())
            return output

        try:
            result = sagacity.saga("order-2", work)
            assert current_loop() is kept[0]
        finally:
            # run_sync leaves its loop as the thread's current one; the next test's loop
            # would orphan it, unclosed.
            kept[0].close()

        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "order-2") == JOURNAL
        assert shop.undone == UNDONE

    async def test_uncaught_failure_escapes_the_run_and_compensates(
        self, sagacity: Sagacity
    ) -> None:
        """An exception PydanticAI does not swallow is reported and compensated.

        The run raises it; the saga reports it and compensates.
        """
        shop = OrderTools(ship_error=RuntimeError("carrier down"))
        agent = agent_with(ScriptedModel(*ORDER[:3]), saga_toolset(sagacity, shop))

        result = await sagacity.asaga("order-3", lambda: agent.run("Ship two SKU-1."))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, RuntimeError)
        assert str(result.error) == "carrier down"
        assert shop.undone == UNDONE


class TestCallIdsAndInput:
    async def test_call_ids_and_context_reach_sync_and_async_tools(
        self, sagacity: Sagacity
    ) -> None:
        """The journal's call ids are PydanticAI's tool_call_ids.

        `current_call()` gives them inside the sync tool (a worker thread) and the async one
        (a task).
        """
        shop = OrderTools()
        agent = agent_with(ScriptedModel(*ORDER), saga_toolset(sagacity, shop))

        await sagacity.asaga("order-4", lambda: agent.run("Ship two SKU-1."))

        loop_thread = threading.get_ident()
        assert shop.threads[0] != loop_thread  # the sync tool ran in a worker thread
        assert shop.threads[1] == loop_thread  # the async one on the loop
        assert shop.seen == [
            CurrentCall("order-4", "call-1", "reserve_inventory"),
            CurrentCall("order-4", "call-2", "charge_card"),
            CurrentCall("order-4", "call-3", "ship_order"),
        ]

    async def test_input_is_the_validated_arguments_without_run_context(
        self, sagacity: Sagacity
    ) -> None:
        """The journaled input is the validated arguments, without RunContext.

        It is what the model sent, validated, with defaults applied; the RunContext PydanticAI
        passes to `ship_order` is left out.
        """
        model = ScriptedModel(
            [call("reserve_inventory", "call-1", sku="SKU-9")],
            [call("charge_card", "call-2", amount_cents="250")],
            [call("ship_order", "call-3", address="1 Main St")],
            "done",
        )
        agent = agent_with(model, saga_toolset(sagacity, OrderTools()))

        await sagacity.asaga("order-5", lambda: agent.run("go"))

        intents = [e.payload for e in sagacity.history("order-5") if e.phase.name == "INTENT"]
        assert [intent["input"] for intent in intents] == [
            {"sku": "SKU-9", "qty": 1},
            {"amount_cents": 250},
            {"address": "1 Main St"},
        ]
        assert {intent["reversibility"] for intent in intents} == {"COMPENSATABLE"}

    async def test_results_reach_the_model_as_the_tool_returned_them(
        self, sagacity: Sagacity
    ) -> None:
        """What the model is given is the unwrapped tool's return value."""
        model = ScriptedModel(ORDER[0], ORDER[1], "done")
        agent = agent_with(model, saga_toolset(sagacity, OrderTools()))

        await sagacity.asaga("order-6", lambda: agent.run("go"))

        assert model.tool_returns() == [
            ("call-1", "success", "res-SKU-1-2"),
            ("call-2", "success", "ch-1999"),
        ]


class TestFrameworkExceptions:
    async def test_model_retry_is_retryable_and_the_retry_has_a_new_call_id(
        self, sagacity: Sagacity
    ) -> None:
        """ModelRetry is retryable, and the retry has a new call id.

        It journals FAILED `retryable` without failing the saga; the model's retry is a new call
        with a new id, and the saga completes.
        """
        attempts: list[str] = []

        def book_room(room: str) -> str:
            """Book a room."""
            attempts.append(room)
            if len(attempts) == 1:
                raise ModelRetry("room 7 is being cleaned, ask again")
            return f"booking-{room}"

        book_room = compensable(by=lambda: None)(book_room)
        model = ScriptedModel(
            [call("book_room", "call-1", room="7")],
            [call("book_room", "call-2", room="7")],
            "Booked.",
        )
        agent = agent_with(model, saga_toolset(sagacity, book_room))

        result = await sagacity.asaga("hotel-1", lambda: agent.run("book 7"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert [outcome for _, outcome, _ in model.tool_returns()] == ["retried", "success"]
        assert journal_of(sagacity, "hotel-1") == [
            ("INTENT", "book_room", "call-1"),
            ("FAILED", "book_room", "call-1"),
            ("INTENT", "book_room", "call-2"),
            ("EXECUTED", "book_room", "call-2"),
            ("ENDED", None, None),
        ]
        assert sagacity.history("hotel-1")[1].payload["kind"] == "retryable"

    async def test_timed_out_tool_is_in_doubt_not_retryable(self, sagacity: Sagacity) -> None:
        """A tool that timed out is in doubt, not retryable.

        PydanticAI reports it as a ModelRetry, but the tool may have acted: the call is in doubt
        (never compensated) and the saga fails.
        """
        shop = OrderTools()

        @compensable(by=lambda: shop.undone.append(("unlock", None)))
        async def unlock_door(door: str) -> str:
            """Unlock a door."""
            await asyncio.Event().wait()  # never answers
            return "unlocked"

        model = ScriptedModel(ORDER[0], [call("unlock_door", "call-2", door="front")], "done")
        agent = agent_with(
            model, saga_toolset(sagacity, shop), saga_toolset(sagacity, unlock_door, timeout=0.05)
        )

        result = await sagacity.asaga("door-1", lambda: agent.run("go"))

        assert model.tool_returns()[1] == ("call-2", "retried", "Timed out after 0.05 seconds.")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert journal_of(sagacity, "door-1")[2:4] == [
            ("INTENT", "unlock_door", "call-2"),
            ("FAILED", "unlock_door", "call-2"),
        ]
        assert sagacity.history("door-1")[3].payload["kind"] == "outcome_unknown"
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-2"]
        assert shop.undone == [("release_inventory", "res-SKU-1-2")]

    async def test_call_deferred_passes_through_without_failing_the_saga(
        self, sagacity: Sagacity
    ) -> None:
        """CallDeferred passes through without failing the saga, which stays open.

        A tool that defers itself is control flow: the run ends with DeferredToolRequests, the
        call is journaled FAILED `control_flow` (its effect may exist: see
        TestEffectBeforeControlFlow), and the saga is SUSPENDED so that the run can be resumed
        with the deferred results.
        """

        @compensable(by=lambda: None)
        def print_label(order: str) -> str:
            """Print a shipping label on the warehouse printer."""
            raise CallDeferred(metadata={"printer": "dock-2"})

        model = ScriptedModel([call("print_label", "call-1", order="o-1")])
        agent = agent_with(model, saga_toolset(sagacity, print_label), deferred=True)

        result = await sagacity.asaga("label-1", lambda: agent.run("print"))

        output = result.value.output
        assert isinstance(output, DeferredToolRequests)
        assert [c.tool_call_id for c in output.calls] == ["call-1"]
        assert output.metadata == {"call-1": {"printer": "dock-2"}}
        assert result.outcome is SagaOutcome.SUSPENDED
        assert sagacity.history("label-1")[1].payload["kind"] == "control_flow"

    def test_classifier_values(self) -> None:
        """The classifier sagacity is taught: control flow, retry, timeout; else no say."""
        try:
            raise TimeoutError
        except TimeoutError:
            try:
                raise ModelRetry("Timed out after 1 seconds.") from None
            except ModelRetry as retry:
                timed_out = retry
        assert classify_exception(CallDeferred()) is FailureKind.CONTROL_FLOW
        assert classify_exception(ApprovalRequired()) is FailureKind.CONTROL_FLOW
        assert classify_exception(ModelRetry("again")) is FailureKind.RETRYABLE
        assert classify_exception(timed_out) is FailureKind.OUTCOME_UNKNOWN
        assert classify_exception(ToolFailed("no")) is None
        assert classify_exception(RuntimeError("no")) is None


class Printer:
    """A label printer whose tool prints first, then leaves the rest to the framework.

    `then` is what `print_label` raises after printing; every label printed and every
    undo is logged.
    """

    def __init__(self, then: BaseException) -> None:
        self.then = then
        self.printed: list[str] = []
        self.undone: list[Any] = []

    @compensable(by="void_label")
    def print_label(self, order: str) -> str:
        """Print a shipping label."""
        self.printed.append(order)
        raise self.then

    def void_label(self, ctx: CompensationContext) -> None:
        self.undone.append(ctx.call_id)


class TestEffectBeforeControlFlow:
    async def test_model_retry_after_the_effect_with_no_retry_is_in_doubt(
        self, sagacity: Sagacity
    ) -> None:
        """A tool that acts, then raises ModelRetry, which no later call answers: in doubt.

        The model gives up and says "done"; the saga fails, the step before is undone, and
        the label, which may have been printed, is listed in doubt, never voided blindly.
        """
        shop, printer = OrderTools(), Printer(ModelRetry("the printer jammed, try again"))
        model = ScriptedModel(ORDER[0], [call("print_label", "call-2", order="o-1")], "Done.")
        agent = agent_with(model, saga_toolset(sagacity, shop), saga_toolset(sagacity, printer))

        result = await sagacity.asaga("label-2", lambda: agent.run("Ship it."))

        assert printer.printed == ["o-1"]
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert isinstance(result.error, SagaStateError)
        assert "'call-2' of tool 'print_label' failed asking for a retry" in str(result.error)
        assert journal_of(sagacity, "label-2") == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("INTENT", "print_label", "call-2"),
            ("FAILED", "print_label", "call-2"),
            ("COMPENSATING", "reserve_inventory", "call-1"),
            ("COMPENSATED", "reserve_inventory", "call-1"),
            ("ENDED", None, None),
        ]
        assert sagacity.history("label-2")[3].payload["kind"] == "retryable"
        report = result.compensation
        assert report is not None
        assert [(ref.call_id, ref.error) for ref in report.in_doubt] == [
            (
                "call-2",
                "the tool raised asking for a retry after it started, and no retry succeeded: "
                "ModelRetry: the printer jammed, try again",
            )
        ]
        assert printer.undone == []
        assert shop.undone == [("release_inventory", "res-SKU-1-2")]

    async def test_model_retry_answered_by_a_later_success_is_settled_by_it(
        self, sagacity: Sagacity
    ) -> None:
        """A retry the model follows is answered by the later call's success.

        The retried attempt is then neither in doubt nor compensated: the later call is the
        step, and its compensation undoes it. (Raise ModelRetry only before the tool acts.)
        """
        attempts: list[str] = []
        voided: list[str] = []

        def void_label(ctx: CompensationContext) -> None:
            voided.append(ctx.call_id)

        @compensable(by=void_label)
        def print_label(order: str) -> str:
            """Print a shipping label."""
            attempts.append(order)
            if len(attempts) == 1:
                raise ModelRetry("name the dock")
            return f"label-{order}"

        shop = OrderTools()
        model = ScriptedModel(
            [call("print_label", "call-1", order="o-1")],
            [call("print_label", "call-2", order="o-1")],
            [call("ship_order", "call-3", address="1 Main St")],
            "Done.",
        )
        agent = agent_with(model, saga_toolset(sagacity, print_label), saga_toolset(sagacity, shop))

        result = await sagacity.asaga("label-3", lambda: agent.run("Ship it."))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert voided == ["call-2"]
        assert result.compensation is not None
        assert result.compensation.in_doubt == []

    async def test_call_deferred_after_the_effect_stays_in_doubt(self, sagacity: Sagacity) -> None:
        """A tool that acts, then raises CallDeferred, stays in doubt once answered from outside.

        The run is resumed with the external result: PydanticAI gives it to the model
        without calling the tool again, so nothing tells sagacity whether the tool acted.
        When a later step fails, the label is listed in doubt and not voided blindly.
        """
        shop, printer = OrderTools(), Printer(CallDeferred(metadata={"printer": "dock-2"}))
        model = ScriptedModel(
            [call("print_label", "call-1", order="o-1")],
            [call("ship_order", "call-2", address="1 Main St")],
            "Done.",
        )
        agent = agent_with(
            model, saga_toolset(sagacity, shop), saga_toolset(sagacity, printer), deferred=True
        )
        paused = await sagacity.asaga("label-4", lambda: agent.run("Ship it."))
        assert paused.outcome is SagaOutcome.SUSPENDED

        result = await sagacity.aresume_saga(
            "label-4",
            lambda: agent.run(
                message_history=paused.value.all_messages(),
                deferred_tool_results=DeferredToolResults(calls={"call-1": "label-7"}),
            ),
        )

        assert printer.printed == ["o-1"]
        assert model.tool_returns()[0] == ("call-1", "success", "label-7")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert journal_of(sagacity, "label-4") == [
            ("INTENT", "print_label", "call-1"),
            ("FAILED", "print_label", "call-1"),
            ("INTENT", "ship_order", "call-2"),
            ("FAILED", "ship_order", "call-2"),
            ("ENDED", None, None),
        ]
        report = result.compensation
        assert report is not None
        assert [(ref.call_id, ref.error) for ref in report.in_doubt] == [
            (
                "call-1",
                "the framework left the tool mid-call, and did not run it again: CallDeferred: ",
            )
        ]
        assert printer.undone == []

    async def test_a_suspended_saga_abandoned_lists_the_deferred_call_in_doubt(
        self, sagacity: Sagacity
    ) -> None:
        """Abandoning a saga whose tool deferred itself after acting: the call is in doubt."""
        printer = Printer(CallDeferred())
        model = ScriptedModel([call("print_label", "call-1", order="o-1")])
        agent = agent_with(model, saga_toolset(sagacity, printer), deferred=True)
        await sagacity.asaga("label-5", lambda: agent.run("Print it."))

        result = sagacity.compensate("label-5")

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-1"]
        assert printer.undone == []

    @pytest.mark.parametrize("decision", ["approved", "denied"])
    async def test_approval_required_by_another_toolset_is_settled_by_the_re_run(
        self, sagacity: Sagacity, decision: str
    ) -> None:
        """Under the capability, a tool of PydanticAI's approval toolset pauses after its INTENT.

        Approved, PydanticAI calls it again under the same id: that run settles the first.
        Denied, it is never called again, so the first stays in doubt: when a later step
        fails, the saga ends NEEDS_ATTENTION naming it.
        """
        sent: list[str] = []

        def send_email(to: str) -> str:
            """Send an e-mail."""
            sent.append(to)
            return "msg-1"

        def close_ticket(ticket: int) -> str:
            """Close a support ticket."""
            raise RuntimeError(f"no ticket {ticket}")

        gated = FunctionToolset([send_email]).approval_required(lambda ctx, tool_def, args: True)
        model = ScriptedModel(
            [call("send_email", "call-1", to="ops@shop")],
            [call("close_ticket", "call-2", ticket=-1)],
            "Done.",
        )
        agent = agent_with(
            model,
            gated,
            FunctionToolset([close_ticket]),
            capabilities=[
                SagaCapability(
                    sagacity,
                    compensations={"send_email": lambda: None, "close_ticket": lambda: None},
                )
            ],
            deferred=True,
        )
        paused = await sagacity.asaga("mail-1", lambda: agent.run("Mail ops."))
        assert paused.outcome is SagaOutcome.SUSPENDED
        answer = True if decision == "approved" else ToolDenied("no mail today")

        result = await sagacity.aresume_saga(
            "mail-1",
            lambda: agent.run(
                message_history=paused.value.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"call-1": answer}),
            ),
        )

        journal = journal_of(sagacity, "mail-1")
        assert journal[:2] == [
            ("INTENT", "send_email", "call-1"),
            ("FAILED", "send_email", "call-1"),
        ]
        assert sagacity.history("mail-1")[1].payload["kind"] == "control_flow"
        assert result.compensation is not None
        if decision == "approved":
            assert sent == ["ops@shop"]
            assert journal[2:4] == [
                ("INTENT", "send_email", "call-1"),
                ("EXECUTED", "send_email", "call-1"),
            ]
            assert result.outcome is SagaOutcome.COMPENSATED
            assert [ref.call_id for ref in result.compensation.compensated] == ["call-1"]
        else:
            assert sent == []
            assert result.outcome is SagaOutcome.NEEDS_ATTENTION
            assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-1"]


class TestOutsideASaga:
    async def test_tools_run_unjournaled_outside_a_saga(self, sagacity: Sagacity) -> None:
        """Without a saga the toolset is the plain toolset: tools run, nothing is journaled."""
        shop = OrderTools()
        model = ScriptedModel(ORDER[0], "done")
        agent = agent_with(model, saga_toolset(sagacity, shop))

        result = await agent.run("go")

        assert result.output == "done"
        assert shop.calls == [("reserve_inventory", {"sku": "SKU-1", "qty": 2})]
        assert shop.seen == [None]
        assert sagacity.journal.list_sagas() == []

    async def test_irreversible_tool_refuses_outside_a_saga(self, sagacity: Sagacity) -> None:
        """An IRREVERSIBLE tool called with no saga open raises NoSagaError and does not run."""
        shop = OrderTools()
        model = ScriptedModel([call("send_wire", "call-1", amount="10", to="bob")])
        agent = agent_with(model, saga_toolset(sagacity, shop))

        with pytest.raises(NoSagaError, match="send_wire"):
            await agent.run("go")
        assert shop.calls == []


class TestOtherToolsets:
    async def test_toolset_of_functions_keeps_working_beside_the_saga_toolset(
        self, sagacity: Sagacity
    ) -> None:
        """A plain FunctionToolset beside `saga_toolset` is left alone.

        Its calls are not journaled; put it under `SagaCapability` to journal them.
        """

        def lookup_stock(sku: str) -> int:
            """How many are in stock."""
            return 5

        model = ScriptedModel([call("lookup_stock", "call-1", sku="A")], ORDER[0], "done")
        agent = agent_with(
            model, FunctionToolset([lookup_stock]), saga_toolset(sagacity, OrderTools())
        )

        await sagacity.asaga("mixed-1", lambda: agent.run("go"))

        assert [tool for _, tool, _ in journal_of(sagacity, "mixed-1")] == [
            "reserve_inventory",
            "reserve_inventory",
            None,
        ]
