"""An IRREVERSIBLE tool's approval rule decides in the core: the adapter passes it through.

Below the threshold the SDK's run goes on without an interruption; above it, the run is
interrupted with the SDK's own approval, as for any IRREVERSIBLE call.
"""

from __future__ import annotations

from typing import Any

from agents import Runner, RunResult

from sagacity import Phase, Reversibility, Sagacity, SagaOutcome, compensable, verify
from sagacity.integrations.openai_agents import function_tools
from tests.integrations.openai_agents._orders import agent_with, call, phases, scripted


class Payouts:
    """Pays out refunds; only large ones need a human."""

    def __init__(self) -> None:
        self.paid: list[int] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE, approval="amount > 1000")
    def pay_refund(self, amount: int, to: str) -> str:
        """Pay a refund to a customer."""
        self.paid.append(amount)
        return f"paid {amount} to {to}"


async def test_a_small_refund_runs_and_a_large_one_interrupts(sagacity: Sagacity) -> None:
    """The 500 refund runs at once; the 5000 one interrupts the run and waits."""
    payouts = Payouts()
    model = scripted(
        [call("pay_refund", "call-1", amount=500, to="ann")],
        [call("pay_refund", "call-2", amount=5000, to="bob")],
    )
    agent = agent_with(model, function_tools(sagacity, payouts))

    result = await sagacity.asaga("refunds-1", lambda: Runner.run(agent, "refund them"))

    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    run = result.value
    assert isinstance(run, RunResult)
    assert [(i.tool_name, i.raw_item.call_id) for i in run.interruptions] == [
        ("pay_refund", "call-2")
    ]
    assert payouts.paid == [500]
    history = sagacity.history("refunds-1")
    assert phases(history) == [
        ("INTENT", "pay_refund", "call-1"),
        ("EXECUTED", "pay_refund", "call-1"),
        ("AWAITING_APPROVAL", "pay_refund", "call-2"),
    ]
    let_through: Any = history[0].payload["approval_rule"]
    asked: Any = history[2].payload["approval_rule"]
    assert (let_through["asked"], asked["asked"]) == (False, True)
    # The request says the agent made the call, through which adapter.
    assert history[2].payload["initiated_by"] == {"by": "agent", "adapter": "openai_agents"}
    assert history[2].phase is Phase.AWAITING_APPROVAL
    assert verify(sagacity.journal, "refunds-1").ok
