"""Conditional approval: an IRREVERSIBLE tool's rule decides, once, whether a call asks.

Every decision is journaled: let through, the INTENT carries the rule, the names it read
and the SHA-256 of their canonical JSON; asked, the AWAITING_APPROVAL does. The calls run
on memory, SQLite and PostgreSQL; the language's own semantics are checked without one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pytest
import rfc8785

from sagacity import (
    ConfigurationError,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    verify,
)
from sagacity.approval._rules import approval_rule
from tests.approval._edit_row import edit_payload

IRREVERSIBLE = Reversibility.IRREVERSIBLE


def _digest(values: dict[str, Any]) -> str:
    """The hash an auditor computes with another RFC 8785 implementation."""
    return hashlib.sha256(rfc8785.dumps(values)).hexdigest()


def _pay(amount: Any, to: str = "ACME", memo: str | None = None, flag: bool = False) -> None:
    """A signature for the language's checks."""


def _rule(text: str) -> Any:
    rule = approval_rule(text, _pay, IRREVERSIBLE, "pay", "test")
    assert rule is not None
    return rule


class Treasury:
    """Wires money; every call is counted and each predicate call noted."""

    def __init__(self) -> None:
        self.wired: list[tuple[Any, str]] = []

    @compensable(reversibility=IRREVERSIBLE, approval="amount > 1000")
    def wire(self, amount: int, to: str, memo: str | None = None) -> str:
        """Wire money to a payee."""
        self.wired.append((amount, to))
        return f"wire-{len(self.wired)}"

    @compensable(reversibility=IRREVERSIBLE)
    def close_account(self, account: str) -> str:
        """Close an account."""
        return f"closed {account}"


def _wrap_one(sagacity: Sagacity, func: Any) -> Any:
    (tool,) = sagacity.wrap(func)
    return tool


class TestTheLanguage:
    @pytest.mark.parametrize(
        ("rule", "input", "asked"),
        [
            ("amount > 1000", {"amount": 1000}, False),  # the exact threshold is not above
            ("amount > 1000", {"amount": 1000.5}, True),
            ("amount >= 1000", {"amount": 1000}, True),
            ("amount < 10.25", {"amount": 10.24}, True),
            ("amount == 1000", {"amount": 1000.0}, True),  # numbers compare by value
            ("amount != 5", {"amount": 5}, False),
            ("flag == 1", {"flag": True}, False),  # a bool is never a number
            ("flag == true", {"flag": True}, True),
            ("memo == null", {"memo": None}, True),
            ("to == 'ACME'", {"to": "ACME"}, True),
            ("to < 'B'", {"to": "ACME"}, True),  # two strings order by code point
            ("amount > 1000 or to != 'ACME'", {"amount": 5, "to": "Mallory"}, True),
            ("amount > 1000 or to != 'ACME'", {"amount": 5, "to": "ACME"}, False),
            ("not amount < 10 and to == 'ACME'", {"amount": 50, "to": "ACME"}, True),
            ("not (amount < 10 and to == 'ACME')", {"amount": 5, "to": "ACME"}, False),
            ("amount > 1 and amount < 3 or to == 'x'", {"amount": 9, "to": "x"}, True),
            ("to == 'O\\'Brien'", {"to": "O'Brien"}, True),
            ("amount > -1e3", {"amount": -999}, True),
        ],
    )
    def test_decides_as_documented(self, rule: str, input: dict[str, Any], asked: bool) -> None:
        """Comparisons, precedence (not > and > or), literals and types behave as the page says."""
        decision = _rule(rule).decide(input)
        assert decision.asked is asked
        assert "error" not in decision.record

    @pytest.mark.parametrize(
        ("rule", "input", "error"),
        [
            ("amount > 1000", {"amount": "5000"}, "cannot order str '5000' against a number"),
            ("memo > 'a'", {"memo": None}, "cannot order NoneType None"),
            ("amount > 1000", {"to": "ACME"}, "has no argument 'amount'"),
        ],
    )
    def test_a_rule_that_cannot_decide_asks(
        self, rule: str, input: dict[str, Any], error: str
    ) -> None:
        """A wrong type, a null optional argument or a missing one fails closed: it asks."""
        decision = _rule(rule).decide(input)
        assert decision.asked is True
        assert error in str(decision.record["error"])

    def test_the_record_hashes_what_was_read_only(self) -> None:
        """Short-circuited arguments are not read: the record names and hashes the rest."""
        decision = _rule("amount > 1000 or to != 'ACME'").decide(
            {"amount": 5000, "to": "x", "memo": "secret"}
        )
        assert decision.record == {
            "rule": "amount > 1000 or to != 'ACME'",
            "kind": "expression",
            "asked": True,
            "read": ["amount"],
            "read_sha256": _digest({"amount": 5000}),
        }

    @pytest.mark.parametrize(
        ("rule", "why"),
        [
            ("", "the rule is empty"),
            ("amount >", "the rule ends where a literal"),
            ("amount >> 5", "expected a number, a quoted string"),
            ("amount > 5 or", "the rule ends where an argument name"),
            ("(amount > 5", "the rule ends where ')'"),
            ("amount > 5)", "unexpected ')'"),
            ("amount > 'open", "cannot read the rule at character 10"),
            ("amount = 5", "cannot read the rule"),
            ("5 < amount", "expected an argument name, found '5'"),
            ("amount > other", "found 'other'"),
            ("__import__('os') == 1", "after '__import__', found '('"),
            ("payee == 'ACME'", "reads 'payee', which is not a parameter"),
            ("not " * 40 + "amount > 1", "nests deeper than 32"),
            ("amount > 1 or " * 100 + "amount > 1", "longer than 1000 characters"),
        ],
    )
    def test_a_malformed_rule_is_refused_at_wrap(self, rule: str, why: str) -> None:
        """Parsed, never evaluated as Python: a bad rule names the tool and the field."""
        with pytest.raises(ConfigurationError) as raised:
            approval_rule(rule, _pay, IRREVERSIBLE, "pay", "class Pay")
        assert "class Pay: tool 'pay' approval=" in str(raised.value)
        assert why in str(raised.value)

    def test_wrap_refuses_a_rule_naming_no_parameter(self, sagacity: Sagacity) -> None:
        """`Sagacity.wrap` checks the rule against the tool's own parameters."""

        @compensable(reversibility=IRREVERSIBLE, approval="ammount > 1000")
        def wire(amount: int) -> None: ...

        with pytest.raises(ConfigurationError, match=r"tool 'wire' approval=.*'ammount'"):
            sagacity.wrap(wire)

    @pytest.mark.parametrize(
        ("declared", "why"),
        [
            (lambda: True, "must take one argument"),
            (lambda a, b: True, "must take one argument"),
            (42, "give a rule such as"),
        ],
    )
    def test_a_wrong_predicate_is_refused_at_wrap(self, declared: Any, why: str) -> None:
        """A predicate must be a sync callable of one argument."""
        with pytest.raises(ConfigurationError, match=why):
            approval_rule(declared, _pay, IRREVERSIBLE, "pay", "test")

    def test_an_async_predicate_is_refused_at_wrap(self) -> None:
        """The rule is evaluated on the hot path, under the saga's lock: sync only."""

        async def big(input: Mapping[str, Any]) -> bool:
            return True

        with pytest.raises(ConfigurationError, match="the predicate is async"):
            approval_rule(big, _pay, IRREVERSIBLE, "pay", "test")

    def test_a_rule_on_a_tool_that_never_asks_is_refused(self) -> None:
        """Only IRREVERSIBLE calls ask a human: a rule elsewhere could never apply."""
        with pytest.raises(ConfigurationError, match="the tool is COMPENSATABLE"):
            approval_rule("amount > 1", _pay, Reversibility.COMPENSATABLE, "pay", "test")


class TestExpressionRule:
    def test_below_the_threshold_the_call_runs_and_says_why(self, sagacity: Sagacity) -> None:
        """No request, no pause: the INTENT records the rule and a hash of what it read."""
        treasury = Treasury()
        sagacity.wrap(treasury)
        wire = sagacity.tool("wire")

        result = sagacity.saga("wire-1", lambda: wire(amount=1000, to="ACME", memo="x"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert treasury.wired == [(1000, "ACME")]
        intent, executed, ended = sagacity.history("wire-1")
        assert [e.phase for e in (intent, executed, ended)] == [
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.ENDED,
        ]
        assert intent.payload == {
            "input": {"amount": 1000, "to": "ACME", "memo": "x"},
            "reversibility": "IRREVERSIBLE",
            "approval_rule": {
                "rule": "amount > 1000",
                "kind": "expression",
                "asked": False,
                "read": ["amount"],
                "read_sha256": _digest({"amount": 1000}),
            },
        }
        assert verify(sagacity.journal, "wire-1").ok

    def test_above_the_threshold_the_call_waits_and_the_request_says_why(
        self, sagacity: Sagacity
    ) -> None:
        """The AWAITING_APPROVAL carries the rule's decision; approved, the call runs once."""
        treasury = Treasury()
        sagacity.wrap(treasury)
        wire = sagacity.tool("wire")

        paused = sagacity.saga("wire-2", lambda: wire(amount=1001, to="ACME"))

        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        assert treasury.wired == []
        (awaiting,) = sagacity.history("wire-2")
        assert awaiting.phase is Phase.AWAITING_APPROVAL
        assert awaiting.payload["approval_rule"] == {
            "rule": "amount > 1000",
            "kind": "expression",
            "asked": True,
            "read": ["amount"],
            "read_sha256": _digest({"amount": 1001}),
        }
        sagacity.approve("wire-2", approver="bob")
        resumed = sagacity.resume_saga("wire-2")
        assert resumed.outcome is SagaOutcome.COMPLETED
        assert treasury.wired == [(1001, "ACME")]
        intent = sagacity.history("wire-2")[-3]
        assert intent.phase is Phase.INTENT
        assert "approval_rule" not in intent.payload  # the approval, not the rule, let it run
        assert verify(sagacity.journal, "wire-2").ok

    def test_a_tool_without_a_rule_asks_as_before(self, sagacity: Sagacity) -> None:
        """No rule, no change: the call waits and its request carries no rule."""
        sagacity.wrap(Treasury())
        close = sagacity.tool("close_account")
        paused = sagacity.saga("close-1", lambda: close(account="A-1"))
        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        (awaiting,) = sagacity.history("close-1")
        assert "approval_rule" not in awaiting.payload

    def test_a_null_optional_argument_fails_closed(self, sagacity: Sagacity) -> None:
        """A rule ordering an optional argument left at None asks, the error journaled."""

        @compensable(reversibility=IRREVERSIBLE, approval="memo > 'a'")
        def note(amount: int, memo: str | None = None) -> str:
            return "noted"

        tool = _wrap_one(sagacity, note)
        paused = sagacity.saga("note-1", lambda: tool(amount=1))
        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        (awaiting,) = sagacity.history("note-1")
        record = awaiting.payload["approval_rule"]
        assert record["asked"] is True
        assert record["read"] == ["memo"]
        assert record["read_sha256"] == _digest({"memo": None})
        assert "cannot order NoneType None" in record["error"]

    async def test_an_async_tool_below_the_threshold_runs(self, sagacity: Sagacity) -> None:
        """The async path decides the same way."""
        ran: list[int] = []

        @compensable(reversibility=IRREVERSIBLE, approval="amount > 1000")
        async def awire(amount: int) -> str:
            ran.append(amount)
            return "ok"

        tool = _wrap_one(sagacity, awire)

        async def work() -> None:
            await tool(amount=10)
            await tool(amount=10_000)

        result = await sagacity.asaga("awire-1", work)
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert ran == [10]
        assert [e.phase for e in sagacity.history("awire-1")] == [
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.AWAITING_APPROVAL,
        ]


class Predicates:
    """Predicates that count their calls."""

    def __init__(self) -> None:
        self.calls = 0

    def big(self, input: Mapping[str, Any]) -> bool:
        self.calls += 1
        return bool(input["amount"] > 1000)

    def raising(self, input: Mapping[str, Any]) -> bool:
        self.calls += 1
        raise ValueError("rates service down")

    def truthy(self, input: Mapping[str, Any]) -> Any:
        self.calls += 1
        return 1

    def mutating(self, input: Any) -> bool:
        self.calls += 1
        input["amount"] = 0  # a read-only mapping: this raises
        return False


class TestCallableRule:
    def _tool(self, sagacity: Sagacity, predicate: Any, ran: list[int]) -> Any:
        @compensable(reversibility=IRREVERSIBLE, approval=predicate)
        def wire(amount: int, to: str) -> str:
            ran.append(amount)
            return "ok"

        return _wrap_one(sagacity, wire)

    def test_is_asked_once_per_call_and_records_what_it_read(self, sagacity: Sagacity) -> None:
        """Below: runs, one evaluation; the record names the predicate and what it read."""
        predicates, ran = Predicates(), []
        tool = self._tool(sagacity, predicates.big, ran)
        result = sagacity.saga("p-1", lambda: tool(amount=5, to="ACME"))
        assert result.outcome is SagaOutcome.COMPLETED
        assert (ran, predicates.calls) == ([5], 1)
        record = sagacity.history("p-1")[0].payload["approval_rule"]
        assert record == {
            "rule": f"{__name__}.Predicates.big",
            "kind": "callable",
            "asked": False,
            "read": ["amount"],
            "read_sha256": _digest({"amount": 5}),
        }

    def test_an_approved_call_is_not_asked_again(self, sagacity: Sagacity) -> None:
        """Once asked, the request decides: resuming does not evaluate the predicate again."""
        predicates, ran = Predicates(), []
        tool = self._tool(sagacity, predicates.big, ran)
        paused = sagacity.saga("p-2", lambda: tool(amount=5000, to="ACME"))
        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        sagacity.approve("p-2", approver="bob")
        assert sagacity.resume_saga("p-2").outcome is SagaOutcome.COMPLETED
        assert (ran, predicates.calls) == ([5000], 1)

    @pytest.mark.parametrize(
        ("name", "error"),
        [
            ("raising", "ValueError: rates service down"),
            ("truthy", "the predicate returned 1, not True or False"),
            ("mutating", "TypeError"),
        ],
    )
    def test_a_predicate_that_fails_asks_the_human(
        self, sagacity: Sagacity, name: str, error: str
    ) -> None:
        """Fail closed: the call waits, nothing ran, and the request journals the error."""
        predicates, ran = Predicates(), []
        tool = self._tool(sagacity, getattr(predicates, name), ran)
        paused = sagacity.saga(f"fail-{name}", lambda: tool(amount=5, to="ACME"))
        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        assert ran == []
        (awaiting,) = sagacity.history(f"fail-{name}")
        record = awaiting.payload["approval_rule"]
        assert record["asked"] is True
        assert error in record["error"]
        assert verify(sagacity.journal, f"fail-{name}").ok

    def test_a_predicate_walking_the_input_reads_all_of_it(self, sagacity: Sagacity) -> None:
        """Iterating the input counts as reading every argument: all are hashed."""
        ran: list[int] = []
        tool = self._tool(sagacity, lambda input: sum(1 for _ in input) > 5, ran)
        sagacity.saga("walk-1", lambda: tool(amount=5, to="ACME"))
        record = sagacity.history("walk-1")[0].payload["approval_rule"]
        assert record["read"] == ["amount", "to"]
        assert record["read_sha256"] == _digest({"amount": 5, "to": "ACME"})


class TestJournaledDecisionIsEvidence:
    def test_editing_the_recorded_rule_fails_verify(
        self, sagacity: Sagacity, store_url: str
    ) -> None:
        """The rule's record is in the hashed payload: an edit in the database is caught."""
        sagacity.wrap(Treasury())
        wire = sagacity.tool("wire")
        sagacity.saga("ev-1", lambda: wire(amount=5, to="ACME"))
        intent = sagacity.history("ev-1")[0]
        forged = json.loads(json.dumps(intent.payload))
        forged["approval_rule"]["rule"] = "amount > 1000000"
        edit_payload(sagacity, store_url, "ev-1", intent.seq, forged)

        report = verify(sagacity.journal, "ev-1")
        assert not report.ok
        (problem,) = report.problems
        assert (problem.saga_id, problem.seq) == ("ev-1", intent.seq)
