"""OpenTelemetry spans and metrics through a real PydanticAI run, with the SDK's in-memory parts."""

from __future__ import annotations

import datetime
import inspect
from typing import Any

from sagacity import Reversibility, Sagacity, SagaOutcome, _telemetry, compensable
from sagacity.integrations.pydantic_ai import saga_toolset
from tests.integrations.pydantic_ai._agents import OrderTools, ScriptedModel, agent_with, call
from tests.observability.conftest import Telemetry

ORDER = [
    [call("reserve_inventory", "call-1", sku="SKU-1", qty=2)],
    [call("charge_card", "call-2", amount_cents=1999)],
    [call("ship_order", "call-3", address="1 Main St")],
    "Done: your order is on its way.",
]


class TestSpans:
    async def test_a_compensated_pydantic_ai_run(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """Saga span under the caller's span; a tool span per call; compensation spans under it.

        The third call fails, PydanticAI tells the model, the model says done: the tool
        spans carry the GenAI attributes and error.type, the compensations run in reverse.
        """
        shop = OrderTools()
        agent = agent_with(ScriptedModel(*ORDER), saga_toolset(memory, shop))
        caller = telemetry.tracer_provider.get_tracer("app")
        with caller.start_as_current_span("POST /orders") as request:
            result = await memory.asaga("order-1", lambda: agent.run("Ship two SKU-1."))
        assert result.outcome is SagaOutcome.COMPENSATED

        saga = telemetry.named("saga order-1")
        assert saga.parent is not None
        assert saga.parent.span_id == request.get_span_context().span_id
        assert saga.context.trace_id == request.get_span_context().trace_id
        assert saga.attributes is not None
        assert saga.attributes["sagacity.outcome"] == "COMPENSATED"
        assert saga.attributes["sagacity.compensated"] == 2

        tools = [s for s in telemetry.finished() if s.name.startswith("execute_tool ")]
        assert [s.name for s in tools] == [
            "execute_tool reserve_inventory",
            "execute_tool charge_card",
            "execute_tool ship_order",
        ]
        for span in tools:
            assert span.parent is not None
            assert span.parent.span_id == saga.context.span_id
        first = dict(tools[0].attributes or {})
        assert first == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "reserve_inventory",
            "gen_ai.tool.call.id": "call-1",
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": inspect.cleandoc(str(OrderTools.reserve_inventory.__doc__)),
            "sagacity.saga_id": "order-1",
            "sagacity.call_id": "call-1",
            "sagacity.seq": 1,
            "sagacity.reversibility": "COMPENSATABLE",
            "sagacity.phase": "EXECUTED",
        }
        failed = dict(tools[2].attributes or {})
        assert failed["sagacity.phase"] == "FAILED"
        assert failed["error.type"] == "ToolFailed"
        assert failed["sagacity.seq"] == 5
        assert "error.type" not in first

        undo = [s for s in telemetry.finished() if s.name.startswith("compensate ")]
        assert [s.name for s in undo] == ["compensate charge_card", "compensate reserve_inventory"]
        for span in undo:
            assert span.parent is not None
            assert span.parent.span_id == saga.context.span_id
            assert (span.attributes or {})["sagacity.phase"] == "COMPENSATED"

    def test_approval_request_and_decision_spans(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """Asking and approving each leave a span under the saga's."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(amount: str) -> str:
            return "wt-1"

        (tool,) = memory.wrap(wire)
        waiting = memory.saga("w-1", lambda: tool(amount="10"))
        assert waiting.outcome is SagaOutcome.AWAITING_APPROVAL
        request = telemetry.named("approval.request")
        assert (request.attributes or {})["sagacity.request_id"] == waiting.pending[0].request_id
        saga = telemetry.named("saga w-1")
        assert request.parent is not None
        assert request.parent.span_id == saga.context.span_id

        memory.approve("w-1", approver="alice")
        decision = telemetry.named("approval.approve")
        assert (decision.attributes or {})["gen_ai.tool.name"] == "wire"
        result = memory.resume_saga("w-1")
        assert result.outcome is SagaOutcome.COMPLETED
        run = [s for s in telemetry.finished() if s.name == "execute_tool wire"]
        assert [(s.attributes or {})["sagacity.reversibility"] for s in run] == ["IRREVERSIBLE"]


class TestPendingApprovals:
    """`sagacity.approvals.pending`: one per request from asking until it is closed."""

    @staticmethod
    def pending(telemetry: Telemetry) -> list[tuple[dict[str, Any], Any]]:
        return telemetry.points("sagacity.approvals.pending")

    def test_the_hooks_count_each_request_once(self, telemetry: Telemetry) -> None:
        """Approvals do not count; only a request's close does, once."""
        from sagacity.approval import ApprovalRequest

        assert _telemetry.current is not None
        _telemetry.approval_event("s", "approval.request", request_id="r", tool="wire")
        _telemetry.approval_event("s", "approval.approve", request_id="r", tool="wire")
        _telemetry.approval_event("s", "approval.approve", request_id="r", tool="wire")
        assert self.pending(telemetry) == [({}, 1)]
        request = ApprovalRequest(
            request_id="r",
            saga_id="s",
            seq=1,
            call_id="c",
            tool_name="wire",
            input={},
            input_sha256="0" * 64,
            reason="irreversible",
            requested_at=datetime.datetime.now(datetime.UTC),
            expires_at=None,
        )
        _telemetry.approval_closed(request, "consumed")
        assert self.pending(telemetry) == [({}, 0)]

    def test_two_approvers_then_the_run(self, telemetry: Telemetry, memory: Sagacity) -> None:
        """A request that needs two approvals is one pending request until its call runs."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE, approvers=2)
        def wire(amount: str) -> str:
            return "wt-1"

        (tool,) = memory.wrap(wire)
        memory.saga("w-2", lambda: tool(amount="10"))
        assert self.pending(telemetry) == [({}, 1)]
        memory.approve("w-2", approver="alice")
        memory.approve("w-2", approver="bob")
        assert self.pending(telemetry) == [({}, 1)]  # approved, not run yet
        assert memory.resume_saga("w-2").outcome is SagaOutcome.COMPLETED
        assert self.pending(telemetry) == [({}, 0)]

    def test_an_edit_replaces_its_request(self, telemetry: Telemetry, memory: Sagacity) -> None:
        """An edit closes the old request as it asks the new one; rejecting that closes it."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(amount: str) -> str:
            return "wt-1"

        (tool,) = memory.wrap(wire)
        memory.saga("w-3", lambda: tool(amount="10"))
        memory.edit("w-3", approver="carol", new_input={"amount": "5"})
        assert self.pending(telemetry) == [({}, 1)]
        assert len(memory.pending("w-3")) == 1
        memory.reject("w-3", approver="alice", reason="no")
        assert self.pending(telemetry) == [({}, 0)]


class TestMetrics:
    async def test_calls_failures_compensations_and_duration(
        self, telemetry: Telemetry, memory: Sagacity
    ) -> None:
        """Counters by tool, a failure by kind, compensations by outcome, one duration per call."""
        shop = OrderTools()
        agent = agent_with(ScriptedModel(*ORDER), saga_toolset(memory, shop))
        await memory.asaga("order-1", lambda: agent.run("Ship two SKU-1."))
        calls = {
            attrs["gen_ai.tool.name"]: value
            for attrs, value in telemetry.points("sagacity.tool.calls")
        }
        assert calls == {"reserve_inventory": 1, "charge_card": 1, "ship_order": 1}
        assert telemetry.points("sagacity.tool.failures") == [
            ({"gen_ai.tool.name": "ship_order", "sagacity.failure_kind": "failure"}, 1)
        ]
        assert sorted(
            (attrs["gen_ai.tool.name"], attrs["sagacity.phase"], value)
            for attrs, value in telemetry.points("sagacity.compensations")
        ) == [("charge_card", "COMPENSATED", 1), ("reserve_inventory", "COMPENSATED", 1)]
        durations = {
            a["gen_ai.tool.name"]: n for a, n in telemetry.points("sagacity.tool.duration")
        }
        assert durations == {"reserve_inventory": 1, "charge_card": 1, "ship_order": 1}


class TestOff:
    def test_nothing_is_installed_until_instrument(self, memory: Sagacity) -> None:
        """Without instrument() the core's hook is None: no tracer is even created."""
        assert _telemetry.current is None

        @compensable(by=lambda: None)
        def step() -> str:
            return "ok"

        (tool,) = memory.wrap(step)
        assert memory.saga("s-1", tool).outcome is SagaOutcome.COMPLETED
        assert _telemetry.current is None
