"""Grant chains whose entries hold anything JSON can: read back, listed, never a crash.

Whoever can append to the journal (or rewrite a row with a fresh hash) can put any payload
in a GRANTED, GRANT_USED or REVOKED entry. Reading it back must give a grant the REST
API, the CLI and the inbox can show, and one whose terms are not a grant's covers
nothing. Hypothesis draws the payloads; the journal is in memory.
"""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagacity import (
    InMemoryApprovalStore,
    InMemoryJournal,
    Phase,
    Reversibility,
    Sagacity,
    compensable,
)
from sagacity.server._grant_routes import GrantModel
from sagacity.testing import FakeClock

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)

VALID_TERMS: dict[str, Any] = {
    "tool_name": "pay",
    "match": {"amount": {"min": 0, "max": 10}},
    "max_calls": 3,
    "max_amount": 10,
    "amount_field": "amount",
    "expires_at": "2027-01-01T00:00:00.000000Z",
    "started_by": None,
}


@st.composite
def granted_payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A GRANTED payload: a valid one with some of its fields, or its terms', replaced."""
    terms = dict(VALID_TERMS)
    for key in draw(st.lists(st.sampled_from([*VALID_TERMS, "extra"]), max_size=3)):
        terms[key] = draw(json_values)
    payload: dict[str, Any] = {
        "grant_id": "g1",
        "grantor": "carol",
        "terms": terms,
        "reason": None,
        "via": "python",
    }
    for key in draw(st.lists(st.sampled_from([*payload, "signature"]), max_size=2)):
        payload[key] = draw(json_values)
    return payload


later_entries = st.lists(
    st.tuples(st.sampled_from([Phase.GRANT_USED, Phase.REVOKED]), json_values), max_size=4
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(granted=granted_payloads(), later=later_entries, amount=json_values)
def test_any_grant_chain_reads_back_as_a_grant_that_can_be_shown(
    granted: dict[str, Any], later: list[tuple[Phase, Any]], amount: Any
) -> None:
    """Listed and shown without error; a call is covered only by a chain that reads active."""
    journal = InMemoryJournal()
    sagacity = Sagacity(journal, InMemoryApprovalStore(), clock=FakeClock(NOW))
    paid: list[Any] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(amount: Any) -> str:
        """Pay."""
        paid.append(amount)
        return "paid"

    (tool,) = sagacity.wrap(pay)
    journal.append("grant-g1", Phase.GRANTED, tool_name="pay", payload=granted)
    for phase, payload in later:
        journal.append("grant-g1", phase, tool_name="pay", payload=payload)

    (shown,) = sagacity.grants()
    GrantModel.of(shown)  # what GET /grants answers: never a validation error
    shown.describe()
    active = shown.state == "active"

    outcome = sagacity.saga("s1", lambda: tool(amount=amount), started_by="alice").outcome
    if not active:
        assert paid == []
        assert outcome.name != "COMPLETED"
