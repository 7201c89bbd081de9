"""Standing approvals: a journaled grant covers future calls of one tool, within its limits.

Each grant is a chain of its own (`grant-<id>`: GRANTED, GRANT_USED…, REVOKED); a covered
call consumes it before its INTENT, which names the grant in `approval_grant`. A call
outside the grant's constraints, count, amount, expiry, or after its revocation asks a
human as before; a grant whose chain does not verify covers nothing. Memory, SQLite and
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from sagacity import (
    ApprovalInputError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ConfigurationError,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    SelfApprovalError,
    compensable,
    verify,
)
from sagacity.approval._grants import StandingGrant
from sagacity.audit._keys import generate_key
from sagacity.journal import sha256_hex
from sagacity.testing import FakeClock
from tests.approval._edit_row import edit_payload
from tests.approval._policy import OpenSagacity

IRREVERSIBLE = Reversibility.IRREVERSIBLE


class Payments:
    """Pays payees; every payment that ran is noted, and the rule's reads are counted."""

    def __init__(self) -> None:
        self.paid: list[tuple[Any, str]] = []
        self.rule_asked = 0

    @compensable(reversibility=IRREVERSIBLE)
    def pay(self, amount: Any, payee: str, currency: str = "EUR") -> str:
        """Pay a payee."""
        self.paid.append((amount, payee))
        return f"payment-{len(self.paid)}"

    def big(self, input: Mapping[str, Any]) -> bool:
        """The rule of `pay_ruled`: amounts above 1000 ask."""
        self.rule_asked += 1
        return bool(input["amount"] > 1000)


def _paying(sagacity: Sagacity) -> tuple[Payments, Any]:
    payments = Payments()
    sagacity.wrap(payments)
    return payments, sagacity.tool("pay")


def _pay(sagacity: Sagacity, saga_id: str, started_by: str | None = "alice", **input: Any) -> Any:
    tool = sagacity.tool("pay")
    return sagacity.saga(saga_id, lambda: tool(**input), started_by=started_by).outcome


def _grant(sagacity: Sagacity, **terms: Any) -> StandingGrant:
    options: dict[str, Any] = {"grantor": "carol", "max_calls": 10, "ttl": 3600}
    options.update(terms)
    return sagacity.grant("pay", **options)


RAN, ASKED = SagaOutcome.COMPLETED, SagaOutcome.AWAITING_APPROVAL


class TestConstraints:
    def test_a_covered_call_runs_and_its_intent_names_the_grant(self, sagacity: Sagacity) -> None:
        """The INTENT's approval_grant names the grant and the GRANT_USED committed before it."""
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity, match={"payee": {"equals": "ACME"}})

        assert _pay(sagacity, "s1", amount=10, payee="ACME") is RAN

        assert payments.paid == [(10, "ACME")]
        intent = sagacity.history("s1")[0]
        chain = sagacity.history(f"grant-{grant.grant_id}")
        assert [e.phase for e in chain] == [Phase.GRANTED, Phase.GRANT_USED]
        used = chain[1]
        assert intent.payload["approval_grant"] == {
            "grant_id": grant.grant_id,
            "grantor": "carol",
            "grant_seq": 2,
            "grant_hash": used.hash,
            "use": 1,
            "amount": None,
        }
        assert used.payload == {
            "saga_id": "s1",
            "call_id": intent.call_id,
            "input_sha256": sha256_hex({"amount": 10, "payee": "ACME", "currency": "EUR"}),
            "amount": None,
            "use": 1,
        }
        assert used.recorded_at <= intent.recorded_at
        assert verify(sagacity.journal).ok

    def test_exact_value_other_value_asks(self, sagacity: Sagacity) -> None:
        """`equals` compares JSON values: "ACME " or 1 for "1" are other values."""
        payments, _ = _paying(sagacity)
        _grant(sagacity, match={"payee": {"equals": "ACME"}, "currency": {"equals": "EUR"}})

        assert _pay(sagacity, "s1", amount=1, payee="ACME ") is ASKED
        assert _pay(sagacity, "s2", amount=1, payee="ACME", currency="USD") is ASKED
        assert _pay(sagacity, "s3", amount=1, payee="ACME") is RAN
        assert payments.paid == [(1, "ACME")]
        (awaiting,) = sagacity.history("s1")
        assert awaiting.phase is Phase.AWAITING_APPROVAL

    def test_allow_list_of_payees(self, sagacity: Sagacity) -> None:
        """Only the listed payees are covered."""
        payments, _ = _paying(sagacity)
        _grant(sagacity, match={"payee": {"one_of": ["ACME", "Globex"]}})

        assert _pay(sagacity, "s1", amount=5, payee="Globex") is RAN
        assert _pay(sagacity, "s2", amount=5, payee="Initech") is ASKED
        assert _pay(sagacity, "s3", amount=5, payee="ACME") is RAN
        assert payments.paid == [(5, "Globex"), (5, "ACME")]

    @pytest.mark.parametrize(
        ("amount", "outcome"),
        [(10, RAN), (250.5, RAN), (500, RAN), (9.99, ASKED), (500.01, ASKED), ("100", ASKED)],
    )
    def test_numeric_range(self, sagacity: Sagacity, amount: Any, outcome: SagaOutcome) -> None:
        """Bounds are inclusive; a number outside, or a string, is not in the range."""
        payments, _ = _paying(sagacity)
        _grant(sagacity, match={"amount": {"min": 10, "max": 500}})
        assert _pay(sagacity, "s1", amount=amount, payee="ACME") is outcome
        assert payments.paid == ([(amount, "ACME")] if outcome is RAN else [])

    def test_a_constrained_argument_left_at_its_default_is_read_as_called(
        self, sagacity: Sagacity
    ) -> None:
        """The constraint reads the input as journaled, defaults included."""
        _paying(sagacity)
        _grant(sagacity, match={"currency": {"equals": "EUR"}})
        assert _pay(sagacity, "s1", amount=1, payee="ACME") is RAN

    @pytest.mark.parametrize(
        ("terms", "why"),
        [
            ({"match": {"amount": {"max": "lots"}}}, "must be a number"),
            ({"match": {"amount": {"min": 5, "max": 1}}}, "is empty"),
            ({"match": {"payee": {"one_of": []}}}, "allow-list"),
            ({"match": {"payee": {"like": "A%"}}}, "'equals', 'one_of'"),
            ({"match": {"payee": "ACME"}}, "must be {'equals'"),
            ({"max_calls": 0}, "max_calls"),
            ({"max_calls": True}, "max_calls"),
            ({"max_amount": 100}, "go together"),
            ({"max_amount": -1, "amount_field": "amount"}, "at least 0"),
            ({"ttl": -5}, "past"),
            ({"ttl": float("nan")}, "not a length of time"),
            ({"ttl": 86_400_000_000_000.0}, "not a length of time"),
            ({"started_by": " bob"}, "started_by"),
            ({"started_by": ""}, "started_by"),
        ],
    )
    def test_malformed_terms_are_refused(
        self, sagacity: Sagacity, terms: dict[str, Any], why: str
    ) -> None:
        """Nothing is journaled for terms a grant cannot hold."""
        _paying(sagacity)
        with pytest.raises(ApprovalInputError, match="tool 'pay'") as refused:
            _grant(sagacity, **terms)
        assert why in str(refused.value)
        assert sagacity.grants() == []

    def test_a_grant_needs_an_expiry(self, sagacity: Sagacity) -> None:
        """Neither expires_at nor ttl: refused."""
        with pytest.raises(ApprovalInputError, match="needs an expiry"):
            sagacity.grant("pay", grantor="carol", max_calls=1)


class TestBudget:
    def test_at_the_exact_count_the_last_call_runs_and_the_next_asks(
        self, sagacity: Sagacity
    ) -> None:
        """max_calls=2: calls 1 and 2 run, call 3 asks; the listing shows 0 left."""
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity, max_calls=2)

        assert _pay(sagacity, "s1", amount=1, payee="A") is RAN
        assert sagacity.get_grant(grant.grant_id).remaining_calls == 1
        assert _pay(sagacity, "s2", amount=2, payee="A") is RAN
        assert _pay(sagacity, "s3", amount=3, payee="A") is ASKED

        assert payments.paid == [(1, "A"), (2, "A")]
        (shown,) = sagacity.grants()
        assert (shown.state, shown.used_calls, shown.remaining_calls) == ("exhausted", 2, 0)

    def test_at_the_exact_amount_the_last_call_runs_and_the_next_asks(
        self, sagacity: Sagacity
    ) -> None:
        """max_amount=100: 60 runs, 50 asks (110), 40 runs (exactly 100), then even 0.01 asks."""
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity, max_amount=100, amount_field="amount")

        assert _pay(sagacity, "s1", amount=60, payee="A") is RAN
        assert sagacity.get_grant(grant.grant_id).remaining_amount == "40"
        assert _pay(sagacity, "s2", amount=50, payee="A") is ASKED
        assert _pay(sagacity, "s3", amount=40, payee="A") is RAN
        assert _pay(sagacity, "s4", amount=0.01, payee="A") is ASKED

        assert payments.paid == [(60, "A"), (40, "A")]
        shown = sagacity.get_grant(grant.grant_id)
        assert (shown.state, shown.used_amount, shown.remaining_amount) == ("exhausted", "100", "0")
        intent = sagacity.history("s3")[0]
        assert intent.payload["approval_grant"]["amount"] == 40

    def test_decimal_amounts_add_up_exactly(self, sagacity: Sagacity) -> None:
        """0.1 + 0.2 is 0.3 in the budget, as a person counts, not 0.30000000000000004."""
        payments, _ = _paying(sagacity)
        _grant(sagacity, max_amount=0.3, amount_field="amount")
        assert _pay(sagacity, "s1", amount=0.1, payee="A") is RAN
        assert _pay(sagacity, "s2", amount=0.2, payee="A") is RAN
        assert sagacity.grants()[0].used_amount == "0.3"
        assert len(payments.paid) == 2

    @pytest.mark.parametrize("amount", [-5, None, "10", True])
    def test_an_amount_that_is_not_a_number_of_at_least_zero_asks(
        self, sagacity: Sagacity, amount: Any
    ) -> None:
        """A negative amount would give budget back: not covered; nor is a missing one."""
        payments, _ = _paying(sagacity)
        _grant(sagacity, max_amount=100, amount_field="amount")
        assert _pay(sagacity, "s1", amount=amount, payee="A") is ASKED
        assert payments.paid == []
        assert sagacity.grants()[0].used_calls == 0


class TestExpiryAndRevocation:
    def test_after_its_expiry_a_grant_covers_nothing(self, open_sagacity: OpenSagacity) -> None:
        """With a fake clock: one second before the expiry the call runs, at it the call asks."""
        clock = FakeClock()
        sagacity = open_sagacity(clock=clock)
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity, ttl=60)

        clock.advance(59)
        assert _pay(sagacity, "s1", amount=1, payee="A") is RAN
        clock.advance(1)
        assert _pay(sagacity, "s2", amount=1, payee="A") is ASKED
        assert payments.paid == [(1, "A")]
        assert sagacity.get_grant(grant.grant_id).state == "expired"
        assert sagacity.get_grant(grant.grant_id).remaining_calls == 0

    def test_a_revoked_grant_covers_the_next_call_no_more(self, sagacity: Sagacity) -> None:
        """Revoked between two calls: the first ran covered, the second asks."""
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity)
        assert _pay(sagacity, "s1", amount=1, payee="A") is RAN

        revoked = sagacity.revoke(grant.grant_id, revoked_by="dave", reason="fraud alert")

        shown = (revoked.state, revoked.revoked_by, revoked.remaining_calls)
        assert shown == ("revoked", "dave", 0)
        assert _pay(sagacity, "s2", amount=1, payee="A") is ASKED
        assert payments.paid == [(1, "A")]
        chain = sagacity.history(f"grant-{grant.grant_id}")
        assert [e.phase for e in chain] == [Phase.GRANTED, Phase.GRANT_USED, Phase.REVOKED]
        assert chain[-1].payload == {"revoked_by": "dave", "reason": "fraud alert", "via": "python"}

    def test_revoking_twice_or_an_unknown_grant_is_refused(self, sagacity: Sagacity) -> None:
        """A second revocation names the first; an unknown id is not found."""
        _paying(sagacity)
        grant = _grant(sagacity)
        sagacity.revoke(grant.grant_id, revoked_by="dave")
        with pytest.raises(SagaStateError, match=r"was revoked at .* by 'dave'"):
            sagacity.revoke(grant.grant_id, revoked_by="erin")
        with pytest.raises(ApprovalNotFoundError, match="no standing grant 'nope'"):
            sagacity.revoke("nope", revoked_by="erin")

    def test_a_call_asked_before_the_grant_still_needs_its_approval(
        self, sagacity: Sagacity
    ) -> None:
        """Once a request exists its decision stands: a later grant does not let it run."""
        payments, _ = _paying(sagacity)
        assert _pay(sagacity, "s1", amount=1, payee="A") is ASKED
        _grant(sagacity)
        with pytest.raises(ApprovalMissingError, match="no approval is journaled"):
            sagacity.resume_saga("s1")
        assert payments.paid == []
        assert sagacity.grants()[0].used_calls == 0


class TestFourEyes:
    def test_a_self_grant_is_refused(self, sagacity: Sagacity) -> None:
        """The grantor cannot grant for sagas they start themselves (lookalikes included)."""
        with pytest.raises(SelfApprovalError, match="'carol' cannot grant"):
            sagacity.grant("pay", grantor="carol", started_by="CAROL", max_calls=1, ttl=60)
        assert sagacity.grants() == []

    def test_a_grant_never_covers_its_grantors_own_saga(self, sagacity: Sagacity) -> None:
        """A grant for any saga still does not cover one the grantor started."""
        payments, _ = _paying(sagacity)
        _grant(sagacity)
        assert _pay(sagacity, "s1", started_by="carol", amount=1, payee="A") is ASKED
        assert _pay(sagacity, "s2", started_by="alice", amount=1, payee="A") is RAN
        assert payments.paid == [(1, "A")]

    def test_a_grant_for_one_principal_covers_only_their_sagas(self, sagacity: Sagacity) -> None:
        """started_by='alice': bob's saga and a saga with no starter ask."""
        payments, _ = _paying(sagacity)
        _grant(sagacity, started_by="alice")
        assert _pay(sagacity, "s1", started_by="bob", amount=1, payee="A") is ASKED
        assert _pay(sagacity, "s2", started_by=None, amount=1, payee="A") is ASKED
        assert _pay(sagacity, "s3", started_by="alice", amount=1, payee="A") is RAN
        assert payments.paid == [(1, "A")]


class TestTampering:
    def test_an_edited_grant_row_covers_nothing(self, sagacity: Sagacity, store_url: str) -> None:
        """max_calls raised in storage: the chain no longer verifies, and the call asks."""
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity, max_calls=1)
        assert _pay(sagacity, "s1", amount=1, payee="A") is RAN
        chain_id = f"grant-{grant.grant_id}"
        granted = sagacity.history(chain_id)[0]
        edited = dict(granted.payload)  # type: ignore[arg-type]
        edited["terms"] = {**edited["terms"], "max_calls": 1000}
        edit_payload(sagacity, store_url, chain_id, 1, edited)

        assert _pay(sagacity, "s2", amount=1, payee="A") is ASKED

        assert payments.paid == [(1, "A")]
        (shown,) = sagacity.grants()
        assert shown.state == "unverifiable"
        assert shown.problem == "seq 1 does not match its hash: it was edited"
        assert shown.remaining_calls == 0
        report = verify(sagacity.journal, chain_id)
        assert not report.ok
        assert report.problems[0].seq == 1

    def test_an_edited_consumption_covers_nothing(self, sagacity: Sagacity, store_url: str) -> None:
        """A GRANT_USED whose amount was lowered in storage: the whole grant stops covering."""
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity, max_amount=100, amount_field="amount")
        assert _pay(sagacity, "s1", amount=90, payee="A") is RAN
        chain_id = f"grant-{grant.grant_id}"
        used = sagacity.history(chain_id)[1]
        edit_payload(sagacity, store_url, chain_id, 2, {**used.payload, "amount": 0})  # type: ignore[dict-item]

        assert _pay(sagacity, "s2", amount=50, payee="A") is ASKED
        assert payments.paid == [(90, "A")]

    def test_a_saga_entry_planted_in_a_grant_chain_covers_nothing(self, sagacity: Sagacity) -> None:
        """A chain holding another phase than a grant's is not a grant."""
        payments, _ = _paying(sagacity)
        grant = _grant(sagacity)
        sagacity.journal.append(
            f"grant-{grant.grant_id}", Phase.APPROVED, tool_name="pay", payload={}
        )
        assert _pay(sagacity, "s1", amount=1, payee="A") is ASKED
        assert payments.paid == []
        assert "APPROVED entry" in str(sagacity.grants()[0].problem)


class TestSignedGrants:
    def test_a_signed_grant_covers_where_signatures_are_required(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """Signed by the grantor's process, verified by the worker's public key."""
        key = generate_key()
        grantor = open_sagacity(approval_signing_key=key, require_signed_approvals=True)
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        payments, _ = _paying(worker)
        grant = _grant(grantor)
        granted = grantor.history(f"grant-{grant.grant_id}")[0]
        assert granted.payload["key_id"] == key.key_id  # type: ignore[index,call-overload]

        assert _pay(worker, "s1", amount=1, payee="A") is RAN
        assert payments.paid == [(1, "A")]

    def test_an_unsigned_or_forged_grant_covers_nothing(self, open_sagacity: OpenSagacity) -> None:
        """Journaled without a key, or signed by an unknown one: the call asks."""
        key = generate_key()
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        unsigned = open_sagacity()
        forger = open_sagacity(approval_signing_key=generate_key())
        payments, _ = _paying(worker)
        _grant(unsigned)
        _grant(forger)

        assert _pay(worker, "s1", amount=1, payee="A") is ASKED
        assert payments.paid == []
        problems = sorted(str(g.problem) for g in worker.grants())
        assert problems[0].startswith("it carries no signature")
        assert "not one of the trusted keys" in problems[1]

    def test_a_process_that_cannot_sign_journals_no_grant(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """require_signed_approvals without a signing key: refused, nothing journaled."""
        key = generate_key()
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        with pytest.raises(ConfigurationError, match="approvals must be signed"):
            _grant(worker)
        assert worker.grants() == []


class TestDecidedOnce:
    def test_asking_ahead_then_calling_decides_once(self, sagacity: Sagacity) -> None:
        """An adapter's pending_approval, then the call: one rule evaluation, one record."""
        payments = Payments()

        @compensable(reversibility=IRREVERSIBLE, approval=payments.big)
        def pay_ruled(amount: int, payee: str) -> str:
            """Pay under a rule."""
            payments.paid.append((amount, payee))
            return "ok"

        sagacity.wrap(pay_ruled)
        tool = sagacity.tool("pay_ruled")

        def work() -> None:
            assert tool.pending_approval((), {"amount": 5, "payee": "A"}, call_id="c1") is None
            tool.invoke((), {"amount": 5, "payee": "A"}, call_id="c1")

        assert sagacity.saga("s1", work).outcome is RAN
        assert payments.rule_asked == 1
        assert payments.paid == [(5, "A")]
        (intent, _, _) = sagacity.history("s1")
        assert intent.payload["approval_rule"]["asked"] is False  # type: ignore[index,call-overload]

    def test_asking_ahead_consumes_a_grant_once(self, sagacity: Sagacity) -> None:
        """The GRANT_USED taken when asked ahead is the one the call's INTENT names."""
        payments, tool = _paying(sagacity)
        grant = _grant(sagacity, max_calls=1)

        def work() -> None:
            args = {"amount": 5, "payee": "A"}
            assert tool.pending_approval((), args, call_id="c1") is None
            tool.invoke((), args, call_id="c1")

        assert sagacity.saga("s1", work, started_by="alice").outcome is RAN
        assert payments.paid == [(5, "A")]
        chain = sagacity.history(f"grant-{grant.grant_id}")
        assert [e.phase for e in chain] == [Phase.GRANTED, Phase.GRANT_USED]
        intent = sagacity.history("s1")[0]
        assert intent.payload["approval_grant"]["grant_seq"] == 2  # type: ignore[index,call-overload]

    def test_a_call_with_other_input_than_asked_ahead_is_decided_again(
        self, sagacity: Sagacity
    ) -> None:
        """Asked ahead for 5 and called with 7: the decision for 5 is not the call's."""
        payments, tool = _paying(sagacity)
        _grant(sagacity, max_calls=1)

        def work() -> None:
            assert tool.pending_approval((), {"amount": 5, "payee": "A"}, call_id="c1") is None
            tool.invoke((), {"amount": 7, "payee": "A"}, call_id="c1")

        # The grant's one call went to the input asked about; the other input asks.
        assert sagacity.saga("s1", work, started_by="alice").outcome is ASKED
        assert payments.paid == []
        assert sagacity.grants()[0].used_calls == 1
