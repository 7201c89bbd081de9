"""Standing grants against hostile and careless input: what a grant may hold and cover.

Terms no JSON number holds exactly (a Decimal NaN, 2**70, an expiry past year 9999 in
UTC) are refused with `ApprovalInputError` and nothing journaled. A grant can stand for
one approver only: a tool that needs two, or a justification the grant does not give, is
never covered, whoever journaled the grant. A GRANT_USED deleted from the end of a grant's
chain, or an unsigned GRANTED where approvals must be signed, is reported by `verify`.
Memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from sagacity import (
    AppendConflictError,
    ApprovalInputError,
    ApprovalNotFoundError,
    InMemoryApprovalStore,
    InMemoryJournal,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    SqliteJournal,
    compensable,
    verify,
)
from sagacity.audit import chain_heads
from sagacity.audit._keys import generate_key
from sagacity.journal import canonical_bytes
from tests._postgres import admin_connection
from tests.approval._edit_row import edit_payload
from tests.approval._policy import OpenSagacity
from tests.audit._tamper import MemoryTamper, SqliteTamper

IRREVERSIBLE = Reversibility.IRREVERSIBLE
RAN, ASKED = SagaOutcome.COMPLETED, SagaOutcome.AWAITING_APPROVAL


class Ledger:
    """Tools of every kind a grant may be asked for; each call that ran is noted."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    @compensable(reversibility=IRREVERSIBLE)
    def pay(self, amount: Any, payee: str) -> str:
        """Pay once; one approver."""
        self.ran.append(f"pay {amount} {payee}")
        return "paid"

    @compensable(reversibility=IRREVERSIBLE, approvers=2)
    def pay_big(self, amount: Any, payee: str) -> str:
        """Pay a large sum; two different approvers."""
        self.ran.append(f"pay_big {amount} {payee}")
        return "paid big"

    @compensable(reversibility=IRREVERSIBLE, justification_required=True)
    def close_account(self, account: str) -> str:
        """Close an account; each approval must say why."""
        self.ran.append(f"close {account}")
        return "closed"

    @compensable(by="unbook")
    def book(self, ref: str) -> str:
        """Book a line; compensable, so it never asks."""
        self.ran.append(f"book {ref}")
        return ref

    def unbook(self) -> None:
        """Nothing to undo in this ledger."""

    @compensable(reversibility=IRREVERSIBLE)
    def notify(self, **fields: Any) -> str:
        """Send a notice with any fields."""
        self.ran.append("notify")
        return "sent"


def _run(sagacity: Sagacity, saga_id: str, tool: str, **input: Any) -> SagaOutcome:
    call = sagacity.tool(tool)
    return sagacity.saga(saga_id, lambda: call(**input), started_by="alice").outcome


def _terms(**terms: Any) -> dict[str, Any]:
    return {"grantor": "carol", "max_calls": 5, "ttl": 3600} | terms


class TestTermsNoJsonNumberHolds:
    @pytest.mark.parametrize(
        ("terms", "why"),
        [
            ({"max_amount": decimal.Decimal("sNaN")}, "not sNaN"),
            ({"max_amount": decimal.Decimal("NaN")}, "not NaN"),
            ({"max_amount": decimal.Decimal("Infinity")}, "not Infinity"),
            ({"max_amount": decimal.Decimal("0.29999999999999999999")}, "would be 0.3"),
            ({"max_amount": 2**70}, "at most 9007199254740991"),
            ({"max_amount": decimal.Decimal("1e400")}, "at most 9007199254740991"),
            ({"max_calls": 2**53}, "max_calls must be a whole number from 1"),
            ({"match": {"amount": {"max": 10**30}}}, "the constraint on 'amount' is not JSON"),
            ({"match": {"payee": {"equals": 10**30}}}, "the constraint on 'payee' is not JSON"),
            ({"match": {"payee": {"one_of": ["A", 2**64]}}}, "the constraint on 'payee'"),
        ],
    )
    def test_refused_naming_the_term_with_nothing_journaled(
        self, sagacity: Sagacity, terms: dict[str, Any], why: str
    ) -> None:
        """Not a SerializationError from the journal, nor a decimal or overflow error."""
        sagacity.wrap(Ledger())
        if "max_amount" in terms:
            terms["amount_field"] = "amount"
        with pytest.raises(ApprovalInputError, match="tool 'pay'") as refused:
            sagacity.grant("pay", **_terms(**terms))
        assert why in str(refused.value)
        assert sagacity.grants() == []

    def test_an_expiry_past_year_9999_in_utc_is_refused(self, sagacity: Sagacity) -> None:
        """23:59 on 9999-12-31 an hour west of UTC is in year 10000 in UTC: refused."""
        west = datetime.timezone(datetime.timedelta(hours=-1))
        with pytest.raises(ApprovalInputError, match="past the last time a journal holds"):
            sagacity.grant(
                "pay",
                **_terms(ttl=None, expires_at=datetime.datetime(9999, 12, 31, 23, 59, tzinfo=west)),
            )
        assert sagacity.grants() == []

    def test_the_farthest_expiry_and_largest_budget_are_kept_exactly(
        self, sagacity: Sagacity
    ) -> None:
        """The last representable terms are journaled and read back as given."""
        ledger = Ledger()
        sagacity.wrap(ledger)
        far = datetime.datetime(9999, 12, 31, 23, 59, tzinfo=datetime.UTC)
        made = sagacity.grant(
            "pay",
            grantor="carol",
            max_calls=2**53 - 1,
            expires_at=far,
            max_amount=decimal.Decimal("12.34"),
            amount_field="amount",
        )
        assert (made.max_calls, made.max_amount, made.expires_at) == (
            2**53 - 1,
            12.34,
            "9999-12-31T23:59:00.000000Z",
        )
        assert _run(sagacity, "s1", "pay", amount=12.34, payee="A") is RAN
        assert _run(sagacity, "s2", "pay", amount=0.01, payee="A") is ASKED
        assert ledger.ran == ["pay 12.34 A"]


class TestAmountsOfCalls:
    @pytest.mark.parametrize(
        "amount", ["1,000.50", "1.000,50", "1e2", " 5", "NaN", "-0", [5], {"value": 5}]
    )
    def test_an_amount_that_is_not_a_json_number_asks(
        self, sagacity: Sagacity, amount: Any
    ) -> None:
        """Text in any locale's format, a list or an object is not an amount: a human decides."""
        ledger = Ledger()
        sagacity.wrap(ledger)
        sagacity.grant("pay", **_terms(max_amount=10_000, amount_field="amount"))
        assert _run(sagacity, "s1", "pay", amount=amount, payee="A") is ASKED
        assert ledger.ran == []
        assert sagacity.grants()[0].used_calls == 0

    @pytest.mark.parametrize(
        ("amount", "outcome"),
        [
            (decimal.Decimal("5"), ASKED),  # journaled as the text "5"
            (10**30, ASKED),  # past what a JSON number holds exactly
            (float("nan"), SagaOutcome.COMPENSATED),  # no JSON form: refused before it runs
            (float("inf"), SagaOutcome.COMPENSATED),
        ],
    )
    def test_an_amount_python_holds_but_json_does_not_is_never_covered(
        self, sagacity: Sagacity, amount: Any, outcome: SagaOutcome
    ) -> None:
        """Nothing runs and the grant is not consumed."""
        ledger = Ledger()
        sagacity.wrap(ledger)
        sagacity.grant("pay", **_terms(max_amount=100, amount_field="amount"))
        assert _run(sagacity, "s1", "pay", amount=amount, payee="A") is outcome
        assert ledger.ran == []
        assert sagacity.grants()[0].used_calls == 0

    def test_negative_zero_and_a_huge_float_count_as_numbers(self, sagacity: Sagacity) -> None:
        """-0.0 takes nothing; 1e308 is more than the budget and asks."""
        ledger = Ledger()
        sagacity.wrap(ledger)
        sagacity.grant("pay", **_terms(max_amount=100, amount_field="amount"))
        assert _run(sagacity, "s1", "pay", amount=-0.0, payee="A") is RAN
        assert _run(sagacity, "s2", "pay", amount=1e308, payee="A") is ASKED
        shown = sagacity.grants()[0]
        assert (shown.used_calls, shown.used_amount, shown.remaining_amount) == (1, "0", "100")


class TestWhatAGrantCannotStandFor:
    @pytest.mark.parametrize(
        ("tool", "terms", "why"),
        [
            ("book", {}, "(COMPENSATABLE): the grant is refused: its calls never ask"),
            ("pay_big", {}, "each call needs 2 different approvers"),
            ("close_account", {}, "must give a justification: give the grant a reason"),
            ("pay", {"match": {"payee_name": {"equals": "A"}}}, "no argument 'payee_name'"),
            ("pay", {"max_amount": 5, "amount_field": "ammount"}, "no argument 'ammount'"),
        ],
    )
    def test_a_grant_for_a_tool_wrapped_here_is_checked_against_it(
        self, sagacity: Sagacity, tool: str, terms: dict[str, Any], why: str
    ) -> None:
        """A grant that could never cover one of the tool's calls is refused, not journaled."""
        sagacity.wrap(Ledger())
        with pytest.raises(ApprovalInputError, match=f"tool '{tool}'") as refused:
            sagacity.grant(tool, **_terms(**terms))
        assert why in str(refused.value)
        assert sagacity.grants() == []

    def test_what_a_process_cannot_check_is_journaled(self, sagacity: Sagacity) -> None:
        """A tool not wrapped here, or one taking **fields, may have any argument."""
        sagacity.wrap(Ledger())
        assert sagacity.grant("refund", **_terms(match={"x": {"equals": 1}})).state == "active"
        assert sagacity.grant("notify", **_terms(match={"x": {"equals": 1}})).state == "active"
        assert _run(sagacity, "s1", "notify", x=1) is RAN
        assert sagacity.grant("close_account", **_terms(reason="dormant accounts")).state == (
            "active"
        )

    def test_a_two_approver_tool_is_never_covered(self, open_sagacity: OpenSagacity) -> None:
        """Granted where the tool is not wrapped (the CLI), the worker still asks two people."""
        granting, worker = open_sagacity(), open_sagacity()
        ledger = Ledger()
        worker.wrap(ledger)
        grant = granting.grant("pay_big", **_terms())

        assert _run(worker, "s1", "pay_big", amount=1, payee="A") is ASKED
        assert ledger.ran == []
        assert worker.get_grant(grant.grant_id).used_calls == 0
        (asked,) = worker.history("s1")
        assert asked.payload["approvers_required"] == 2  # type: ignore[index,call-overload]

    def test_a_justified_tool_is_covered_only_by_a_grant_that_says_why(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """A grant without a reason covers no call whose approvals must give one."""
        granting, worker = open_sagacity(), open_sagacity()
        ledger = Ledger()
        worker.wrap(ledger)
        silent = granting.grant("close_account", **_terms(reason="  "))
        assert _run(worker, "s1", "close_account", account="A-1") is ASKED
        assert worker.get_grant(silent.grant_id).used_calls == 0

        said = granting.grant("close_account", **_terms(reason="dormant since 2020"))
        assert _run(worker, "s2", "close_account", account="A-2") is RAN
        assert ledger.ran == ["close A-2"]
        intent = worker.history("s2")[0]
        assert intent.payload["approval_grant"]["grant_id"] == said.grant_id  # type: ignore[index,call-overload]


def _delete_row(sagacity: Sagacity, store_url: str, saga_id: str, seq: int) -> None:
    """Delete one journal row in storage, as someone with database access would."""
    journal: Any = sagacity.journal
    if isinstance(journal, InMemoryJournal):
        MemoryTamper(journal).delete(saga_id, seq)
    elif isinstance(journal, SqliteJournal):
        tamper = SqliteTamper(journal)
        try:
            tamper.delete(saga_id, seq)
        finally:
            tamper.close()
    else:
        schema = dict(parse_qsl(urlsplit(store_url).query))["schema"]
        table = f'"{schema}".sagacity_journal'
        with admin_connection() as conn, conn.transaction():
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            conn.execute(f"DELETE FROM {table} WHERE saga_id = %s AND seq = %s", (saga_id, seq))
            conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")


class TestDeletedConsumption:
    def test_a_deleted_last_use_is_reported_by_verify(
        self, sagacity: Sagacity, store_url: str
    ) -> None:
        """The covered call's INTENT names the GRANT_USED its grant's chain lost.

        The chain alone still verifies (its tail is gone, every link holds), so the grant
        covers one more call; `verify` names the deleted entry from the INTENT, and then
        the entry that took its seq, as does `verify` with a recorded head.
        """
        ledger = Ledger()
        sagacity.wrap(ledger)
        grant = sagacity.grant("pay", **_terms(max_calls=1))
        chain_id = f"grant-{grant.grant_id}"
        assert _run(sagacity, "s1", "pay", amount=1, payee="A") is RAN
        heads = chain_heads(sagacity.journal, chain_id)
        assert verify(sagacity.journal).ok

        _delete_row(sagacity, store_url, chain_id, 2)
        report = verify(sagacity.journal)
        (problem,) = report.problems
        assert (problem.saga_id, problem.seq) == (chain_id, 2)
        assert problem.reason.startswith("deleted: the INTENT of call 'pay#1' in saga 's1'")
        truncated = verify(sagacity.journal, chain_id, heads=heads).problems
        assert truncated[0].reason.startswith("truncation")

        # Unseen by the chain, the deletion lets one more call through; verify sees it.
        assert _run(sagacity, "s2", "pay", amount=2, payee="A") is RAN
        (problem,) = verify(sagacity.journal).problems
        assert (problem.saga_id, problem.seq) == (chain_id, 2)
        assert problem.reason.startswith("rewritten: the INTENT of call 'pay#1' in saga 's1'")

    def test_a_deleted_grant_chain_is_reported_by_verify(
        self, sagacity: Sagacity, store_url: str
    ) -> None:
        """Every row of a grant gone: the calls it covered still name it."""
        sagacity.wrap(Ledger())
        grant = sagacity.grant("pay", **_terms())
        chain_id = f"grant-{grant.grant_id}"
        assert _run(sagacity, "s1", "pay", amount=1, payee="A") is RAN
        _delete_row(sagacity, store_url, chain_id, 2)
        _delete_row(sagacity, store_url, chain_id, 1)
        (problem,) = verify(sagacity.journal).problems
        assert (problem.saga_id, problem.seq) == (chain_id, 2)
        assert "deleted" in problem.reason
        # Verifying one saga, or an export of some sagas, checks no other chain.
        assert verify(sagacity.journal, "s1").ok


class TestUnsignedGrantsInVerify:
    def test_an_unsigned_or_forged_granted_is_reported_with_the_approval_keys(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """As an unsigned APPROVED is: verify names the GRANTED that would not count."""
        key = generate_key()
        signed = open_sagacity(approval_signing_key=key)
        unsigned = open_sagacity()
        forger = open_sagacity(approval_signing_key=generate_key())
        good = signed.grant("pay", **_terms())
        bare = unsigned.grant("pay", **_terms())
        forged = forger.grant("pay", **_terms())

        assert verify(signed.journal).ok  # without keys, signatures are not checked
        report = verify(signed.journal, approval_public_keys=[key.public])
        found = {p.saga_id: p for p in report.problems}
        assert set(found) == {f"grant-{bare.grant_id}", f"grant-{forged.grant_id}"}
        assert f"grant-{good.grant_id}" not in found
        assert found[f"grant-{bare.grant_id}"].seq == 1
        assert "it carries no signature" in found[f"grant-{bare.grant_id}"].reason
        assert "not one of the trusted keys" in found[f"grant-{forged.grant_id}"].reason

    def test_an_edited_use_is_named_once(self, sagacity: Sagacity, store_url: str) -> None:
        """A GRANT_USED edited in storage: one problem, the chain's own, at that seq."""
        sagacity.wrap(Ledger())
        grant = sagacity.grant("pay", **_terms(max_amount=100, amount_field="amount"))
        chain_id = f"grant-{grant.grant_id}"
        assert _run(sagacity, "s1", "pay", amount=90, payee="A") is RAN
        used = sagacity.history(chain_id)[1]
        assert used.phase is Phase.GRANT_USED
        edit_payload(sagacity, store_url, chain_id, 2, {**used.payload, "amount": 0})  # type: ignore[dict-item]
        (problem,) = verify(sagacity.journal).problems
        assert (problem.saga_id, problem.seq) == (chain_id, 2)
        assert "hash" in problem.reason
        assert sagacity.grants()[0].state == "unverifiable"


class TestChainIds:
    def test_an_applications_saga_called_grant_cannot_be_revoked_or_shown_as_one(
        self, sagacity: Sagacity
    ) -> None:
        """Revoking `abc` when saga `grant-abc` is the application's: not found, saga intact."""
        ledger = Ledger()
        sagacity.wrap(ledger)
        assert _run(sagacity, "grant-abc", "book", ref="r-1") is RAN
        before = sagacity.history("grant-abc")

        with pytest.raises(ApprovalNotFoundError, match="'grant-abc' is a saga, not a grant"):
            sagacity.revoke("abc", revoked_by="dave")
        with pytest.raises(ApprovalNotFoundError, match="is a saga"):
            sagacity.get_grant("abc")

        assert sagacity.history("grant-abc") == before
        assert [e.phase for e in before] == [Phase.INTENT, Phase.EXECUTED, Phase.ENDED]
        assert sagacity.grants() == []
        assert verify(sagacity.journal).ok

    def test_a_grant_and_a_saga_never_share_a_chain(self, sagacity: Sagacity) -> None:
        """A saga cannot be opened on a grant's id; the grant keeps covering."""
        ledger = Ledger()
        sagacity.wrap(ledger)
        grant = sagacity.grant("pay", **_terms(max_calls=2))
        with pytest.raises(SagaStateError, match=f"standing grant '{grant.grant_id}'"):
            _run(sagacity, f"grant-{grant.grant_id}", "book", ref="r-1")
        assert _run(sagacity, "s1", "pay", amount=1, payee="A") is RAN
        assert sagacity.get_grant(grant.grant_id).used_calls == 1
        assert ledger.ran == ["pay 1 A"]


def _rewrite_first(sagacity: Sagacity, store_url: str, saga_id: str, payload: Any) -> None:
    """Store `payload` as the chain's first entry with a freshly computed hash."""
    first = sagacity.history(saga_id)[0]
    entry = dataclasses.replace(first, payload=payload)
    entry = dataclasses.replace(entry, hash=entry.computed_hash())
    journal: Any = sagacity.journal
    if isinstance(journal, InMemoryJournal):
        MemoryTamper(journal).replace(saga_id, 1, entry)
    elif isinstance(journal, SqliteJournal):
        tamper = SqliteTamper(journal)
        try:
            tamper.replace(saga_id, 1, entry)
        finally:
            tamper.close()
    else:
        schema = dict(parse_qsl(urlsplit(store_url).query))["schema"]
        table = f'"{schema}".sagacity_journal'
        with admin_connection() as conn, conn.transaction():
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            conn.execute(
                f"UPDATE {table} SET payload = %s, hash = %s WHERE saga_id = %s AND seq = 1",
                (canonical_bytes(payload).decode(), entry.hash, saga_id),
            )
            conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")


class TestRewrittenGrant:
    def test_raised_limits_with_a_fresh_hash_do_not_count_where_grants_are_signed(
        self, open_sagacity: OpenSagacity, store_url: str
    ) -> None:
        """A GRANTED rewritten whole (max_calls 1 to 1000, hash recomputed).

        Its chain verifies link by link, so only a recorded head tells; where approvals
        must be signed, the signature over the terms fails and the grant covers nothing.
        """
        key = generate_key()
        granting = open_sagacity(approval_signing_key=key)
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        ledger = Ledger()
        worker.wrap(ledger)
        grant = granting.grant("pay", **_terms(max_calls=1))
        chain_id = f"grant-{grant.grant_id}"
        heads = chain_heads(granting.journal, chain_id)
        granted = granting.history(chain_id)[0].payload
        raised = {**granted, "terms": {**granted["terms"], "max_calls": 1000}}  # type: ignore[dict-item,index,call-overload]
        _rewrite_first(granting, store_url, chain_id, raised)

        assert granting.get_grant(grant.grant_id).max_calls == 1000  # signatures not required
        shown = worker.get_grant(grant.grant_id)
        assert (shown.state, shown.problem) == (
            "unverifiable",
            f"its signature does not verify with key {key.key_id!r}",
        )
        assert _run(worker, "s1", "pay", amount=1, payee="A") is ASKED
        assert ledger.ran == []
        (rewritten,) = verify(worker.journal, chain_id, heads=heads).problems
        assert rewritten.reason.startswith("rewritten: seq 1")
        (unsigned,) = verify(worker.journal, approval_public_keys=[key.public]).problems
        assert (unsigned.saga_id, unsigned.seq) == (chain_id, 1)
        assert "signature does not verify" in unsigned.reason

    def test_a_reason_written_in_later_does_not_count_where_grants_are_signed(
        self, open_sagacity: OpenSagacity, store_url: str
    ) -> None:
        """A grant given without a reason, rewritten to give one (hash recomputed).

        Without a reason it covers no call of a tool whose approvals must say why; the
        signature covers the reason, so the rewrite leaves the grant unverifiable, and
        the call still asks.
        """
        key = generate_key()
        granting = open_sagacity(approval_signing_key=key)
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        ledger = Ledger()
        worker.wrap(ledger)
        grant = granting.grant("close_account", **_terms())
        assert _run(worker, "s1", "close_account", account="A-1") is ASKED
        chain_id = f"grant-{grant.grant_id}"
        granted = granting.history(chain_id)[0].payload
        _rewrite_first(granting, store_url, chain_id, {**granted, "reason": "dormant"})  # type: ignore[dict-item]

        assert granting.get_grant(grant.grant_id).reason == "dormant"  # signatures not required
        shown = worker.get_grant(grant.grant_id)
        assert (shown.state, shown.problem) == (
            "unverifiable",
            f"its signature does not verify with key {key.key_id!r}",
        )
        assert _run(worker, "s2", "close_account", account="A-2") is ASKED
        assert ledger.ran == []

    def test_a_signed_grant_with_a_reason_covers_a_justified_call(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """The signature over the reason verifies as given: the grant covers the call."""
        key = generate_key()
        granting = open_sagacity(approval_signing_key=key)
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        ledger = Ledger()
        worker.wrap(ledger)
        grant = granting.grant("close_account", **_terms(reason="dormant since 2020"))
        assert worker.get_grant(grant.grant_id).state == "active"
        assert _run(worker, "s1", "close_account", account="A-1") is RAN
        assert ledger.ran == ["close A-1"]


class TestRepeatedRevocation:
    def test_a_second_revoked_entry_leaves_the_grant_revoked(self, sagacity: Sagacity) -> None:
        """Two REVOKED (two revocations journaled at once): revoked by the first, not tampered."""
        sagacity.wrap(Ledger())
        grant = sagacity.grant("pay", **_terms())
        sagacity.revoke(grant.grant_id, revoked_by="dave")
        sagacity.journal.append(
            f"grant-{grant.grant_id}",
            Phase.REVOKED,
            tool_name="pay",
            payload={"revoked_by": "erin", "reason": None, "via": "python"},
        )
        shown = sagacity.get_grant(grant.grant_id)
        assert (shown.state, shown.revoked_by, shown.problem) == ("revoked", "dave", None)
        assert _run(sagacity, "s1", "pay", amount=1, payee="A") is ASKED


class TestPlantedUse:
    def test_a_planted_negative_use_gives_no_budget_back(self, sagacity: Sagacity) -> None:
        """A GRANT_USED of -1000 appended through the journal: the grant covers nothing."""
        ledger = Ledger()
        sagacity.wrap(ledger)
        grant = sagacity.grant("pay", **_terms(max_amount=100, amount_field="amount"))
        assert _run(sagacity, "s1", "pay", amount=100, payee="A") is RAN
        sagacity.journal.append(
            f"grant-{grant.grant_id}",
            Phase.GRANT_USED,
            tool_name="pay",
            call_id="planted",
            payload={"saga_id": "x", "call_id": "planted", "amount": -1000, "use": 2},
        )
        shown = sagacity.get_grant(grant.grant_id)
        assert (shown.state, shown.problem) == (
            "unverifiable",
            "GRANT_USED at seq 3 has no amount of at least 0",
        )
        assert _run(sagacity, "s2", "pay", amount=50, payee="A") is ASKED
        assert ledger.ran == ["pay 100 A"]


class _ConsumedFirst(InMemoryJournal):
    """A journal where a call always consumed the grant just before a revocation's append."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def append(self, saga_id: str, phase: Phase, **options: Any) -> Any:
        if phase is Phase.REVOKED and options.get("expected_seq") is not None:
            self.lost += 1
            expected = options["expected_seq"]
            raise AppendConflictError(saga_id, expected, expected + 1)
        return super().append(saga_id, phase, **options)


class TestStarvedRevocation:
    def test_a_revocation_that_loses_every_race_still_lands(self) -> None:
        """After 64 conflicts with consumers, REVOKED is appended whatever the last seq."""
        journal = _ConsumedFirst()
        sagacity = Sagacity(journal, InMemoryApprovalStore())
        sagacity.wrap(Ledger())
        grant = sagacity.grant("pay", **_terms())
        assert sagacity.revoke(grant.grant_id, revoked_by="dave").state == "revoked"
        assert journal.lost == 64
        assert [e.phase for e in sagacity.history(f"grant-{grant.grant_id}")] == [
            Phase.GRANTED,
            Phase.REVOKED,
        ]
        assert _run(sagacity, "s1", "pay", amount=1, payee="A") is ASKED
