"""Approval of IRREVERSIBLE calls: approve, reject, resume, and every fail-closed refusal.

Each refusal raises its own `ApprovalError` subclass, runs nothing (the tool's counter
stays at zero and no INTENT is journaled for it), and leaves the saga able to be
approved properly: the test then approves correctly, resumes, and the tool runs once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import hashlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import rfc8785

from sagacity import (
    ApprovalAlreadyUsedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ApprovalRequest,
    ConfigurationError,
    FailureKind,
    InMemoryApprovalStore,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    SqliteApprovalStore,
    compensable,
    verify,
)
from sagacity.adapter import SagaScope, current_scope
from sagacity.testing import FakeClock
from tests._shop import Shop, order_then_wire, phases, tools_of

SAGA = "wire-1"
WIRE_INPUT = {"amount": "900.00", "to": "ACME"}

OpenSagacity = Callable[..., Sagacity]


@pytest.fixture
def open_sagacity(store_url: str) -> Iterator[OpenSagacity]:
    """Build Sagacity instances on the test's backend (with options), closed afterwards."""
    opened: list[Sagacity] = []

    def build(**options: Any) -> Sagacity:
        instance = Sagacity.from_url(store_url, **options)
        opened.append(instance)
        return instance

    yield build
    for instance in opened:
        instance.close()


@dataclasses.dataclass
class Waiting:
    """A saga that reserved stock and waits for approval of a wire transfer."""

    sagacity: Sagacity
    shop: Shop
    tools: dict[str, Any]
    request: ApprovalRequest

    def wire_ran(self) -> int:
        return self.shop.calls["send_wire_transfer"]

    def assert_nothing_ran(self) -> None:
        assert self.wire_ran() == 0
        assert [
            e
            for e in self.sagacity.history(SAGA)
            if e.phase is Phase.INTENT and e.tool_name == "send_wire_transfer"
        ] == []

    def approve_and_resume_once(self, request_id: str | None = None) -> None:
        self.sagacity.approve(SAGA, approver="alice@treasury", request_id=request_id)
        result = self.sagacity.resume_saga(SAGA, request_id=request_id)
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == "wire-900.00-ACME"
        assert self.wire_ran() == 1


def waiting_saga(sagacity: Sagacity) -> Waiting:
    shop = Shop()
    tools = tools_of(sagacity, shop)
    result = sagacity.saga(SAGA, order_then_wire(tools))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    (request,) = result.pending
    return Waiting(sagacity=sagacity, shop=shop, tools=tools, request=request)


@pytest.fixture
def waiting(sagacity: Sagacity) -> Waiting:
    """A saga waiting for approval, on each backend."""
    return waiting_saga(sagacity)


def tamper(sagacity: Sagacity, store_url: str, request: ApprovalRequest, **changes: Any) -> None:
    """Edit the stored request behind sagacity's back, as someone with database access could."""
    if isinstance(sagacity.approvals, InMemoryApprovalStore):
        sagacity.approvals.replace(dataclasses.replace(request, **changes))
        return
    values = {
        column: rfc8785.dumps(value).decode() if column == "input" else value
        for column, value in changes.items()
    }
    if isinstance(sagacity.approvals, SqliteApprovalStore):
        values = {
            column: value.isoformat() if isinstance(value, datetime.datetime) else value
            for column, value in values.items()
        }
        with contextlib.closing(sqlite3.connect(sagacity.approvals.path)) as conn, conn:
            for column, value in values.items():
                conn.execute(
                    f"UPDATE sagacity_approval_request SET {column} = ? WHERE request_id = ?",
                    (value, request.request_id),
                )
        return
    from tests._postgres import admin_connection

    schema = dict(parse_qsl(urlsplit(store_url).query))["schema"]
    with admin_connection() as admin:
        for column, value in values.items():
            admin.execute(
                f'UPDATE "{schema}".sagacity_approval_request SET {column} = %s '
                "WHERE request_id = %s",
                (value, request.request_id),
            )


class TestApprovalRequest:
    def test_the_request_binds_the_exact_input(self, waiting: Waiting) -> None:
        """The request names its call and holds sha256(JCS(input)), as an auditor computes it."""
        request = waiting.request
        assert request.saga_id == SAGA
        assert request.seq == 3
        assert request.call_id == "send_wire_transfer#1"
        assert request.tool_name == "send_wire_transfer"
        assert request.input == WIRE_INPUT
        assert request.input_sha256 == hashlib.sha256(rfc8785.dumps(WIRE_INPUT)).hexdigest()
        assert request.reason == "send_wire_transfer is IRREVERSIBLE: Wire money to another bank."
        assert request.expires_at is None
        assert waiting.sagacity.pending(SAGA) == [request]
        assert waiting.sagacity.pending() == [request]

    def test_the_awaiting_entry_holds_input_and_hash(self, waiting: Waiting) -> None:
        """AWAITING_APPROVAL journals the request id, input, hash, reason and expiry."""
        entry = waiting.sagacity.history(SAGA)[2]
        assert entry.phase is Phase.AWAITING_APPROVAL
        assert entry.call_id == "send_wire_transfer#1"
        assert entry.payload == {
            "request_id": waiting.request.request_id,
            "input": WIRE_INPUT,
            "input_sha256": waiting.request.input_sha256,
            "reason": waiting.request.reason,
            "expires_at": None,
            "initiated_by": {"by": "code", "via": "work"},
        }

    def test_a_ttl_sets_the_expiry(self, open_sagacity: OpenSagacity) -> None:
        """`approval_ttl` (seconds or a timedelta) sets `expires_at` from the clock."""
        clock = FakeClock()
        request = waiting_saga(open_sagacity(approval_ttl=90, clock=clock)).request
        assert request.requested_at == clock()
        assert request.expires_at == clock() + datetime.timedelta(seconds=90)
        assert open_sagacity(approval_ttl=datetime.timedelta(minutes=2)).approval_ttl == (
            datetime.timedelta(seconds=120)
        )

    @pytest.mark.parametrize(
        "ttl", [-1, float("nan"), 1e300, 10**20, datetime.timedelta(days=99_999)]
    )
    def test_a_ttl_no_expiry_date_can_hold_is_refused(self, ttl: object) -> None:
        """Past ten years every request's expiry would overflow the calendar: refused."""
        with pytest.raises(ConfigurationError, match="approval_ttl must be"):
            Sagacity.from_url("memory://", approval_ttl=ttl)


class TestApprove:
    def test_approve_journals_approver_request_and_hash(self, waiting: Waiting) -> None:
        """APPROVED names the approver, the request and the hash; the request is kept."""
        entry = waiting.sagacity.approve(SAGA, approver="alice@treasury")
        assert (entry.phase, entry.ref_seq, entry.call_id, entry.tool_name) == (
            Phase.APPROVED,
            3,
            "send_wire_transfer#1",
            "send_wire_transfer",
        )
        assert entry.payload == {
            "request_id": waiting.request.request_id,
            "approver": "alice@treasury",
            "input_sha256": waiting.request.input_sha256,
            "via": "python",
            "initiated_by": {"by": "code", "via": "work"},
        }
        assert waiting.sagacity.pending(SAGA) == [waiting.request]
        waiting.assert_nothing_ran()

    def test_approve_with_the_hash_shown(self, waiting: Waiting) -> None:
        """`expected_sha256` equal to the request's hash is accepted."""
        waiting.sagacity.approve(
            SAGA, approver="alice@treasury", expected_sha256=waiting.request.input_sha256
        )
        assert waiting.sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED

    def test_approve_needs_a_named_approver(self, waiting: Waiting) -> None:
        """An approval without a name is refused before anything is journaled."""
        with pytest.raises(ValueError, match="approver must name"):
            waiting.sagacity.approve(SAGA, approver="  ")
        assert len(waiting.sagacity.history(SAGA)) == 3

    def test_approve_an_unknown_request(self, waiting: Waiting) -> None:
        """A request id the saga does not have is not found; nor is a saga with none."""
        with pytest.raises(ApprovalNotFoundError, match="no pending approval request 'nope'"):
            waiting.sagacity.approve(SAGA, approver="alice", request_id="nope")
        with pytest.raises(ApprovalNotFoundError, match="'other' has no pending"):
            waiting.sagacity.approve("other", approver="alice")


class TestResume:
    def test_resume_without_work_runs_the_stored_input_once(self, waiting: Waiting) -> None:
        """resume_saga() runs the approved call with its stored input and ends the saga."""
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        result = sagacity.resume_saga(SAGA)
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == "wire-900.00-ACME"
        assert waiting.shop.log == ["reserve SKU-1", "wire 900.00 to ACME"]
        assert sagacity.pending(SAGA) == []
        entries = sagacity.history(SAGA)
        assert phases(entries) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("AWAITING_APPROVAL", "send_wire_transfer", None),
            ("APPROVED", "send_wire_transfer", 3),
            ("INTENT", "send_wire_transfer", None),
            ("EXECUTED", "send_wire_transfer", 5),
            ("ENDED", None, None),
        ]
        assert entries[4].payload == {
            "input": WIRE_INPUT,
            "reversibility": "IRREVERSIBLE",
            "request_id": waiting.request.request_id,
        }
        assert entries[4].call_id == "send_wire_transfer#1"

    def test_resume_with_work_replays_and_runs_the_approved_call(self, waiting: Waiting) -> None:
        """resume_saga(work) re-runs the work: done calls replay, the approved one runs once."""
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        result = sagacity.resume_saga(SAGA, order_then_wire(waiting.tools))
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == "wire-900.00-ACME"
        assert waiting.shop.calls == {"reserve_inventory": 1, "send_wire_transfer": 1}
        assert [e.phase for e in sagacity.history(SAGA)][3:] == [
            Phase.APPROVED,
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.ENDED,
        ]
        assert sagacity.pending(SAGA) == []

    async def test_aresume_saga_without_work(self, waiting: Waiting) -> None:
        """aresume_saga() runs the approved call from async code."""
        waiting.sagacity.approve(SAGA, approver="alice@treasury")
        result = await waiting.sagacity.aresume_saga(SAGA)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert waiting.wire_ran() == 1

    async def test_aresume_saga_with_work(self, waiting: Waiting) -> None:
        """aresume_saga(work) awaits the framework's resume."""
        waiting.sagacity.approve(SAGA, approver="alice@treasury")
        work = order_then_wire(waiting.tools)

        async def resume() -> Any:
            return work()

        result = await waiting.sagacity.aresume_saga(SAGA, resume)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert waiting.wire_ran() == 1

    def test_a_failing_approved_call_compensates(self, waiting: Waiting) -> None:
        """If the approved call raises, the saga compensates and the request is consumed."""
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        waiting.shop.wire_fails = True
        result = sagacity.resume_saga(SAGA)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert str(result.error) == "bank offline"
        assert waiting.shop.log == ["reserve SKU-1", "release res-SKU-1-2"]
        assert sagacity.pending(SAGA) == []
        assert phases(sagacity.history(SAGA))[4:] == [
            ("INTENT", "send_wire_transfer", None),
            ("FAILED", "send_wire_transfer", 5),
            ("COMPENSATING", "reserve_inventory", 2),
            ("COMPENSATED", "reserve_inventory", 2),
            ("ENDED", None, None),
        ]

    def test_a_retryable_failure_consumes_the_approval(self, waiting: Waiting) -> None:
        """An approved call that fails without failing the saga still uses up its approval."""
        sagacity = waiting.sagacity
        sagacity.add_classifier(
            lambda error: FailureKind.RETRYABLE if "offline" in str(error) else None
        )
        sagacity.approve(SAGA, approver="alice@treasury")
        waiting.shop.wire_fails = True
        tools = waiting.tools

        def framework() -> Any:
            tools["reserve_inventory"]("SKU-1", 2)
            try:
                return tools["send_wire_transfer"](**WIRE_INPUT)
            except RuntimeError:
                return "the bank asks to try later"

        result = sagacity.resume_saga(SAGA, framework)
        # No retry succeeded before the work returned: the saga failed, and the wire, which
        # raised after it started, may have left: it is in doubt.
        assert (result.outcome, result.value) == (
            SagaOutcome.NEEDS_ATTENTION,
            "the bank asks to try later",
        )
        assert sagacity.pending(SAGA) == []
        assert sagacity.history(SAGA)[5].payload == {
            "kind": "retryable",
            "error": {"type": "RuntimeError", "message": "bank offline"},
        }

    def test_an_async_irreversible_tool_resumes_from_sync_code(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """resume_saga() of an async tool runs it on a loop of its own."""
        sagacity = open_sagacity()
        sent: list[str] = []

        class Mail:
            @compensable(reversibility=Reversibility.IRREVERSIBLE)
            async def announce(self, text: str) -> str:
                """Mail every customer."""
                sent.append(text)
                return "sent"

        (announce,) = sagacity.wrap(Mail())

        async def work() -> Any:
            return await announce("hello")

        assert asyncio.run(sagacity.asaga("m", work)).outcome is SagaOutcome.AWAITING_APPROVAL
        sagacity.approve("m", approver="alice")
        result = sagacity.resume_saga("m")
        assert (result.outcome, result.value, sent) == (SagaOutcome.COMPLETED, "sent", ["hello"])


class TestReject:
    def test_reject_journals_consumes_and_compensates(self, waiting: Waiting) -> None:
        """reject() journals REJECTED, deletes the request and undoes the earlier calls."""
        sagacity = waiting.sagacity
        result = sagacity.reject(SAGA, approver="bob@treasury", reason="wrong beneficiary")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert sagacity.pending(SAGA) == []
        entries = sagacity.history(SAGA)
        assert phases(entries) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("AWAITING_APPROVAL", "send_wire_transfer", None),
            ("REJECTED", "send_wire_transfer", 3),
            ("COMPENSATING", "reserve_inventory", 2),
            ("COMPENSATED", "reserve_inventory", 2),
            ("ENDED", None, None),
        ]
        assert entries[3].payload == {
            "request_id": waiting.request.request_id,
            "approver": "bob@treasury",
            "reason": "wrong beneficiary",
            "via": "python",
            "initiated_by": {"by": "code", "via": "work"},
        }
        assert waiting.shop.log == ["reserve SKU-1", "release res-SKU-1-2"]
        waiting.assert_nothing_ran()

    def test_resume_after_reject_is_refused(self, waiting: Waiting) -> None:
        """A rejected request never runs: with or without work, and it cannot be approved."""
        sagacity = waiting.sagacity
        sagacity.reject(SAGA, approver="bob@treasury", reason="no")
        with pytest.raises(ApprovalRejectedError, match="rejected by 'bob@treasury'"):
            sagacity.resume_saga(SAGA)
        with pytest.raises(ApprovalRejectedError):
            sagacity.resume_saga(SAGA, order_then_wire(waiting.tools))
        with pytest.raises(ApprovalRejectedError):
            sagacity.approve(SAGA, approver="alice")
        waiting.assert_nothing_ran()


class TestRefusals:
    def test_resume_without_approval(self, waiting: Waiting) -> None:
        """Resuming before anyone approved raises ApprovalMissingError, with or without work."""
        with pytest.raises(ApprovalMissingError, match=r"approve it with Sagacity\.approve"):
            waiting.sagacity.resume_saga(SAGA)
        with pytest.raises(ApprovalMissingError):
            waiting.sagacity.resume_saga(SAGA, order_then_wire(waiting.tools))
        waiting.assert_nothing_ran()
        assert waiting.sagacity.pending(SAGA) == [waiting.request]
        waiting.approve_and_resume_once()

    def test_approval_of_another_request_in_the_saga(self, sagacity: Sagacity) -> None:
        """An approval counts for its own request only, not for the saga's other one."""
        shop = Shop()
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["send_wire_transfer"]("1.00", "ACME")
            tools["send_wire_transfer"]("900.00", "ACME")

        first, second = sagacity.saga(SAGA, work).pending
        sagacity.approve(SAGA, approver="alice", request_id=first.request_id)
        with pytest.raises(ApprovalMissingError, match=second.request_id):
            sagacity.resume_saga(SAGA, request_id=second.request_id)
        assert shop.calls["send_wire_transfer"] == 0
        sagacity.approve(SAGA, approver="alice", request_id=second.request_id)
        result = sagacity.resume_saga(SAGA, request_id=second.request_id)
        assert result.value == "wire-900.00-ACME"
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL  # the first still waits
        assert result.pending == [first]
        assert shop.calls["send_wire_transfer"] == 1

    def test_approval_of_another_saga(self, waiting: Waiting) -> None:
        """An approval in one saga does not open another saga's request."""
        sagacity = waiting.sagacity
        other = sagacity.saga("wire-2", order_then_wire(waiting.tools, amount="5.00", to="B"))
        (other_request,) = other.pending
        with pytest.raises(ApprovalNotFoundError, match="'wire-1' has no pending"):
            sagacity.approve(SAGA, approver="alice", request_id=other_request.request_id)
        sagacity.approve("wire-2", approver="alice")
        # An APPROVED entry in this saga that names the other saga's request:
        sagacity.journal.append(
            SAGA,
            Phase.APPROVED,
            tool_name="send_wire_transfer",
            call_id="send_wire_transfer#1",
            ref_seq=3,
            payload={
                "request_id": other_request.request_id,
                "approver": "mallory",
                "input_sha256": waiting.request.input_sha256,
            },
        )
        with pytest.raises(ApprovalMissingError, match="no approval is journaled"):
            sagacity.resume_saga(SAGA)
        waiting.assert_nothing_ran()
        waiting.approve_and_resume_once(request_id=waiting.request.request_id)

    def test_stored_input_changed(self, waiting: Waiting, store_url: str) -> None:
        """A stored input edited after approval no longer hashes to what was approved."""
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        changed = {"amount": "900000.00", "to": "MALLORY"}
        tamper(sagacity, store_url, waiting.request, input=changed)
        with pytest.raises(ApprovalHashMismatchError, match="now hashes to"):
            sagacity.resume_saga(SAGA)
        waiting.assert_nothing_ran()
        tamper(sagacity, store_url, waiting.request, input=WIRE_INPUT)
        result = sagacity.resume_saga(SAGA)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert waiting.shop.log[-1] == "wire 900.00 to ACME"
        assert waiting.wire_ran() == 1

    def test_stored_input_and_hash_changed(self, waiting: Waiting, store_url: str) -> None:
        """Editing the hash too is caught: the journal recorded the original hash."""
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        changed = {"amount": "900000.00", "to": "MALLORY"}
        forged = hashlib.sha256(rfc8785.dumps(changed)).hexdigest()
        tamper(sagacity, store_url, waiting.request, input=changed, input_sha256=forged)
        with pytest.raises(ApprovalHashMismatchError, match="the stored request was changed"):
            sagacity.resume_saga(SAGA)
        with pytest.raises(ApprovalHashMismatchError):
            sagacity.approve(SAGA, approver="mallory")
        waiting.assert_nothing_ran()
        tamper(
            sagacity,
            store_url,
            waiting.request,
            input=WIRE_INPUT,
            input_sha256=waiting.request.input_sha256,
        )
        result = sagacity.resume_saga(SAGA)
        assert (result.outcome, waiting.wire_ran()) == (SagaOutcome.COMPLETED, 1)

    def test_stored_expiry_changed(self, open_sagacity: OpenSagacity, store_url: str) -> None:
        """Extending a request's expiry in the store is caught against the journal."""
        clock = FakeClock()
        waiting = waiting_saga(open_sagacity(approval_ttl=60, clock=clock))
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        assert waiting.request.expires_at is not None
        later = waiting.request.expires_at + datetime.timedelta(days=30)
        tamper(sagacity, store_url, waiting.request, expires_at=later)
        with pytest.raises(ApprovalMissingError, match="the stored request was changed"):
            sagacity.resume_saga(SAGA)
        waiting.assert_nothing_ran()
        tamper(sagacity, store_url, waiting.request, expires_at=waiting.request.expires_at)
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        assert waiting.wire_ran() == 1

    def test_a_changed_input_in_the_resumed_work(self, waiting: Waiting) -> None:
        """A framework that calls the approved call with other arguments is refused."""
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        changed = order_then_wire(waiting.tools, amount="9000.00", to="ACME")
        with pytest.raises(ApprovalHashMismatchError):
            sagacity.resume_saga(SAGA, changed)
        waiting.assert_nothing_ran()
        assert sagacity.resume_saga(SAGA, order_then_wire(waiting.tools)).outcome is (
            SagaOutcome.COMPLETED
        )
        assert waiting.wire_ran() == 1

    def test_expected_sha256_that_does_not_match(self, waiting: Waiting) -> None:
        """An approver shown another hash is refused, and nothing is journaled."""
        sagacity = waiting.sagacity
        with pytest.raises(ApprovalHashMismatchError, match="show the approver the current input"):
            sagacity.approve(SAGA, approver="alice", expected_sha256="ab" * 32)
        assert [e.phase for e in sagacity.history(SAGA)].count(Phase.APPROVED) == 0
        with pytest.raises(ApprovalMissingError):
            sagacity.resume_saga(SAGA)
        waiting.assert_nothing_ran()
        waiting.approve_and_resume_once()

    def test_resume_twice(self, waiting: Waiting) -> None:
        """An approval is used once: a second resume runs nothing.

        Without work it raises ApprovalAlreadyUsedError; with work (a framework's resume)
        it replays the journaled result and journals nothing.
        """
        waiting.approve_and_resume_once()
        with pytest.raises(ApprovalAlreadyUsedError, match="already ran"):
            waiting.sagacity.resume_saga(SAGA)
        before = waiting.sagacity.history(SAGA)
        replayed = waiting.sagacity.resume_saga(SAGA, order_then_wire(waiting.tools))
        assert (replayed.outcome, replayed.replayed) == (SagaOutcome.COMPLETED, True)
        assert waiting.sagacity.history(SAGA) == before
        assert waiting.wire_ran() == 1

    def test_an_expired_request(self, open_sagacity: OpenSagacity) -> None:
        """An expired request is refused; a new request for the same call replaces it."""
        clock = FakeClock()
        waiting = waiting_saga(open_sagacity(approval_ttl=60, clock=clock))
        sagacity, old = waiting.sagacity, waiting.request
        clock.advance(30)
        sagacity.approve(SAGA, approver="alice@treasury")
        clock.advance(31)
        with pytest.raises(ApprovalExpiredError, match="expired at") as caught:
            sagacity.resume_saga(SAGA)
        waiting.assert_nothing_ran()
        (renewed,) = sagacity.pending(SAGA)
        assert renewed.request_id != old.request_id
        assert renewed.request_id in str(caught.value)
        assert (renewed.call_id, renewed.input, renewed.input_sha256) == (
            old.call_id,
            old.input,
            old.input_sha256,
        )
        assert renewed.expires_at == clock() + datetime.timedelta(seconds=60)
        asked_again = sagacity.history(SAGA)[-1]
        assert asked_again.phase is Phase.AWAITING_APPROVAL
        assert isinstance(asked_again.payload, dict)
        assert asked_again.payload["replaces"] == old.request_id
        with pytest.raises(ApprovalNotFoundError):
            sagacity.approve(SAGA, approver="alice", request_id=old.request_id)
        waiting.approve_and_resume_once()

    def test_approving_an_expired_request(self, open_sagacity: OpenSagacity) -> None:
        """Approving too late is refused; resuming then asks again."""
        clock = FakeClock()
        waiting = waiting_saga(open_sagacity(approval_ttl=60, clock=clock))
        clock.advance(60)
        with pytest.raises(ApprovalExpiredError, match="resume the saga to ask again"):
            waiting.sagacity.approve(SAGA, approver="alice")
        with pytest.raises(ApprovalExpiredError):
            waiting.sagacity.resume_saga(SAGA)
        waiting.assert_nothing_ran()
        waiting.approve_and_resume_once()

    def test_an_approval_without_a_hash(self, waiting: Waiting) -> None:
        """An APPROVED entry that records no hash is never trusted."""
        sagacity = waiting.sagacity
        sagacity.journal.append(
            SAGA,
            Phase.APPROVED,
            tool_name="send_wire_transfer",
            call_id="send_wire_transfer#1",
            ref_seq=3,
            payload={"request_id": waiting.request.request_id, "approver": "mallory"},
        )
        with pytest.raises(ApprovalMissingError, match="recorded no input hash"):
            sagacity.resume_saga(SAGA)
        waiting.assert_nothing_ran()
        waiting.approve_and_resume_once()


class TestPendingApproval:
    def test_asks_once_then_returns_the_same_request(self, sagacity: Sagacity) -> None:
        """pending_approval() journals one AWAITING_APPROVAL however often it is asked."""
        tool = tools_of(sagacity, Shop())["send_wire_transfer"]
        asked: list[ApprovalRequest | None] = []

        def work() -> None:
            asked.append(tool.pending_approval((), WIRE_INPUT, call_id="fw-1"))
            asked.append(tool.pending_approval(("900.00", "ACME"), call_id="fw-1"))

        result = sagacity.saga(SAGA, work)
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        first, second = asked
        assert first is not None
        assert first == second
        assert result.pending == [first]
        assert phases(sagacity.history(SAGA)) == [("AWAITING_APPROVAL", "send_wire_transfer", None)]

    def test_none_once_approved_then_the_call_runs(self, sagacity: Sagacity) -> None:
        """Once approved, pending_approval() is None and the call runs, once."""
        shop = Shop()
        tool = tools_of(sagacity, shop)["send_wire_transfer"]

        def framework() -> Any:
            if tool.pending_approval((), WIRE_INPUT, call_id="fw-1") is not None:
                return "paused"
            return tool.invoke((), WIRE_INPUT, call_id="fw-1")

        assert sagacity.saga(SAGA, framework).value == "paused"
        sagacity.approve(SAGA, approver="alice")
        result = sagacity.resume_saga(SAGA, framework)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert shop.calls["send_wire_transfer"] == 1

    def test_raises_on_a_rejected_request(self, sagacity: Sagacity) -> None:
        """A request rejected (here by another context) makes pending_approval() raise."""
        tool = tools_of(sagacity, Shop())["send_wire_transfer"]
        errors: list[ApprovalRejectedError] = []

        def framework() -> None:
            tool.pending_approval((), WIRE_INPUT, call_id="fw-1")
            # Decided elsewhere: the lifecycle's rejection, as a framework's would be.
            contextvars.Context().run(
                sagacity.approval.reject, SAGA, approver="bob", reason="no", request_id=None
            )
            try:
                tool.pending_approval((), WIRE_INPUT, call_id="fw-1")
            except ApprovalRejectedError as error:
                errors.append(error)

        with pytest.raises(ApprovalRejectedError):
            sagacity.saga(SAGA, framework)
        assert len(errors) == 1

    def test_without_a_call_id_the_call_finds_its_request(self, sagacity: Sagacity) -> None:
        """Asking without a framework id does not use up the id the call will take."""
        shop = Shop()
        tool = tools_of(sagacity, shop)["send_wire_transfer"]
        asked: list[Any] = []

        def framework() -> Any:
            asked.append(tool.pending_approval((), WIRE_INPUT))
            asked.append(tool.pending_approval((), WIRE_INPUT))
            if asked[-1] is not None:
                return "paused"
            return tool(**WIRE_INPUT)

        result = sagacity.saga(SAGA, framework)
        assert asked[0] == asked[1] == result.pending[0]
        assert result.pending[0].call_id == "send_wire_transfer#1"
        sagacity.approve(SAGA, approver="alice")
        assert sagacity.resume_saga(SAGA, framework).value == "wire-900.00-ACME"
        assert shop.calls["send_wire_transfer"] == 1
        assert [e.call_id for e in sagacity.history(SAGA) if e.phase is Phase.INTENT] == [
            "send_wire_transfer#1"
        ]

    def test_none_when_no_approval_is_needed(self, sagacity: Sagacity) -> None:
        """Not IRREVERSIBLE, or no saga open: nothing to wait for."""
        tools = tools_of(sagacity, Shop())
        assert tools["reserve_inventory"].pending_approval(("SKU-1",)) is None
        sagacity_open = Sagacity.from_url("memory://", allow_irreversible_outside_saga=True)
        wire = tools_of(sagacity_open, Shop())["send_wire_transfer"]
        assert wire.pending_approval((), WIRE_INPUT) is None

    def test_an_expired_request_is_asked_again(self, open_sagacity: OpenSagacity) -> None:
        """pending_approval() on an expired request returns a new request to wait on."""
        clock = FakeClock()
        sagacity = open_sagacity(approval_ttl=60, clock=clock)
        tool = tools_of(sagacity, Shop())["send_wire_transfer"]

        def framework() -> Any:
            return tool.pending_approval((), WIRE_INPUT, call_id="fw-1")

        first = sagacity.saga(SAGA, framework).value
        clock.advance(61)
        second = sagacity.resume_saga(SAGA, framework).value
        assert isinstance(first, ApprovalRequest)
        assert isinstance(second, ApprovalRequest)
        assert second.request_id != first.request_id
        assert sagacity.pending(SAGA) == [second]

    async def test_a_decline_after_the_work_returned_is_refused(self, sagacity: Sagacity) -> None:
        """A framework's "no" that comes after the work returned journals nothing.

        No entry follows the end of a run: the request stays waiting, to be rejected
        through `Sagacity.reject` or declined in the next run.
        """
        tool = tools_of(sagacity, Shop())["send_wire_transfer"]
        scopes: list[SagaScope] = []

        async def framework() -> Any:
            scope = current_scope()
            assert scope is not None
            scopes.append(scope)
            return await tool.apending_approval((), WIRE_INPUT, call_id="fw-1")

        assert (await sagacity.asaga(SAGA, framework)).outcome is SagaOutcome.AWAITING_APPROVAL
        with scopes[0].entered(), pytest.raises(SagaStateError, match="work returned"):
            await tool.adecline((), WIRE_INPUT, call_id="fw-1", source="late", reason="no")
        assert phases(sagacity.history(SAGA)) == [("AWAITING_APPROVAL", "send_wire_transfer", None)]
        assert [r.state for r in sagacity.pending(SAGA)] == ["waiting"]


class TestAcrossProcesses:
    def test_approval_from_another_instance(self, sqlite_url: str) -> None:
        """Another Sagacity on the same SQLite file approves; the first one resumes."""
        worker = Sagacity.from_url(sqlite_url)
        approver = Sagacity.from_url(sqlite_url)
        try:
            waiting = waiting_saga(worker)
            (seen,) = approver.pending()
            assert seen == waiting.request
            approver.approve(SAGA, approver="alice@treasury", expected_sha256=seen.input_sha256)
            result = worker.resume_saga(SAGA)
            assert (result.outcome, waiting.wire_ran()) == (SagaOutcome.COMPLETED, 1)
            assert approver.pending() == []
        finally:
            worker.close()
            approver.close()

    def test_resume_in_another_instance(self, sqlite_url: str) -> None:
        """A process that wrapped the tools resumes a saga another process started."""
        worker = Sagacity.from_url(sqlite_url)
        waiting_saga(worker)
        worker.close()
        later = Sagacity.from_url(sqlite_url)
        try:
            shop = Shop()
            tools_of(later, shop)
            later.approve(SAGA, approver="alice@treasury")
            result = later.resume_saga(SAGA)
            assert result.outcome is SagaOutcome.COMPLETED
            assert shop.log == ["wire 900.00 to ACME"]
            assert phases(later.history(SAGA))[-1] == ("ENDED", None, None)
        finally:
            later.close()

    def test_workers_resuming_at_once_run_the_approved_call_once(
        self, shared_store_url: str
    ) -> None:
        """Workers that resume one approved saga at the same moment run its call exactly once.

        Each checks the approval unused; the INTENT is appended only if the journal is as
        the check read it, so the losers re-check, find the call taken and are refused.
        """
        store_url = shared_store_url
        starter = Sagacity.from_url(store_url)
        waiting_saga(starter)
        starter.approve(SAGA, approver="alice@treasury")
        workers = [Sagacity.from_url(store_url) for _ in range(4)]
        shops = [Shop() for _ in workers]
        for worker, shop in zip(workers, shops, strict=True):
            tools_of(worker, shop)
        barrier = threading.Barrier(len(workers))
        outcomes: list[str] = []

        def resume(worker: Sagacity) -> None:
            barrier.wait()
            try:
                outcomes.append(worker.resume_saga(SAGA).outcome.value)
            except (ApprovalError, SagaStateError) as refusal:
                outcomes.append(type(refusal).__name__)

        threads = [threading.Thread(target=resume, args=(w,)) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        try:
            assert sum(shop.calls["send_wire_transfer"] for shop in shops) == 1
            assert outcomes.count("COMPLETED") == 1
            assert len(outcomes) == len(workers)
            wires = [
                e.call_id
                for e in starter.history(SAGA)
                if e.phase is Phase.INTENT and e.tool_name == "send_wire_transfer"
            ]
            assert wires == ["send_wire_transfer#1"]
            ended = [e for e in starter.history(SAGA) if e.phase is Phase.ENDED]
            assert len(ended) == 1
            assert verify(starter.journal, SAGA).ok
        finally:
            for instance in (starter, *workers):
                instance.close()
