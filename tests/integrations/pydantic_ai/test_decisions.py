"""What PydanticAI and sagacity each decide about one call, and the attacks on them.

Two IRREVERSIBLE calls of which sagacity approved one, a denial in PydanticAI, one call id
used for two calls, and an approval of one tool offered to another.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessage,
    ModelResponse,
    ToolCallPart,
    ToolDenied,
)
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.exceptions import UnexpectedModelBehavior, UserError
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from sagacity import (
    ApprovalHashMismatchError,
    ApprovalRejectedError,
    ApprovalToolMismatchError,
    ReplayMismatchError,
    Sagacity,
    SagaOutcome,
    verify,
)
from sagacity.integrations.pydantic_ai import DENIAL_SOURCE, saga_toolset
from sagacity.testing import FakeClock, memory_sagacity
from tests.integrations.pydantic_ai._agents import (
    OrderTools,
    ScriptedModel,
    agent_with,
    call,
    counts,
    journal_of,
)
from tests.integrations.pydantic_ai.test_approval import WIRE
from tests.integrations.pydantic_ai.test_capability import Helpdesk, capability

WIRE_B = {"amount": "75.00", "to": "FR76 3000 6000 0112 3456 7890 189"}
SAGA = "payout-2"
TWO_WIRES = [call("send_wire", "w-1", **WIRE), call("send_wire", "w-2", **WIRE_B)]
"""One model response asking for two wires."""


class Shop:
    """An `OrderTools` with one agent on a scripted model: pause, resume, inspect."""

    def __init__(self, sagacity: Sagacity, *turns: Any) -> None:
        self.sagacity = sagacity
        self.tools = OrderTools()
        self.model = ScriptedModel(*turns)
        self.agent = agent_with(self.model, saga_toolset(sagacity, self.tools), deferred=True)

    async def pause(self) -> Any:
        """Run until the run ends with DeferredToolRequests; return the run's result."""
        result = await self.sagacity.asaga(SAGA, lambda: self.agent.run("Pay the suppliers."))
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        return result.value

    async def resume(self, messages: list[ModelMessage], **approvals: Any) -> Any:
        """Resume natively: the messages and PydanticAI's own decision on each call."""
        return await self.sagacity.aresume_saga(
            SAGA,
            lambda: self.agent.run(
                message_history=messages,
                deferred_tool_results=DeferredToolResults(approvals=approvals),
            ),
        )

    def request_id(self, call_id: str) -> str:
        """The id of the pending request of a call."""
        (request,) = [r for r in self.sagacity.pending(SAGA) if r.call_id == call_id]
        return request.request_id


def edited(messages: list[ModelMessage], call_id: str, **changes: Any) -> list[ModelMessage]:
    """The messages with one tool call changed, as someone holding the paused state could."""
    found = False

    def edit(message: ModelMessage) -> ModelMessage:
        nonlocal found
        if not isinstance(message, ModelResponse):
            return message
        parts = []
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
                part = dataclasses.replace(part, **changes)
                found = True
            parts.append(part)
        return dataclasses.replace(message, parts=parts)

    changed = [edit(message) for message in messages]
    assert found
    return changed


def with_duplicate(messages: list[ModelMessage], call_id: str, **args: Any) -> list[ModelMessage]:
    """The messages with a second call of the same tool under `call_id`, other arguments."""
    response = messages[-1]
    assert isinstance(response, ModelResponse)
    (original,) = [p for p in response.parts if getattr(p, "tool_call_id", None) == call_id]
    assert isinstance(original, ToolCallPart)
    extra = dataclasses.replace(original, args=args)
    return [*messages[:-1], dataclasses.replace(response, parts=[*response.parts, extra])]


@dataclasses.dataclass
class CountCalls(WrapperToolset[Any]):
    """Records every call id that reaches the toolset."""

    seen: list[str | None] = dataclasses.field(default_factory=list)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        self.seen.append(ctx.tool_call_id)
        return await super().call_tool(name, tool_args, ctx, tool)


class TestOneOfTwoApproved:
    async def test_the_unapproved_call_is_deferred_again_and_the_approved_runs_once(
        self, sagacity: Sagacity
    ) -> None:
        """Both approved in PydanticAI, one in sagacity: that one runs, once; the other waits.

        The run pauses again with the other call alone, under the same request (still
        approvable); once it is approved too, the next resume runs it, and only it.
        """
        shop = Shop(sagacity, TWO_WIRES, "Both wires are sent.")
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops", request_id=shop.request_id("w-1"))
        w2_request = shop.request_id("w-2")

        again = await shop.resume(first.all_messages(), **{"w-1": True, "w-2": True})

        assert again.outcome is SagaOutcome.AWAITING_APPROVAL
        output = again.value.output
        assert isinstance(output, DeferredToolRequests)
        assert [c.tool_call_id for c in output.approvals] == ["w-2"]
        assert output.metadata["w-2"]["sagacity"]["request_id"] == w2_request
        assert shop.tools.calls == [("send_wire", WIRE)]
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("AWAITING_APPROVAL", "send_wire", "w-2"),
            ("APPROVED", "send_wire", "w-1"),
            ("INTENT", "send_wire", "w-1"),
            ("EXECUTED", "send_wire", "w-1"),
        ]
        [pending] = sagacity.pending(SAGA)
        assert (pending.call_id, pending.state) == ("w-2", "waiting")
        assert pending.request_id == w2_request

        sagacity.approve(SAGA, approver="bob@ops", request_id=w2_request)
        done = await shop.resume(again.value.all_messages(), **{"w-2": True})

        assert done.outcome is SagaOutcome.COMPLETED
        assert done.value.output == "Both wires are sent."
        assert shop.tools.calls == [("send_wire", WIRE), ("send_wire", WIRE_B)]
        assert journal_of(sagacity, SAGA)[5:] == [
            ("APPROVED", "send_wire", "w-2"),
            ("INTENT", "send_wire", "w-2"),
            ("EXECUTED", "send_wire", "w-2"),
            ("ENDED", None, None),
        ]
        assert [(i, o) for i, o, _ in shop.model.tool_returns()] == [
            ("w-1", "success"),
            ("w-2", "success"),
        ]
        assert verify(sagacity.journal, SAGA).ok

    async def test_resuming_the_first_pause_again_runs_neither_call_twice(
        self, sagacity: Sagacity
    ) -> None:
        """Resuming from the first pause again, after both approvals, runs each wire once.

        The call that ran is replayed from the journal; only the other one runs.
        """
        shop = Shop(sagacity, TWO_WIRES, "Sent.")
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops", request_id=shop.request_id("w-1"))
        await shop.resume(first.all_messages(), **{"w-1": True, "w-2": True})
        sagacity.approve(SAGA, approver="bob@ops", request_id=shop.request_id("w-2"))

        done = await shop.resume(first.all_messages(), **{"w-1": True, "w-2": True})

        assert done.outcome is SagaOutcome.COMPLETED
        assert counts(shop.tools) == {"send_wire": 2}
        assert [phase for phase, _, call_id in journal_of(sagacity, SAGA) if call_id == "w-1"] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "INTENT",
            "EXECUTED",
        ]

    async def test_a_refused_call_leaves_its_approved_sibling_to_finish(
        self, sagacity: Sagacity
    ) -> None:
        """A call refused on resume is deferred, not raised: its approved sibling finishes.

        The paused state is edited to wire w-2 elsewhere. Raised through PydanticAI, the
        refusal would cancel w-1 mid-call and leave an IRREVERSIBLE call in doubt; here w-1
        runs once, w-2 is refused (REFUSED in the journal) and not run, and the refusal is
        raised when the work returns. The saga stays open: the unedited resume runs w-2.
        """
        shop = Shop(sagacity, TWO_WIRES, "Sent.")
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops", request_id=shop.request_id("w-1"))
        sagacity.approve(SAGA, approver="bob@ops", request_id=shop.request_id("w-2"))
        tampered = edited(first.all_messages(), "w-2", args={**WIRE_B, "to": "attacker"})

        with pytest.raises(ApprovalHashMismatchError, match="input now hashes to"):
            await shop.resume(tampered, **{"w-1": True, "w-2": True})

        assert shop.tools.calls == [("send_wire", WIRE)]
        # Each call passes the approval gate twice (PydanticAI's check, then the call's
        # own), one gate at a time in the order of the calls: w-2's check comes before
        # w-1's INTENT.
        assert journal_of(sagacity, SAGA)[4:] == [
            ("REFUSED", "send_wire", "w-2"),
            ("INTENT", "send_wire", "w-1"),
            ("EXECUTED", "send_wire", "w-1"),
        ]
        refused = sagacity.history(SAGA)[4]
        assert refused.payload["reason"] == "input_mismatch"
        done = await shop.resume(first.all_messages(), **{"w-1": True, "w-2": True})
        assert done.outcome is SagaOutcome.COMPLETED
        assert shop.tools.calls == [("send_wire", WIRE), ("send_wire", WIRE_B)]


class TestExpiredOnResume:
    async def test_an_expired_request_is_asked_again_and_the_run_paused_on_it(self) -> None:
        """Resumed after its request expired, the call is asked again and deferred on the new one.

        The new request replaces the expired one in the journal; approved, it runs the call.
        """
        clock = FakeClock()
        sagacity = memory_sagacity(approval_ttl=60, clock=clock)
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)], "Sent.")
        first = await shop.pause()
        expired = shop.request_id("w-1")
        sagacity.approve(SAGA, approver="alice@ops")
        clock.advance(61)

        again = await shop.resume(first.all_messages(), **{"w-1": True})

        assert again.outcome is SagaOutcome.AWAITING_APPROVAL
        [renewed] = again.pending
        assert renewed.request_id != expired
        shown = again.value.output.metadata["w-1"]["sagacity"]
        assert (shown["request_id"], shown["state"]) == (renewed.request_id, "waiting")
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("APPROVED", "send_wire", "w-1"),
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
        ]
        assert sagacity.history(SAGA)[2].payload["replaces"] == expired
        assert shop.tools.calls == []
        sagacity.approve(SAGA, approver="alice@ops", request_id=renewed.request_id)
        done = await shop.resume(again.value.all_messages(), **{"w-1": True})
        assert done.outcome is SagaOutcome.COMPLETED
        assert shop.tools.calls == [("send_wire", WIRE)]


class TestDeniedInPydanticAI:
    async def test_pydantic_ai_never_calls_the_toolset_for_a_denied_call(
        self, sagacity: Sagacity
    ) -> None:
        """PydanticAI answers a denied call itself: no toolset sees it.

        This is why the adapter reads the denial from the run's messages, where PydanticAI
        records it as a tool result with outcome "denied".
        """
        shop = OrderTools()
        probe = CountCalls(saga_toolset(sagacity, shop))
        model = ScriptedModel([call("send_wire", "w-1", **WIRE)], "Not sent.")
        agent = agent_with(model, probe, deferred=True)
        first = await sagacity.asaga(SAGA, lambda: agent.run("Pay."))
        probe.seen.clear()

        await sagacity.aresume_saga(
            SAGA,
            lambda: agent.run(
                message_history=first.value.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"w-1": ToolDenied("no")}),
            ),
        )

        assert probe.seen == []
        assert model.tool_returns() == [("w-1", "denied", "no")]

    async def test_a_denial_is_journaled_as_a_rejection_and_the_call_never_runs(
        self, sagacity: Sagacity
    ) -> None:
        """`ToolDenied` in PydanticAI is journaled REJECTED, naming PydanticAI as its source.

        The request is consumed, nothing runs, and the saga goes on: the model is told, and
        the saga completes.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)], "The wire was not sent.")
        first = await shop.pause()
        request_id = shop.request_id("w-1")

        result = await shop.resume(first.all_messages(), **{"w-1": ToolDenied("not this week")})

        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value.output == "The wire was not sent."
        assert shop.tools.calls == []
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("REJECTED", "send_wire", "w-1"),
            ("ENDED", None, None),
        ]
        rejected = sagacity.history(SAGA)[1]
        assert (rejected.ref_seq, rejected.payload) == (
            1,
            {
                "request_id": request_id,
                "approver": None,
                "source": DENIAL_SOURCE,
                "reason": "not this week",
                "initiated_by": sagacity.history(SAGA)[0].payload["initiated_by"],
            },
        )
        assert DENIAL_SOURCE == "pydantic-ai ToolDenied"
        assert shop.model.tool_returns() == [("w-1", "denied", "not this week")]
        assert sagacity.pending(SAGA) == []
        assert verify(sagacity.journal, SAGA).ok

    async def test_a_denial_wins_over_an_approval_in_sagacity(self, sagacity: Sagacity) -> None:
        """Approved in sagacity, denied in PydanticAI (`False`): the wire never runs.

        The rejection, with PydanticAI's default message, is journaled as the next step
        begins, before that step's calls. Afterwards neither a native resume approving the
        call nor a resume without work can run it.
        """
        shop = Shop(
            sagacity,
            [call("send_wire", "w-1", **WIRE)],
            [call("reserve_inventory", "r-1", sku="SKU-1")],
            "Not sent; the stock is reserved.",
        )
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops")

        result = await shop.resume(first.all_messages(), **{"w-1": False})

        assert result.outcome is SagaOutcome.COMPLETED
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("APPROVED", "send_wire", "w-1"),
            ("REJECTED", "send_wire", "w-1"),
            ("INTENT", "reserve_inventory", "r-1"),
            ("EXECUTED", "reserve_inventory", "r-1"),
            ("ENDED", None, None),
        ]
        assert sagacity.history(SAGA)[2].payload["reason"] == "The tool call was denied."
        with pytest.raises(ApprovalRejectedError, match="pydantic-ai ToolDenied"):
            await shop.resume(first.all_messages(), **{"w-1": True})
        with pytest.raises(ApprovalRejectedError):
            sagacity.resume_saga(SAGA)
        assert counts(shop.tools) == {"reserve_inventory": 1}

    async def test_a_denial_beside_a_deferred_call_is_journaled_when_the_run_ends(
        self, sagacity: Sagacity
    ) -> None:
        """A denial in a step that ends the run (its sibling is deferred again) is journaled.

        No later step shows it, so it is journaled as the run ends: the saga waits only on
        the call that is still approvable.
        """
        shop = Shop(sagacity, TWO_WIRES, "Sent.")
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops", request_id=shop.request_id("w-1"))
        w2_request = shop.request_id("w-2")

        again = await shop.resume(first.all_messages(), **{"w-1": ToolDenied("no"), "w-2": True})

        assert again.outcome is SagaOutcome.AWAITING_APPROVAL
        assert [r.request_id for r in again.pending] == [w2_request]
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("AWAITING_APPROVAL", "send_wire", "w-2"),
            ("APPROVED", "send_wire", "w-1"),
            ("REJECTED", "send_wire", "w-1"),
        ]
        assert shop.tools.calls == []

    async def test_a_denial_made_outside_the_saga_is_journaled_by_its_next_run(
        self, sagacity: Sagacity
    ) -> None:
        """A denial in a run outside the saga is journaled by the saga's next run.

        The adapter sees nothing outside a saga; the next run of the saga starts from the
        message history that holds the denial, and journals it before any call runs.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)], "Not sent.", "Noted.")
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops")
        outside = await shop.agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"w-1": ToolDenied("no")}),
        )
        assert journal_of(sagacity, SAGA)[-1] == ("APPROVED", "send_wire", "w-1")

        result = await sagacity.aresume_saga(
            SAGA,
            lambda: shop.agent.run("Thanks.", message_history=outside.all_messages()),
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert journal_of(sagacity, SAGA)[2:] == [
            ("REJECTED", "send_wire", "w-1"),
            ("ENDED", None, None),
        ]
        assert shop.tools.calls == []

    async def test_a_denial_of_another_tool_under_the_id_declines_nothing(
        self, sagacity: Sagacity
    ) -> None:
        """A denial names its tool: one of another tool under the same id leaves the request.

        The paused state is edited so that w-1 calls delete_account; PydanticAI's denial of
        that call is not a decision about the wire, which still waits.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)], "Not deleted.")
        first = await shop.pause()
        swapped = edited(first.all_messages(), "w-1", tool_name="delete_account", args={})

        result = await shop.resume(swapped, **{"w-1": ToolDenied("no")})

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert [r.call_id for r in result.pending] == ["w-1"]
        assert journal_of(sagacity, SAGA) == [("AWAITING_APPROVAL", "send_wire", "w-1")]

    async def test_a_denied_call_of_another_toolset_is_journaled_too(
        self, sagacity: Sagacity
    ) -> None:
        """Under SagaCapability, a denied IRREVERSIBLE tool of another toolset is journaled."""
        desk = Helpdesk()
        model = ScriptedModel([call("transfer_funds", "t-1", amount="10")], "Not moved.")
        agent = agent_with(
            model, desk.toolset(), capabilities=[capability(sagacity, desk)], deferred=True
        )
        first = await sagacity.asaga(SAGA, lambda: agent.run("Move 10."))

        result = await sagacity.aresume_saga(
            SAGA,
            lambda: agent.run(
                message_history=first.value.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"t-1": ToolDenied("no")}),
            ),
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert journal_of(sagacity, SAGA)[:2] == [
            ("AWAITING_APPROVAL", "transfer_funds", "t-1"),
            ("REJECTED", "transfer_funds", "t-1"),
        ]
        assert sagacity.history(SAGA)[1].payload["source"] == DENIAL_SOURCE
        assert desk.calls == []


class TestDecidedInlineByAHandler:
    async def test_an_inline_approval_runs_nothing_that_sagacity_holds(
        self, sagacity: Sagacity
    ) -> None:
        """A `HandleDeferredToolCalls` that approves everything inline runs nothing held.

        PydanticAI calls the wire again at once, approved; sagacity holds it, so it is
        deferred again and the run ends waiting for sagacity's approval.
        """
        shop = OrderTools()
        model = ScriptedModel([call("send_wire", "w-1", **WIRE)])
        agent = agent_with(
            model,
            saga_toolset(sagacity, shop),
            capabilities=[
                HandleDeferredToolCalls(handler=lambda ctx, r: r.build_results(approve_all=True))
            ],
            deferred=True,
        )

        result = await sagacity.asaga(SAGA, lambda: agent.run("Pay."))

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert isinstance(result.value.output, DeferredToolRequests)
        assert [c.tool_call_id for c in result.value.output.approvals] == ["w-1"]
        assert journal_of(sagacity, SAGA) == [("AWAITING_APPROVAL", "send_wire", "w-1")]
        assert shop.calls == []

    async def test_an_inline_denial_is_journaled_in_the_same_run(self, sagacity: Sagacity) -> None:
        """A `HandleDeferredToolCalls` that denies inline: journaled REJECTED in that run."""
        shop = OrderTools()
        model = ScriptedModel([call("send_wire", "w-1", **WIRE)], "Not sent.")
        agent = agent_with(
            model,
            saga_toolset(sagacity, shop),
            capabilities=[
                HandleDeferredToolCalls(
                    handler=lambda ctx, r: DeferredToolResults(
                        approvals={
                            c.tool_call_id: ToolDenied("policy says no") for c in r.approvals
                        }
                    )
                )
            ],
            deferred=True,
        )

        result = await sagacity.asaga(SAGA, lambda: agent.run("Pay."))

        assert result.outcome is SagaOutcome.COMPLETED
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("REJECTED", "send_wire", "w-1"),
            ("ENDED", None, None),
        ]
        payload = sagacity.history(SAGA)[1].payload
        assert (payload["source"], payload["reason"]) == (DENIAL_SOURCE, "policy says no")
        assert shop.calls == []

    async def test_a_handler_is_shown_why_a_call_was_refused(self, sagacity: Sagacity) -> None:
        """A refused call is deferred with the refusal in its metadata, for a handler to see.

        A later run's wire under the asked id, with other input, is refused: the handler
        sees why, declines to decide, and the saga raises the refusal.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)])
        await shop.pause()
        shown: list[dict[str, Any]] = []

        def record(ctx: Any, requests: DeferredToolRequests) -> None:
            shown.append(requests.metadata)

        other = agent_with(
            ScriptedModel([call("send_wire", "w-1", **WIRE_B)]),
            saga_toolset(sagacity, shop.tools),
            capabilities=[HandleDeferredToolCalls(handler=record)],
            deferred=True,
        )

        with pytest.raises(ApprovalHashMismatchError) as raised:
            await sagacity.aresume_saga(SAGA, lambda: other.run("Pay B."))

        assert shown == [
            {
                "w-1": {
                    "sagacity": {
                        "refused": "ApprovalHashMismatchError",
                        "error": str(raised.value),
                        "call_id": "w-1",
                        "tool_name": "send_wire",
                    }
                }
            }
        ]
        assert shop.tools.calls == []


class TestOneIdForTwoCalls:
    @pytest.mark.parametrize(
        "second",
        [
            call("send_wire", "w-1", **WIRE_B),
            call("reserve_inventory", "w-1", sku="SKU-1"),
        ],
        ids=["same-tool", "other-tool"],
    )
    async def test_one_id_twice_in_a_response_is_refused_before_anything_runs(
        self, sagacity: Sagacity, second: ToolCallPart
    ) -> None:
        """Two calls under one id in one response: PydanticAI refuses them before either runs.

        Nothing is asked or journaled; the run's error ends the saga (compensated, with
        nothing to undo).
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE), second])

        result = await sagacity.asaga(SAGA, lambda: shop.agent.run("Pay."))

        assert isinstance(result.error, UnexpectedModelBehavior)
        assert "duplicate `tool_call_id`s: ['w-1']" in str(result.error)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, SAGA) == [("ENDED", None, None)]
        assert shop.tools.calls == []
        assert sagacity.pending(SAGA) == []

    async def test_a_resume_with_one_id_twice_is_refused_before_anything_runs(
        self, sagacity: Sagacity
    ) -> None:
        """A paused state edited to hold a second call under the approved id: refused.

        PydanticAI cannot tell which call a result answers and refuses the resume before
        any call runs.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)], "Sent.")
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops")
        doubled = with_duplicate(first.all_messages(), "w-1", **WIRE_B)

        result = await shop.resume(doubled, **{"w-1": True})

        assert isinstance(result.error, UserError)
        assert "duplicate tool_call_id values: ['w-1']" in str(result.error)
        assert shop.tools.calls == []
        assert "INTENT" not in [phase for phase, _, _ in journal_of(sagacity, SAGA)]

    async def test_an_id_reused_by_a_later_call_is_refused_before_it_runs(
        self, sagacity: Sagacity
    ) -> None:
        """A model that gives a later call the id of one that ran is refused, naming both.

        The wire is neither asked for nor run; the saga stays open.
        """
        shop = Shop(
            sagacity,
            [call("reserve_inventory", "c-1", sku="SKU-1")],
            [call("send_wire", "c-1", **WIRE)],
        )

        with pytest.raises(ReplayMismatchError, match="'c-1' was used by tool 'reserve_inventory'"):
            await sagacity.asaga(SAGA, lambda: shop.agent.run("Pay."))

        assert shop.tools.calls == [("reserve_inventory", {"sku": "SKU-1", "qty": 1})]
        assert journal_of(sagacity, SAGA) == [
            ("INTENT", "reserve_inventory", "c-1"),
            ("EXECUTED", "reserve_inventory", "c-1"),
        ]

    async def test_a_fresh_call_under_an_asked_id_is_refused_not_asked_again(
        self, sagacity: Sagacity
    ) -> None:
        """A later run's wire under an asked id, with other input, is refused: one request.

        The request keeps showing the first wire only; the second is journaled REFUSED and
        the refusal is raised.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)])
        await shop.pause()
        other = agent_with(
            ScriptedModel([call("send_wire", "w-1", **WIRE_B)]),
            saga_toolset(sagacity, shop.tools),
            deferred=True,
        )

        with pytest.raises(ApprovalHashMismatchError):
            await sagacity.aresume_saga(SAGA, lambda: other.run("Pay B."))

        [request] = sagacity.pending(SAGA)
        assert (request.call_id, request.input) == ("w-1", WIRE)
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("REFUSED", "send_wire", "w-1"),
        ]
        assert shop.tools.calls == []


class TestToolSwap:
    @pytest.mark.parametrize(
        ("tool", "args"),
        [("delete_account", {"account": "acme"}), ("charge_card", {"amount_cents": 250000})],
        ids=["irreversible", "compensatable"],
    )
    async def test_an_edited_state_that_swaps_the_tool_is_refused(
        self, sagacity: Sagacity, tool: str, args: dict[str, Any]
    ) -> None:
        """The approved call id edited to call another tool: refused, journaled, nothing runs.

        The approval of send_wire does not let another tool run under its id. The attempt
        is journaled REFUSED (reason tool_mismatch) under the tool that tried; the wire's
        request stays approved, and the unedited resume runs the wire once.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)], "Done.")
        first = await shop.pause()
        request_id = shop.request_id("w-1")
        sagacity.approve(SAGA, approver="alice@ops")
        swapped = edited(first.all_messages(), "w-1", tool_name=tool, args=args)

        with pytest.raises(ApprovalToolMismatchError, match="asked for tool 'send_wire'"):
            await shop.resume(swapped, **{"w-1": True})

        assert shop.tools.calls == []
        assert journal_of(sagacity, SAGA) == [
            ("AWAITING_APPROVAL", "send_wire", "w-1"),
            ("APPROVED", "send_wire", "w-1"),
            ("REFUSED", tool, "w-1"),
        ]
        refused = sagacity.history(SAGA)[2]
        assert (refused.ref_seq, refused.payload["reason"], refused.payload["request_id"]) == (
            1,
            "tool_mismatch",
            request_id,
        )
        [request] = sagacity.pending(SAGA)
        assert (request.request_id, request.state) == (request_id, "approved")
        done = await shop.resume(first.all_messages(), **{"w-1": True})
        assert done.outcome is SagaOutcome.COMPLETED
        assert shop.tools.calls == [("send_wire", WIRE)]

    @pytest.mark.parametrize(
        ("tool", "args"),
        [("delete_account", {"account": "acme"}), ("charge_card", {"amount_cents": 250000})],
        ids=["irreversible", "compensatable"],
    )
    async def test_a_fresh_run_reusing_the_approved_id_for_another_tool_is_refused(
        self, sagacity: Sagacity, tool: str, args: dict[str, Any]
    ) -> None:
        """A new run whose model calls another tool under the approved id: refused.

        Nothing runs; the approved wire still runs once on the proper resume.
        """
        shop = Shop(sagacity, [call("send_wire", "w-1", **WIRE)], "Done.")
        first = await shop.pause()
        sagacity.approve(SAGA, approver="alice@ops")
        other = agent_with(
            ScriptedModel([call(tool, "w-1", **args)], "Done."),
            saga_toolset(sagacity, shop.tools),
            deferred=True,
        )

        with pytest.raises(ApprovalToolMismatchError, match="asked for tool 'send_wire'"):
            await sagacity.aresume_saga(SAGA, lambda: other.run("Go."))

        assert shop.tools.calls == []
        assert journal_of(sagacity, SAGA)[-1] == ("REFUSED", tool, "w-1")
        done = await shop.resume(first.all_messages(), **{"w-1": True})
        assert done.outcome is SagaOutcome.COMPLETED
        assert shop.tools.calls == [("send_wire", WIRE)]
