"""Principal names are compared as people read them: NFKC, case-folded, invisibles removed.

Every test runs on memory, SQLite and PostgreSQL. Whoever writes the APPROVED entry
(`approve`, or a row appended straight into the journal), a lookalike spelling of a
name is the same principal: it neither slips past four eyes nor counts twice.
"""

from __future__ import annotations

import pytest

from sagacity import (
    ApprovalAlreadyGivenError,
    ApprovalMissingError,
    Sagacity,
    SagaOutcome,
    SelfApprovalError,
)
from sagacity._unicode import escape_for_display, principal_key, principal_name_problem
from tests.approval._policy import inject_approval, phases_of, waiting_saga

ZWSP = "\u200b"
FULLWIDTH_S = "\uff53"


class TestPrincipalKey:
    def test_lookalikes_compare_equal(self) -> None:
        """Fullwidth letters, case and zero-width characters do not make another name."""
        assert principal_key(f"{FULLWIDTH_S}am") == principal_key("sam") == "sam"
        assert principal_key(f"bob{ZWSP}") == principal_key("BOB") == "bob"
        assert principal_key("b\u202eob") == "bob"
        assert principal_key("alice") != principal_key("alicia")

    def test_names_with_invisible_characters_or_spaces_are_refused(self) -> None:
        """A name must read as it compares: no spaces around it, no control or bidi."""
        assert principal_name_problem("carol ") == "it has spaces around it (give 'carol')"
        problem = principal_name_problem(f"bob{ZWSP}")
        assert "U+200B at position 3" in str(problem)
        assert "U+202E" in str(principal_name_problem("ev\u202eil"))
        assert "U+0007" in str(principal_name_problem("a\x07"))
        assert principal_name_problem(f"{FULLWIDTH_S}am") is None
        assert principal_name_problem("José Núñez") is None

    def test_display_escapes_bidi_and_zero_width_only(self) -> None:
        """A right-to-left override shows as an escape; text and line breaks stay."""
        assert escape_for_display("pay\u202eevil") == "pay\\u202eevil"
        assert escape_for_display(f"a{ZWSP}b\u2066c\u061c") == "a\\u200bb\\u2066c\\u061c"
        assert escape_for_display('{\n  "to": "Zoë"\n}') == '{\n  "to": "Zoë"\n}'


class TestFourEyes:
    def test_the_starter_cannot_approve_under_a_fullwidth_spelling(
        self, sagacity: Sagacity
    ) -> None:
        """`sam` started the saga, so `sam` with a fullwidth s is refused as its approver."""
        waiting = waiting_saga(sagacity, started_by="sam")
        with pytest.raises(SelfApprovalError, match="started the saga"):
            sagacity.approve(waiting.request.saga_id, approver=f"{FULLWIDTH_S}am")
        assert "APPROVED" not in phases_of(sagacity)

    def test_a_journaled_approval_by_a_lookalike_of_the_starter_does_not_count(
        self, sagacity: Sagacity
    ) -> None:
        """An APPROVED row by `SAM` appended straight into the journal runs nothing."""
        waiting = waiting_saga(sagacity, started_by="sam")
        inject_approval(sagacity, waiting.request, "SAM")
        with pytest.raises(ApprovalMissingError, match="four eyes"):
            sagacity.resume_saga(waiting.request.saga_id)
        assert waiting.treasury.calls["wire"] == 0


class TestDistinctApprovers:
    def test_a_zero_width_space_does_not_make_a_second_approver(self, sagacity: Sagacity) -> None:
        """`bob` then `bob` + U+200B, or `BOB`: refused, as a hidden character or the same one."""
        waiting = waiting_saga(sagacity, wire="big_wire")
        sagacity.approve(waiting.request.saga_id, approver="bob")
        with pytest.raises(ValueError, match="U\\+200B at position 3"):
            sagacity.approve(waiting.request.saga_id, approver=f"bob{ZWSP}")
        with pytest.raises(ApprovalAlreadyGivenError, match="an approver approves a request once"):
            sagacity.approve(waiting.request.saga_id, approver="BOB")
        (request,) = sagacity.pending(waiting.request.saga_id)
        assert [a.approver for a in request.approvals] == ["bob"]
        assert request.state == "waiting"

    def test_a_journaled_lookalike_approval_counts_once(self, sagacity: Sagacity) -> None:
        """Two APPROVED rows by `bob` and `Bob`+U+200B are one approver of two: nothing runs."""
        waiting = waiting_saga(sagacity, wire="big_wire")
        sagacity.approve(waiting.request.saga_id, approver="bob")
        inject_approval(sagacity, waiting.request, f"Bob{ZWSP}")
        with pytest.raises(ApprovalMissingError, match="1 of 2 approvals"):
            sagacity.resume_saga(waiting.request.saga_id)
        assert waiting.treasury.calls["big_wire"] == 0
        sagacity.approve(waiting.request.saga_id, approver="carol")
        result = sagacity.resume_saga(waiting.request.saga_id)
        assert result.outcome is SagaOutcome.COMPLETED
        assert waiting.treasury.calls["big_wire"] == 1


class TestNamesAtTheDecision:
    """The Python API and the CLI refuse what the server's principals refuse."""

    @pytest.mark.parametrize("name", ["b\u202eob", f"bob{ZWSP}", "bo\x07b"])
    def test_an_approver_or_rejecter_with_hidden_characters_is_refused(
        self, sagacity: Sagacity, name: str
    ) -> None:
        """An override or zero-width name would read as someone else in every listing."""
        waiting = waiting_saga(sagacity)
        saga_id = waiting.request.saga_id
        before = phases_of(sagacity)
        with pytest.raises(ValueError, match="is refused: it holds the invisible or control"):
            sagacity.approve(saga_id, approver=name)
        with pytest.raises(ValueError, match="is refused: it holds the invisible or control"):
            sagacity.reject(saga_id, approver=name, reason="no")
        assert phases_of(sagacity) == before

    @pytest.mark.parametrize("reason", [None, 5, b"no"])
    def test_a_rejection_whose_reason_is_not_text_is_refused(
        self, sagacity: Sagacity, reason: object
    ) -> None:
        waiting = waiting_saga(sagacity)
        saga_id = waiting.request.saga_id
        before = phases_of(sagacity)
        with pytest.raises(ValueError, match="the rejection's reason must be text"):
            sagacity.reject(saga_id, approver="bob", reason=reason)  # type: ignore[arg-type]
        assert phases_of(sagacity) == before
        (request,) = sagacity.pending(saga_id)
        assert request.state == "waiting"
