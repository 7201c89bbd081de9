"""What initiated a call: the LangGraph thread its run checkpoints under; nothing else given."""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from sagacity import Phase, Sagacity, SagaOutcome
from sagacity.integrations.langchain import langchain_tools
from tests.integrations.langchain._agents import (
    AsyncOrderTools,
    GraphRun,
    OrderTools,
    build_graph,
    calls,
    scripted,
    tool_call,
)

REQUEST = {"messages": [HumanMessage("Pay ACME 250.00 by wire.")]}
WIRE = {"amount": "250.00", "to": "ACME"}


async def test_the_thread_is_recorded_with_the_request_and_its_decision(
    stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
) -> None:
    """Each graph kind, sync and async: the request names thread `thread-42`."""
    sagacity, approver = stores
    graph_kind, is_async = flavour
    shop = AsyncOrderTools() if is_async else OrderTools()
    model = scripted(calls(tool_call("send_wire_transfer", "call-a", **WIRE)), "Sent.")
    graph = build_graph(graph_kind, model, langchain_tools(sagacity, shop))
    run = GraphRun(sagacity, graph, is_async=is_async, thread_id="thread-42")
    paused = await run.start("wire-1", REQUEST)
    assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
    expected = {"by": "agent", "adapter": "langgraph", "thread_id": "thread-42"}
    (asked,) = [e for e in sagacity.history("wire-1") if e.phase is Phase.AWAITING_APPROVAL]
    assert asked.payload["initiated_by"] == expected
    approved = approver.approve("wire-1", approver="bob", via="cli")
    assert approved.payload["initiated_by"] == expected
    assert approved.payload["via"] == "cli"
