"""Editing a pending request: a new request with its own hash, the old one closed for good.

`Sagacity.edit` journals a new AWAITING_APPROVAL for the same call with the new input
and a REJECTED closing the old request, without compensating the saga. The edited
request is approved like any other, and `resume_saga` then runs exactly the new input.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785

from sagacity import (
    ApprovalAlreadyUsedError,
    ApprovalHashMismatchError,
    ApprovalInputError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ApprovalRequest,
    Phase,
    Sagacity,
    SagaOutcome,
    SelfApprovalError,
)
from tests.approval._policy import SAGA, OpenSagacity, book_then, waiting_saga


class TestEdit:
    def test_edit_asks_again_with_its_own_hash_and_closes_the_old(self, sagacity: Sagacity) -> None:
        """A new request for the same call and tool; the old is REJECTED, nothing compensated."""
        waiting = waiting_saga(sagacity)
        old = waiting.request
        new = sagacity.edit(SAGA, approver="bob", new_input={"amount": "800.00", "to": "ACME"})
        assert (new.call_id, new.tool_name) == (old.call_id, old.tool_name)
        assert new.request_id != old.request_id
        assert new.input == {"amount": "800.00", "to": "ACME", "days": 0}  # defaults applied
        assert new.input_sha256 == hashlib.sha256(rfc8785.dumps(new.input)).hexdigest()
        assert new.input_sha256 != old.input_sha256
        assert (new.edited_by, new.started_by) == ("bob", "alice")
        *_, awaiting, rejected = sagacity.history(SAGA)
        assert (awaiting.phase, awaiting.payload["replaces"]) == (
            Phase.AWAITING_APPROVAL,
            old.request_id,
        )
        assert awaiting.payload["edited_by"] == "bob"
        assert rejected.phase is Phase.REJECTED
        assert rejected.ref_seq == old.seq
        assert rejected.payload == {
            "request_id": old.request_id,
            "approver": "bob",
            "reason": "edited by bob",
            "edited_to": new.request_id,
        }
        assert [r.request_id for r in sagacity.pending(SAGA)] == [new.request_id]
        assert waiting.treasury.undone == []  # the saga waits; it is not compensated
        assert sagacity.history(SAGA)[-1].phase is not Phase.ENDED

    def test_the_old_request_is_unusable(self, sagacity: Sagacity) -> None:
        """The old request can be neither approved nor edited again once it was edited."""
        waiting = waiting_saga(sagacity)
        old = waiting.request
        sagacity.edit(SAGA, approver="bob", new_input={"amount": "800.00", "to": "ACME"})
        with pytest.raises(ApprovalRejectedError, match="edited by bob"):
            sagacity.approve(SAGA, approver="carol", request_id=old.request_id)
        with pytest.raises(ApprovalRejectedError, match="edited by bob"):
            sagacity.edit(
                SAGA, approver="carol", request_id=old.request_id, new_input={"amount": "1"}
            )

    def test_resume_runs_exactly_the_edited_input(self, sagacity: Sagacity) -> None:
        """Approved by another principal, the edited request runs once with the new input."""
        waiting = waiting_saga(sagacity)
        new = sagacity.edit(
            SAGA, approver="bob", new_input={"amount": "800.00", "to": "BETA", "days": 2}
        )
        sagacity.approve(SAGA, approver="carol", expected_sha256=new.input_sha256)
        result = sagacity.resume_saga(SAGA)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-800.00-BETA")
        assert waiting.treasury.wired == [("800.00", "BETA", 2)]
        intent = next(
            e for e in sagacity.history(SAGA) if e.phase is Phase.INTENT and e.tool_name == "wire"
        )
        assert intent.payload["request_id"] == new.request_id
        assert intent.payload["input"] == new.input

    def test_the_editor_cannot_approve_the_edit(self, sagacity: Sagacity) -> None:
        """The editor wrote the input: like the starter, they may not approve it."""
        waiting_saga(sagacity)
        before_edit = len(sagacity.history(SAGA))
        sagacity.edit(SAGA, approver="bob", new_input={"amount": "800.00", "to": "ACME"})
        entries = sagacity.history(SAGA)
        with pytest.raises(SelfApprovalError, match="'bob' edited the input"):
            sagacity.approve(SAGA, approver="bob")
        with pytest.raises(SelfApprovalError, match="'alice' started the saga"):
            sagacity.approve(SAGA, approver="alice")
        assert sagacity.history(SAGA) == entries
        assert len(entries) == before_edit + 2

    def test_the_edit_needs_all_its_approvers_again(self, sagacity: Sagacity) -> None:
        """Approvals of the old input do not carry over: an edit of a 2-approver call needs 2."""
        waiting = waiting_saga(sagacity, wire="big_wire")
        sagacity.approve(SAGA, approver="bob")
        new = sagacity.edit(SAGA, approver="carol", new_input={"amount": "850.00", "to": "ACME"})
        assert (new.approvers_required, new.state) == (2, "waiting")
        sagacity.approve(SAGA, approver="bob")
        (shown,) = sagacity.pending(SAGA)
        assert shown.state == "waiting"
        sagacity.approve(SAGA, approver="dave")
        assert sagacity.resume_saga(SAGA).value == "big-850.00-ACME"
        assert waiting.treasury.calls["big_wire"] == 1

    def test_a_native_resume_with_the_old_arguments_is_refused(self, sagacity: Sagacity) -> None:
        """A framework that re-calls the tool with the old arguments fails the hash check."""
        waiting = waiting_saga(sagacity)
        sagacity.edit(SAGA, approver="bob", new_input={"amount": "800.00", "to": "ACME"})
        sagacity.approve(SAGA, approver="carol")
        with pytest.raises(ApprovalHashMismatchError, match="now hashes to"):
            sagacity.resume_saga(SAGA, book_then(waiting.tools))
        assert waiting.treasury.calls["wire"] == 0
        refused = [e for e in sagacity.history(SAGA) if e.phase is Phase.REFUSED]
        assert [e.payload["reason"] for e in refused] == ["input_mismatch"]

    def test_an_edit_after_the_call_ran_is_refused(self, sagacity: Sagacity) -> None:
        """A request whose call ran cannot be edited: an approval is used once."""
        waiting = waiting_saga(sagacity)
        sagacity.approve(SAGA, approver="bob")
        sagacity.journal.append(  # a worker started the call, as the journal shows it
            SAGA,
            Phase.INTENT,
            tool_name="wire",
            call_id=waiting.request.call_id,
            payload={"input": waiting.request.input, "reversibility": "IRREVERSIBLE"},
        )
        before = sagacity.history(SAGA)
        with pytest.raises(ApprovalAlreadyUsedError, match="already ran"):
            sagacity.edit(SAGA, approver="carol", new_input={"amount": "1.00", "to": "ACME"})
        assert sagacity.history(SAGA) == before


class TestEditCutShort:
    def test_a_replaced_request_cannot_be_decided(self, sagacity: Sagacity) -> None:
        """An edit that died after journaling its new request leaves the old one undecidable.

        The process stopped before it stored the new request and closed the old one: the
        old request is still stored, but a call checks the newest request of its id, so
        approving the old one would approve nothing. It is refused, naming the new one,
        and the old call never runs.
        """
        waiting = waiting_saga(sagacity)
        old = waiting.request
        newer = sagacity.journal.append(  # what the edit journaled before the process died
            SAGA,
            Phase.AWAITING_APPROVAL,
            tool_name=old.tool_name,
            call_id=old.call_id,
            payload={
                "request_id": "edited-1",
                "input": {"amount": "1.00", "to": "ACME", "days": 0},
                "input_sha256": hashlib.sha256(
                    rfc8785.dumps({"amount": "1.00", "to": "ACME", "days": 0})
                ).hexdigest(),
                "reason": old.reason,
                "expires_at": None,
                "replaces": old.request_id,
                "edited_by": "bob",
            },
        )
        before = sagacity.history(SAGA)
        with pytest.raises(
            ApprovalNotFoundError, match=f"replaced by request edited-1 \\(seq {newer.seq}"
        ):
            sagacity.approve(SAGA, approver="carol", request_id=old.request_id)
        with pytest.raises(ApprovalNotFoundError, match="replaced by request edited-1"):
            sagacity.edit(SAGA, approver="carol", request_id=old.request_id, new_input=old.input)
        assert sagacity.history(SAGA) == before
        assert waiting.treasury.calls["wire"] == 0
        # The saga can still be ended: rejecting the old request compensates it.
        result = sagacity.reject(
            SAGA, approver="carol", reason="edit lost", request_id=old.request_id
        )
        assert result.outcome is SagaOutcome.COMPENSATED
        assert waiting.treasury.undone == ["bk-P-1"]


class TestBadEdits:
    @pytest.mark.parametrize(
        ("new_input", "named"),
        [
            ({"amout": "800.00", "to": "ACME"}, "amout"),
            ({"amount": "800.00"}, "to"),
            ({"amount": "800.00", "to": "ACME", "days": "two"}, "days"),
            ({"amount": "800.00", "to": "ACME", "days": 1.5}, "days"),
            (["800.00", "ACME"], "JSON object"),
            ({"amount": float("nan"), "to": "ACME"}, "amount"),
        ],
    )
    def test_bad_input_is_refused_and_nothing_is_journaled(
        self, sagacity: Sagacity, new_input: Any, named: str
    ) -> None:
        """A field that is unknown, missing or of the wrong type names the tool and field."""
        waiting = waiting_saga(sagacity)
        before = sagacity.history(SAGA)
        with pytest.raises(ApprovalInputError, match=named) as refused:
            sagacity.edit(SAGA, approver="bob", new_input=new_input)
        assert "tool 'wire'" in str(refused.value)
        assert refused.value.status_code == 422
        assert sagacity.history(SAGA) == before
        assert [r.request_id for r in sagacity.pending(SAGA)] == [waiting.request.request_id]

    def test_a_process_without_the_tool_takes_any_json_object(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """Where the tool is not wrapped, the edit is journaled as given; the worker runs it."""
        worker = open_sagacity()
        waiting = waiting_saga(worker)
        inbox = open_sagacity()  # an approval service that never wrapped the tools
        new = inbox.edit(
            SAGA, approver="bob", new_input={"amount": "700.00", "to": "ACME", "days": 0}
        )
        inbox.approve(SAGA, approver="carol")
        assert worker.resume_saga(SAGA).value == "wire-700.00-ACME"
        assert waiting.treasury.wired == [("700.00", "ACME", 0)]
        assert isinstance(new, ApprovalRequest)

    def test_the_hook_hears_of_the_edited_request(self, open_sagacity: OpenSagacity) -> None:
        """An edit is a new request: the notify hook is told of it."""
        seen: list[str] = []
        sagacity = open_sagacity(on_approval_request=lambda r: seen.append(r.request_id))
        waiting = waiting_saga(sagacity)
        new = sagacity.edit(SAGA, approver="bob", new_input={"amount": "1.00", "to": "ACME"})
        assert seen == [waiting.request.request_id, new.request_id]
