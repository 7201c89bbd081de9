"""A call's approval rule is decided on a fresh read: a request journaled elsewhere decides it.

A resumed call that was asked before skips that read (its request never goes away); one
never asked reads the journal first, so a request another process journaled for it
meanwhile is found, and the rule does not let the call through.
"""

from __future__ import annotations

import pytest

from sagacity import Reversibility, Sagacity, compensable
from sagacity.errors import ApprovalMissingError


@compensable(reversibility=Reversibility.IRREVERSIBLE, approval="amount > 1000")
def pay(amount: int) -> str:
    """Pay an invoice; below 1000 the rule lets it run unasked."""
    return f"paid {amount}"


def test_a_request_journaled_after_the_saga_opened_is_waited_on(store_url: str) -> None:
    """Asked for by another writer after the saga read its journal: the call is not run."""
    with Sagacity.from_url(store_url) as sagacity, Sagacity.from_url(store_url) as elsewhere:
        sagacity.wrap(pay)
        tool = sagacity.tool("pay")
        shared = sagacity if store_url == "memory://" else elsewhere

        def work() -> object:
            shared.approval.ask(
                shared.approval.history("s-1"),
                tool_name="pay",
                call_id="pay-1",
                input={"amount": 5},
                reason="asked by a reviewer elsewhere",
            )
            return tool.invoke((), {"amount": 5}, call_id="pay-1")

        with pytest.raises(ApprovalMissingError, match="call 'pay-1'"):
            sagacity.saga("s-1", work)
        phases = [e.phase.value for e in sagacity.history("s-1")]
        assert "AWAITING_APPROVAL" in phases
        assert "INTENT" not in phases  # the rule did not let it run unasked
