"""A `wrap()` refused for its escalation declaration records nothing.

The escalation is checked against the Sagacity's `approval_ttl` and approver groups
before any tool of the call is recorded: the refused tools are not wrapped, their
compensations are not registered, the tools wrapped before keep working, and a corrected
`wrap()` of a tool of the same name is accepted.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from sagacity import (
    ApproverGroup,
    CompensationContext,
    ConfigurationError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
)

HOUR = 3600.0
LEADS = ApproverGroup(name="treasury-leads", members=["carol", "dave"], ttl=1800)
IRREVERSIBLE = Reversibility.IRREVERSIBLE


def _sagacity() -> Sagacity:
    return Sagacity.from_url("memory://", approval_ttl=HOUR, approver_groups=[LEADS])


def _not_wrapped(sagacity: Sagacity, *names: str) -> None:
    for name in names:
        with pytest.raises(ConfigurationError, match=f"no tool named '{name}'"):
            sagacity.tool(name)
        assert sagacity.approval.escalations.get(name) is None
        assert name not in sagacity.approval.declared_approvers


class TestRefusedWrap:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"escalate_to": "auditors"}, "names no approver group"),
            ({"remind_before": HOUR}, "is not shorter than approval_ttl"),
            ({"remind_before": datetime.timedelta(hours=2)}, "is not shorter than approval_ttl"),
        ],
    )
    def test_a_refused_tool_is_not_wrapped_and_a_corrected_one_is(
        self, options: dict[str, Any], message: str
    ) -> None:
        """The refused `pay` is not registered; a `pay` declared right is wrapped and asks."""
        sagacity = _sagacity()

        @compensable(reversibility=IRREVERSIBLE, name="pay", **options)
        def pay(amount: str) -> str:
            return amount

        with pytest.raises(ConfigurationError, match=message):
            sagacity.wrap(pay)
        _not_wrapped(sagacity, "pay")

        @compensable(
            reversibility=IRREVERSIBLE,
            name="pay",
            remind_before=600,
            escalate_to="treasury-leads",
        )
        def pay_corrected(amount: str) -> str:
            return amount

        (tool,) = sagacity.wrap(pay_corrected)
        assert sagacity.tool("pay") is tool
        escalation = sagacity.approval.escalations["pay"]
        assert escalation.escalate_to == LEADS
        assert escalation.remind_before == datetime.timedelta(minutes=10)
        result = sagacity.saga("s1", lambda: tool(amount="5"))
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        (request,) = result.pending
        assert request.tool_name == "pay"

    def test_one_bad_tool_refuses_the_whole_call(self) -> None:
        """Its good neighbour and its compensation are not recorded; earlier tools stay."""
        sagacity = _sagacity()
        released: list[str] = []

        @compensable(by=lambda ctx: None)
        def hold(ref: str) -> str:
            return ref

        (held,) = sagacity.wrap(hold)

        class Desk:
            @compensable(by="unbook")
            def book(self, ref: str) -> str:
                return f"bk-{ref}"

            def unbook(self, ctx: CompensationContext) -> None:
                released.append(str(ctx.result))

            @compensable(reversibility=IRREVERSIBLE, escalate_to="auditors")
            def wire(self, amount: str) -> str:
                return amount

        with pytest.raises(ConfigurationError, match="tool 'wire'"):
            sagacity.wrap(Desk())
        _not_wrapped(sagacity, "book", "wire")
        assert sagacity._registry.get("book") is None
        assert sagacity.tool("hold") is held
        assert sagacity.saga("s1", lambda: held("r-1")).outcome is SagaOutcome.COMPLETED

    def test_a_tool_wrapped_before_keeps_its_declaration(self) -> None:
        """A refused re-wrap of the same name leaves the first tool and its escalation."""
        sagacity = _sagacity()

        @compensable(reversibility=IRREVERSIBLE, name="pay", escalate_to="treasury-leads")
        def pay(amount: str) -> str:
            return amount

        (first,) = sagacity.wrap(pay)

        class Other:
            @compensable(reversibility=IRREVERSIBLE, remind_before=HOUR)
            def refund(self, amount: str) -> str:
                return amount

        with pytest.raises(ConfigurationError, match="tool 'refund'"):
            sagacity.wrap(first, Other())
        assert sagacity.tool("pay") is first
        assert sagacity.approval.escalations["pay"].escalate_to == LEADS
        _not_wrapped(sagacity, "refund")
