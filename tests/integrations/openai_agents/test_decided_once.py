"""The SDK asks `needs_approval` before each call, then makes it: sagacity decides once.

The rule is evaluated, or the standing grant consumed, when the SDK asks; the call then
journals that decision in its INTENT without taking it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents import Runner

from sagacity import Phase, Reversibility, Sagacity, SagaOutcome, compensable, verify
from sagacity.integrations.openai_agents import function_tools
from tests.integrations.openai_agents._orders import agent_with, call, phases, scripted


class Payouts:
    """Pays refunds (a rule decides) and suppliers (a grant may cover); counts the rule."""

    def __init__(self) -> None:
        self.paid: list[tuple[str, int]] = []
        self.rule_asked = 0

    def large(self, input: Mapping[str, Any]) -> bool:
        """Refunds above 1000 ask a human."""
        self.rule_asked += 1
        return bool(input["amount"] > 1000)


def _tools(sagacity: Sagacity, payouts: Payouts) -> list[Any]:
    @compensable(reversibility=Reversibility.IRREVERSIBLE, approval=payouts.large)
    def pay_refund(amount: int, to: str) -> str:
        """Pay a refund to a customer."""
        payouts.paid.append(("refund", amount))
        return f"paid {amount} to {to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay_supplier(amount: int, to: str) -> str:
        """Pay a supplier."""
        payouts.paid.append(("supplier", amount))
        return f"paid {amount} to {to}"

    return function_tools(sagacity, pay_refund, pay_supplier)


async def test_the_rule_is_evaluated_once_per_call(sagacity: Sagacity) -> None:
    """Two refunds under the threshold: two evaluations, not four; each INTENT says why."""
    payouts = Payouts()
    model = scripted(
        [call("pay_refund", "call-1", amount=500, to="ann")],
        [call("pay_refund", "call-2", amount=700, to="bob")],
    )
    agent = agent_with(model, _tools(sagacity, payouts))

    result = await sagacity.asaga("refunds-1", lambda: Runner.run(agent, "refund them"))

    assert result.outcome is SagaOutcome.COMPLETED
    assert payouts.paid == [("refund", 500), ("refund", 700)]
    assert payouts.rule_asked == 2
    history = sagacity.history("refunds-1")
    intents = [e for e in history if e.phase is Phase.INTENT]
    assert [e.payload["approval_rule"]["asked"] for e in intents] == [False, False]  # type: ignore[index,call-overload]


async def test_a_grant_is_consumed_once_per_call(sagacity: Sagacity) -> None:
    """Asked ahead and then called: one GRANT_USED per call, named by its INTENT."""
    payouts = Payouts()
    grant = sagacity.grant(
        "pay_supplier", grantor="carol", max_calls=2, ttl=600, match={"to": {"equals": "ACME"}}
    )
    model = scripted(
        [call("pay_supplier", "call-1", amount=10, to="ACME")],
        [call("pay_supplier", "call-2", amount=20, to="ACME")],
        [call("pay_supplier", "call-3", amount=30, to="ACME")],
    )
    agent = agent_with(model, _tools(sagacity, payouts))

    result = await sagacity.asaga(
        "suppliers-1", lambda: Runner.run(agent, "pay them"), started_by="alice"
    )

    # The grant covered two calls; the third interrupts the run for a human.
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    assert payouts.paid == [("supplier", 10), ("supplier", 20)]
    chain = sagacity.history(f"grant-{grant.grant_id}")
    assert [e.phase for e in chain] == [Phase.GRANTED, Phase.GRANT_USED, Phase.GRANT_USED]
    assert [e.call_id for e in chain[1:]] == ["call-1", "call-2"]
    history = sagacity.history("suppliers-1")
    assert phases(history)[-1] == ("AWAITING_APPROVAL", "pay_supplier", "call-3")
    intents = [e for e in history if e.phase is Phase.INTENT]
    assert [e.payload["approval_grant"]["grant_seq"] for e in intents] == [2, 3]  # type: ignore[index,call-overload]
    assert verify(sagacity.journal).ok
