"""Nested SagaToolsets and nested agents: each call is journaled once, as it was declared."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic_ai import Agent, DeferredToolResults, RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from sagacity import (
    ReplayMismatchError,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    verify,
)
from sagacity.integrations.pydantic_ai import SagaCapability, saga_toolset
from tests.integrations.pydantic_ai._agents import (
    OrderTools,
    ScriptedModel,
    agent_with,
    call,
    journal_of,
)
from tests.integrations.pydantic_ai.test_approval import WIRE

WIRE_REASON = "send_wire is IRREVERSIBLE: Send a wire transfer: money that cannot be called back."


def rebuilt(ctx: RunContext[Any], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
    """A `prepare` function that builds new definitions, dropping their metadata."""
    return [
        ToolDefinition(
            name=d.name,
            description=d.description,
            parameters_json_schema=d.parameters_json_schema,
        )
        for d in tool_defs
    ]


@dataclasses.dataclass
class DropMetadata(WrapperToolset[Any]):
    """A toolset that drops the tools' metadata both when listing and when calling them."""

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        return {name: _bare(tool) for name, tool in tools.items()}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        return await super().call_tool(name, tool_args, ctx, _bare(tool))


def _bare(tool: ToolsetTool[Any]) -> ToolsetTool[Any]:
    return dataclasses.replace(tool, tool_def=dataclasses.replace(tool.tool_def, metadata=None))


class Delegator:
    """A tool that hands its task to a sub-agent, run inside the tool's journaled call."""

    def __init__(self, agent: Agent[None, Any]) -> None:
        self.agent = agent
        self.forgotten: list[Any] = []

    @compensable(by="forget")
    async def delegate(self, task: str) -> str:
        """Hand a task to a sub-agent."""
        result = await self.agent.run(task)
        return str(result.output)

    @compensation
    def forget(self) -> None:
        self.forgotten.append("delegate")


class TestMetadataDropped:
    async def test_irreversible_tool_behind_a_prepared_toolset_waits_for_approval(
        self, sagacity: Sagacity
    ) -> None:
        """A `.prepared()` toolset that drops the metadata does not let the wire run unapproved.

        The capability journals the call itself, as `Sagacity.wrap` declared it: IRREVERSIBLE,
        paused, then run once after sagacity's approval; the SagaToolset further in passes it
        through, so it is journaled once.
        """
        shop = OrderTools()
        model = ScriptedModel([call("send_wire", "call-w", **WIRE)], "The wire is sent.")
        agent = agent_with(
            model,
            saga_toolset(sagacity, shop).prepared(rebuilt),
            capabilities=[SagaCapability(sagacity)],
            deferred=True,
        )

        paused = await sagacity.asaga("wire-1", lambda: agent.run("Pay the supplier."))

        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        assert shop.calls == []
        assert [r.reason for r in paused.pending] == [WIRE_REASON]
        sent = {d.name: d.metadata["sagacity"] for d in model.tool_definitions[0]}
        assert sent["send_wire"]["reversibility"] == "IRREVERSIBLE"
        assert sent["reserve_inventory"]["reversibility"] == "COMPENSATABLE"
        sagacity.approve("wire-1", approver="alice@ops")
        resumed = await sagacity.aresume_saga(
            "wire-1",
            lambda: agent.run(
                message_history=paused.value.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"call-w": True}),
            ),
        )
        assert resumed.outcome is SagaOutcome.COMPLETED
        assert shop.calls == [("send_wire", WIRE)]
        assert journal_of(sagacity, "wire-1") == [
            ("AWAITING_APPROVAL", "send_wire", "call-w"),
            ("APPROVED", "send_wire", "call-w"),
            ("INTENT", "send_wire", "call-w"),
            ("EXECUTED", "send_wire", "call-w"),
            ("ENDED", None, None),
        ]
        assert sagacity.history("wire-1")[2].payload == {
            "input": WIRE,
            "reversibility": "IRREVERSIBLE",
            "request_id": paused.pending[0].request_id,
        }
        assert verify(sagacity.journal, "wire-1").ok

    async def test_compensatable_tools_behind_a_prepared_toolset_keep_their_compensations(
        self, sagacity: Sagacity
    ) -> None:
        """Behind a `.prepared()` toolset, wrapped tools are undone by their own compensations.

        Each call is journaled once, COMPENSATABLE as declared, and undone in reverse order.
        """
        shop = OrderTools()
        model = ScriptedModel(
            [call("reserve_inventory", "call-1", sku="SKU-1", qty=2)],
            [call("charge_card", "call-2", amount_cents=1999)],
            [call("ship_order", "call-3", address="1 Main St")],
            "Done.",
        )
        agent = agent_with(
            model,
            saga_toolset(sagacity, shop).prepared(rebuilt),
            capabilities=[SagaCapability(sagacity)],
        )

        result = await sagacity.asaga("order-1", lambda: agent.run("Ship."))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "order-1") == [
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
        assert shop.undone == [("refund_card", "ch-1999"), ("release_inventory", "res-SKU-1-2")]

    async def test_read_only_does_not_hide_a_wrapped_tool(self, sagacity: Sagacity) -> None:
        """A name `Sagacity.wrap` declared IRREVERSIBLE waits for approval even if listed read-only.

        The capability's `read_only` covers tools sagacity did not wrap.
        """
        shop = OrderTools()
        model = ScriptedModel([call("send_wire", "call-w", **WIRE)])
        agent = agent_with(
            model,
            saga_toolset(sagacity, shop).prepared(rebuilt),
            capabilities=[SagaCapability(sagacity, read_only=["send_wire"])],
            deferred=True,
        )

        result = await sagacity.asaga("wire-2", lambda: agent.run("Pay."))

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert shop.calls == []
        assert journal_of(sagacity, "wire-2") == [("AWAITING_APPROVAL", "send_wire", "call-w")]

    async def test_call_handed_down_is_journaled_once(self, sagacity: Sagacity) -> None:
        """A call the capability journals is not journaled again by the SagaToolset further in.

        A toolset between drops the metadata on both paths, so the toolset further in knows
        the call only as the one handed down to it.
        """
        shop = OrderTools()
        model = ScriptedModel([call("reserve_inventory", "call-1", sku="SKU-1")], "Reserved.")
        agent = agent_with(
            model,
            DropMetadata(saga_toolset(sagacity, shop)),
            capabilities=[SagaCapability(sagacity)],
        )

        result = await sagacity.asaga("order-2", lambda: agent.run("Reserve."))

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.calls == [("reserve_inventory", {"sku": "SKU-1", "qty": 1})]
        assert journal_of(sagacity, "order-2") == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("ENDED", None, None),
        ]


class TestAgentInsideATool:
    async def test_sub_agent_calls_are_journaled_as_calls_of_their_own(
        self, sagacity: Sagacity
    ) -> None:
        """A sub-agent run inside a journaled tool journals its calls inside that call."""
        shop = OrderTools()
        sub_agent = agent_with(
            ScriptedModel([call("reserve_inventory", "sub-1", sku="SKU-1")], "Reserved."),
            saga_toolset(sagacity, shop),
        )
        model = ScriptedModel([call("delegate", "call-1", task="reserve SKU-1")], "Done.")
        agent = agent_with(model, saga_toolset(sagacity, Delegator(sub_agent)))

        result = await sagacity.asaga("team-1", lambda: agent.run("Reserve."))

        assert result.outcome is SagaOutcome.COMPLETED
        assert journal_of(sagacity, "team-1") == [
            ("INTENT", "delegate", "call-1"),
            ("INTENT", "reserve_inventory", "sub-1"),
            ("EXECUTED", "reserve_inventory", "sub-1"),
            ("EXECUTED", "delegate", "call-1"),
            ("ENDED", None, None),
        ]

    async def test_sub_agent_reusing_the_running_call_id_runs_nothing(
        self, sagacity: Sagacity
    ) -> None:
        """A sub-agent call that reuses the running call's id is refused, never run unjournaled.

        The sub-agent's model gives the wire the id of the tool call it runs inside: the
        wire is refused (one id, one call) and does not run; the refusal fails the tool that
        ran the sub-agent, and the saga with it.
        """
        shop = OrderTools()
        sub_agent = agent_with(
            ScriptedModel([call("send_wire", "call-1", **WIRE)], "Sent."),
            saga_toolset(sagacity, shop),
            deferred=True,
        )
        model = ScriptedModel([call("delegate", "call-1", task="pay")], "Done.")
        agent = agent_with(model, saga_toolset(sagacity, Delegator(sub_agent)))

        result = await sagacity.asaga("team-2", lambda: agent.run("Pay."))

        assert shop.calls == []
        assert isinstance(result.error, ReplayMismatchError)
        assert "call id 'call-1' was used by tool 'delegate'" in str(result.error)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "team-2") == [
            ("INTENT", "delegate", "call-1"),
            ("FAILED", "delegate", "call-1"),
            ("ENDED", None, None),
        ]
