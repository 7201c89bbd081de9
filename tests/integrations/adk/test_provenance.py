"""What initiated a call: ADK's invocation id and the agent's name, from its ToolContext."""

from __future__ import annotations

from google.adk.events import Event

from sagacity import Phase, Sagacity, SagaOutcome
from sagacity.integrations.adk import function_tools
from tests.integrations.adk._agents import Desk, Orders, scripted

WIRE_INPUT = {"amount": "900.00", "to": "ACME"}


async def test_the_invocation_and_agent_are_recorded(sagacity: Sagacity) -> None:
    """ADK's real Runner on a scripted model: the request names the turn's invocation."""
    model = scripted([("send_wire_transfer", "call-2", WIRE_INPUT)])
    desk = Desk(model, function_tools(sagacity, Orders()))
    session = await desk.new_session()
    events: list[Event] = []

    async def turn() -> None:
        events.extend(await desk.turn(session, "pay ACME for order 1"))

    result = await sagacity.asaga("wire-1", turn)
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    invocations = {event.invocation_id for event in events}
    assert len(invocations) == 1
    expected = {
        "by": "agent",
        "adapter": "adk",
        "invocation_id": invocations.pop(),
        "agent": "orders",
    }
    (asked,) = [e for e in sagacity.history("wire-1") if e.phase is Phase.AWAITING_APPROVAL]
    assert asked.payload["initiated_by"] == expected
    approved = sagacity.approve("wire-1", approver="bob", via="slack")
    assert approved.payload["initiated_by"] == expected
