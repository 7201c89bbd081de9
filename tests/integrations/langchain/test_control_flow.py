"""A tool that acts and then raises LangGraph's control flow: its effect may exist.

`interrupt()` inside a tool raises `GraphInterrupt` after whatever the tool did before it.
The call is journaled FAILED of kind `control_flow`: in doubt, never compensated, until
the same call id runs again (LangGraph re-runs the node on resume) and supersedes it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import interrupt

from sagacity import (
    ApprovalAlreadyUsedError,
    CompensationContext,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    current_call,
)
from sagacity.audit import verify
from sagacity.integrations.langchain import langchain_tools
from tests.integrations.langchain._agents import (
    GraphRun,
    OrderTools,
    build_graph,
    calls,
    phases_by_call,
    scripted,
    tool_call,
)

REQUEST = {"messages": [HumanMessage("Ship two of SKU-1 to 1 Main St.")]}
RESERVE = calls(tool_call("reserve_inventory", "call-1", sku="SKU-1", qty=2))
BOOK = tool_call("book_courier", "call-2", address="1 Main St")
SHIP = tool_call("ship_order", "call-3", address="1 Main St")


class Courier:
    """A booking that asks the customer to confirm the slot after it booked it."""

    def __init__(self) -> None:
        self.booked: dict[str, str] = {}
        self.cancelled: list[str] = []

    @compensable(by="cancel_courier")
    def book_courier(self, address: str) -> str:
        """Book a courier, then ask the customer to confirm the slot."""
        call = current_call()
        assert call is not None
        self.booked[call.call_id] = address  # the effect, keyed by the idempotency key
        answer = interrupt({"question": f"Is 9:00 fine at {address}?"})
        return f"booked-{address}: {answer}"

    @compensation
    def cancel_courier(self, ctx: CompensationContext) -> None:
        self.cancelled.append(ctx.call_id)


class Payouts:
    """An IRREVERSIBLE payout that asks about the receipt after it paid."""

    def __init__(self) -> None:
        self.paid: list[str] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay_out(self, amount: str) -> str:
        """Pay money out to the customer, then ask whether to e-mail the receipt."""
        self.paid.append(amount)
        receipt = interrupt({"question": "E-mail the receipt?"})
        return f"paid-{amount}: {receipt}"


@pytest.fixture
def sagacity(sqlite_url: str) -> Iterator[Sagacity]:
    instance = Sagacity.from_url(sqlite_url)
    yield instance
    instance.close()


@pytest.fixture(params=["tool_node", "create_agent"])
def graph_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_run(
    sagacity: Sagacity, graph_kind: str, *turns: object
) -> tuple[GraphRun, OrderTools, Courier]:
    shop, courier = OrderTools(), Courier()
    graph = build_graph(graph_kind, scripted(*turns), langchain_tools(sagacity, shop, courier))
    return GraphRun(sagacity, graph, is_async=False), shop, courier


class TestAnEffectBeforeAnInterrupt:
    async def test_it_is_in_doubt_when_the_saga_fails(
        self, sagacity: Sagacity, graph_kind: str
    ) -> None:
        """The booking interrupted after it booked, and the shipment failed: NEEDS_ATTENTION.

        The reservation is compensated; the booking is listed in doubt and its
        compensation is not called: its result, which the compensation would need, does
        not exist, and nobody knows whether the booking stands.
        """
        # The failing call comes first: a sync ToolNode cancels later calls once one pauses.
        turn = calls(SHIP, BOOK)
        run, shop, courier = make_run(sagacity, graph_kind, RESERVE, turn, "Shipped.")

        result = await run.start("cf-1", REQUEST)

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.compensated] == ["call-1"]
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["call-2"]
        assert courier.booked == {"call-2": "1 Main St"}
        assert courier.cancelled == []
        assert shop.undone == [("release_inventory", "res-SKU-1-2")]
        calls_of = phases_by_call(sagacity, "cf-1")
        assert calls_of["call-2"] == ["INTENT", "FAILED"]
        failed = [e for e in sagacity.history("cf-1") if e.call_id == "call-2"][1]
        assert failed.payload["kind"] == "control_flow"
        assert failed.payload["error"]["type"] == "GraphInterrupt"
        assert sagacity.history("cf-1")[-1].payload == {
            "outcome": "NEEDS_ATTENTION",
            "error": {"type": "RuntimeError", "message": "carrier rejected the address"},
            "compensated": ["call-1"],
            "compensation_failed": [],
            "in_doubt": ["call-2"],
        }

        sagacity.resolve("cf-1", "call-2", executed=True, result="booked", by="ops@shop")
        settled = sagacity.compensate("cf-1")

        assert settled.outcome is SagaOutcome.COMPENSATED
        assert courier.cancelled == ["call-2"]
        assert verify(sagacity.journal, "cf-1").ok

    async def test_it_is_in_doubt_when_the_paused_saga_is_abandoned(
        self, sagacity: Sagacity, graph_kind: str
    ) -> None:
        """The graph waits on the booking's question; compensating the saga leaves it in doubt."""
        run, _, courier = make_run(sagacity, graph_kind, RESERVE, calls(BOOK), "Booked.")

        paused = await run.start("cf-2", REQUEST)
        assert paused.outcome is SagaOutcome.SUSPENDED
        abandoned = sagacity.compensate("cf-2")

        assert abandoned.outcome is SagaOutcome.NEEDS_ATTENTION
        assert abandoned.compensation is not None
        assert [ref.call_id for ref in abandoned.compensation.in_doubt] == ["call-2"]
        assert [ref.call_id for ref in abandoned.compensation.compensated] == ["call-1"]
        assert (courier.booked, courier.cancelled) == ({"call-2": "1 Main St"}, [])

    async def test_the_resumed_call_supersedes_the_interrupted_attempt(
        self, sagacity: Sagacity, graph_kind: str
    ) -> None:
        """Resumed, the booking runs again under its call id; a later failure compensates it.

        The tool keys its effect by `current_call().call_id`, the same in both attempts,
        so it books once; the EXECUTED attempt supersedes the interrupted one, which is
        no longer in doubt, and the booking is cancelled exactly once.
        """
        run, _, courier = make_run(
            sagacity, graph_kind, RESERVE, calls(BOOK), calls(SHIP), "Shipped."
        )
        paused = await run.start("cf-3", REQUEST)
        assert paused.outcome is SagaOutcome.SUSPENDED

        result = await run.resume("cf-3", "9:00 is fine")

        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.compensated] == ["call-2", "call-1"]
        assert result.compensation.in_doubt == []
        assert courier.booked == {"call-2": "1 Main St"}
        assert courier.cancelled == ["call-2"]
        assert phases_by_call(sagacity, "cf-3")["call-2"] == [
            "INTENT",
            "FAILED",
            "INTENT",
            "EXECUTED",
            "COMPENSATING",
            "COMPENSATED",
        ]
        executed = [e for e in sagacity.history("cf-3") if e.phase.name == "EXECUTED"]
        assert executed[-1].payload == {"result": "booked-1 Main St: 9:00 is fine"}


class TestAnIrreversibleEffectBeforeAnInterrupt:
    async def test_it_is_not_run_again_and_stays_in_doubt(
        self, sagacity: Sagacity, graph_kind: str
    ) -> None:
        """An approved payout that pays, then interrupts, is never run a second time.

        Its approval was used by the attempt that paid: the re-run on resume is refused
        (`ApprovalAlreadyUsedError`), nothing is paid twice, and the attempt is in doubt.
        """
        payouts = Payouts()
        graph = build_graph(
            graph_kind,
            scripted(calls(tool_call("pay_out", "call-7", amount="10.00")), "Paid."),
            langchain_tools(sagacity, payouts),
        )
        run = GraphRun(sagacity, graph, is_async=False)
        waiting = await run.start("cf-4", REQUEST)
        assert waiting.outcome is SagaOutcome.AWAITING_APPROVAL
        sagacity.approve("cf-4", approver="alice")

        asked = await run.resume("cf-4", True)

        assert asked.outcome is SagaOutcome.SUSPENDED
        assert payouts.paid == ["10.00"]
        assert [i.value for i in run.interrupts()] == [{"question": "E-mail the receipt?"}]

        with pytest.raises(ApprovalAlreadyUsedError, match="an approval is used once"):
            await run.resume("cf-4", "yes")

        assert payouts.paid == ["10.00"]
        assert phases_by_call(sagacity, "cf-4")["call-7"] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "INTENT",
            "FAILED",
        ]
        abandoned = sagacity.compensate("cf-4")
        assert abandoned.outcome is SagaOutcome.NEEDS_ATTENTION
        assert abandoned.compensation is not None
        assert [ref.call_id for ref in abandoned.compensation.in_doubt] == ["call-7"]
