"""An approval binds exactly what the human saw: the tool, the call, the input, once.

Each test attacks the approval path as an outsider would (another tool under an approved
call id, an edited store, a second approver, a rejection racing the run, workers racing
each other, a substituted input, a clock of another kind) on every backend.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import threading
from typing import Any

import pytest

from sagacity import (
    ApprovalAlreadyGivenError,
    ApprovalAlreadyUsedError,
    ApprovalError,
    ApprovalHashMismatchError,
    ApprovalToolMismatchError,
    ConfigurationError,
    Phase,
    Reversibility,
    SagaBusyError,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    compensable,
)
from sagacity.journal import sha256_hex
from sagacity.testing import FakeClock
from tests._shop import Shop, journal_intent, order_then_wire, phases, tools_of
from tests.approval.test_approval import SAGA, WIRE_INPUT, Waiting, tamper, waiting_saga

Bank = tuple["Treasury", dict[str, Any], str]


@pytest.fixture
def waiting(sagacity: Sagacity) -> Waiting:
    """A saga waiting for approval of a wire, on each backend."""
    return waiting_saga(sagacity)


class Treasury:
    """Two IRREVERSIBLE tools that take the same arguments, and a compensatable one."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str, str]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Wire money to another bank."""
        self.ran.append(("send_wire_transfer", amount, to))
        return f"wire-{amount}-{to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def close_account(self, amount: str, to: str) -> str:
        """Pay out the balance and close the account."""
        self.ran.append(("close_account", amount, to))
        return "closed"

    @compensable(by="cancel_hold")
    def place_hold(self, amount: str, to: str) -> str:
        """Hold funds."""
        self.ran.append(("place_hold", amount, to))
        return "hold-1"

    def cancel_hold(self) -> None:
        self.ran.append(("cancel_hold", "", ""))


@pytest.fixture
def treasury(sagacity: Sagacity) -> Bank:
    """A saga whose wire (call id 'call-1') is approved by alice, not yet run."""
    bank = Treasury()
    tools = tools_of(sagacity, bank)
    result = sagacity.saga(
        "pay-1",
        lambda: tools["send_wire_transfer"].invoke((), WIRE_INPUT, call_id="call-1"),
    )
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    sagacity.approve("pay-1", approver="alice@treasury")
    return bank, tools, "pay-1"


class TestToolBinding:
    @pytest.mark.parametrize("other", ["close_account", "place_hold"])
    def test_another_tool_under_an_approved_call_id_is_refused(
        self, sagacity: Sagacity, treasury: Bank, other: str
    ) -> None:
        """Another tool never runs under an approved call's id, and the attempt is journaled.

        The approved call still runs, once, afterwards.
        """
        bank, tools, saga = treasury

        with pytest.raises(ApprovalToolMismatchError, match="asked for tool 'send_wire"):
            sagacity.resume_saga(
                saga, lambda: tools[other].invoke((), WIRE_INPUT, call_id="call-1")
            )

        assert bank.ran == []
        refused = sagacity.history(saga)[-1]
        assert (refused.phase, refused.tool_name, refused.call_id, refused.ref_seq) == (
            Phase.REFUSED,
            other,
            "call-1",
            1,
        )
        assert refused.payload["reason"] == "tool_mismatch"
        result = sagacity.resume_saga(saga)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "wire-900.00-ACME")
        assert bank.ran == [("send_wire_transfer", "900.00", "ACME")]

    def test_the_approval_policy_refuses_another_tool(
        self, sagacity: Sagacity, treasury: Bank
    ) -> None:
        """`pending_approval` (a framework's policy) never answers "run it" for another tool."""
        bank, tools, saga = treasury

        def policy_then_call() -> Any:
            tools["close_account"].pending_approval((), WIRE_INPUT, call_id="call-1")
            return tools["close_account"].invoke((), WIRE_INPUT, call_id="call-1")

        with pytest.raises(ApprovalToolMismatchError):
            sagacity.resume_saga(saga, policy_then_call)
        assert bank.ran == []
        assert sagacity.history(saga)[-1].phase is Phase.REFUSED


class TestWhatTheApproverSees:
    def test_pending_shows_the_journal_not_an_edited_store(
        self, waiting: Waiting, store_url: str
    ) -> None:
        """An edited store shows the journal's input, marked tampered, and cannot be approved.

        It can still be rejected, and nothing runs.
        """
        sagacity, request = waiting.sagacity, waiting.request
        forged = {"amount": "9999.00", "to": "MALLORY"}
        tamper(sagacity, store_url, request, input=forged, input_sha256=sha256_hex(forged))

        (shown,) = sagacity.pending(SAGA)
        assert (shown.input, shown.input_sha256) == (WIRE_INPUT, request.input_sha256)
        assert shown.state == "tampered"
        assert shown.problem is not None
        assert "the stored request was changed" in shown.problem
        with pytest.raises(ApprovalHashMismatchError):
            sagacity.approve(SAGA, approver="alice@treasury")
        assert [e.phase for e in sagacity.history(SAGA)].count(Phase.APPROVED) == 0
        result = sagacity.reject(SAGA, approver="bob@treasury", reason="tampered")
        assert result.outcome is SagaOutcome.COMPENSATED
        waiting.assert_nothing_ran()

    def test_pending_shows_who_approved_and_when(self, waiting: Waiting) -> None:
        """After an approval, `pending` says approved, by whom and when (the entry's time)."""
        sagacity = waiting.sagacity
        assert sagacity.pending(SAGA)[0].state == "waiting"
        entry = sagacity.approve(SAGA, approver="alice@treasury")

        (shown,) = sagacity.pending(SAGA)
        assert shown.state == "approved"
        assert [(a.approver, a.approved_at, a.seq) for a in shown.approvals] == [
            ("alice@treasury", entry.recorded_at, entry.seq)
        ]
        assert shown.to_json()["approvals"] == [
            {
                "approver": "alice@treasury",
                "approved_at": entry.recorded_at,
                "seq": entry.seq,
                "key_id": None,
                "via": "python",
            }
        ]

    def test_a_second_approval_is_refused(self, waiting: Waiting) -> None:
        """A request is approved once: a second approver is told who approved it.

        Nothing is journaled for the second, and the call runs once.
        """
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        before = len(sagacity.history(SAGA))
        with pytest.raises(ApprovalAlreadyGivenError, match="approved by 'alice@treasury'"):
            sagacity.approve(SAGA, approver="mallory")
        assert len(sagacity.history(SAGA)) == before
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        assert waiting.wire_ran() == 1


class TestRejection:
    def test_reject_while_the_approved_call_runs_is_refused(self, waiting: Waiting) -> None:
        """Once the approved call's INTENT follows its request, a rejection is refused.

        The call may be running: a REJECTED would claim it never ran.
        """
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        journal_intent(
            sagacity, SAGA, waiting.request.call_id, tool_name="send_wire_transfer",
            tool_input=WIRE_INPUT,
        )  # fmt: skip
        before = phases(sagacity.history(SAGA))

        with pytest.raises(ApprovalAlreadyUsedError, match="already ran"):
            sagacity.reject(SAGA, approver="bob", reason="too late")
        assert phases(sagacity.history(SAGA)) == before

    def test_nothing_is_decided_after_the_end(self, waiting: Waiting) -> None:
        """A request put back into the store after its saga ended cannot be decided.

        No phase is appended after ENDED, and the saga has one ENDED.
        """
        sagacity, request = waiting.sagacity, waiting.request
        sagacity.reject(SAGA, approver="bob", reason="no")
        ended = phases(sagacity.history(SAGA))
        sagacity.approvals.save(request)  # someone restores the consumed request

        with pytest.raises((ApprovalError, SagaStateError)):
            sagacity.approve(SAGA, approver="alice")
        with pytest.raises((ApprovalError, SagaStateError)):
            sagacity.reject(SAGA, approver="alice", reason="again")
        with pytest.raises(ApprovalError):
            sagacity.resume_saga(SAGA)
        assert phases(sagacity.history(SAGA)) == ended
        assert [e.phase for e in sagacity.history(SAGA)].count(Phase.ENDED) == 1


class TestRaces:
    @pytest.mark.parametrize("with_work", [False, True], ids=["stored-input", "work"])
    def test_every_loser_of_a_resume_race_is_told_the_approval_was_used(
        self, shared_store_url: str, with_work: bool
    ) -> None:
        """Of workers resuming one approved saga at once, one runs the call.

        Every other, once it holds the saga in turn, gets ApprovalAlreadyUsedError, never
        a misleading "not found"; one resuming with work (a framework's resume) replays
        the saga as it ended instead, and runs nothing.
        """
        starter = Sagacity.from_url(shared_store_url)
        waiting_saga(starter)
        starter.approve(SAGA, approver="alice@treasury")
        # Each waits for the saga's lease rather than being refused as busy at once.
        workers = [Sagacity.from_url(shared_store_url, lease_wait=30) for _ in range(6)]
        shops = [Shop() for _ in workers]
        tools = [tools_of(worker, shop) for worker, shop in zip(workers, shops, strict=True)]
        barrier = threading.Barrier(len(workers))
        outcomes: list[str] = []

        def resume(index: int) -> None:
            worker = workers[index]
            barrier.wait()
            try:
                if with_work:
                    result = worker.resume_saga(SAGA, order_then_wire(tools[index]))
                else:
                    result = worker.resume_saga(SAGA)
                outcomes.append(("replayed " if result.replayed else "") + result.outcome.value)
            except Exception as refusal:  # every kind is named in the assertion
                outcomes.append(type(refusal).__name__)

        threads = [threading.Thread(target=resume, args=(i,)) for i in range(len(workers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        try:
            lost = "replayed COMPLETED" if with_work else "ApprovalAlreadyUsedError"
            assert sorted(outcomes) == sorted([lost] * 5 + ["COMPLETED"])
            assert sum(shop.calls["send_wire_transfer"] for shop in shops) == 1
            assert [e.phase for e in starter.history(SAGA)].count(Phase.ENDED) == 1
        finally:
            for worker in [starter, *workers]:
                worker.close()


class TestSubstitution:
    def test_a_substituted_input_leaves_evidence(self, waiting: Waiting) -> None:
        """An input hashing otherwise than its approval is journaled REFUSED with its hash.

        Nothing runs; the approved input still runs afterwards.
        """
        sagacity = waiting.sagacity
        sagacity.approve(SAGA, approver="alice@treasury")
        forged = {"amount": "9999.00", "to": "MALLORY"}

        with pytest.raises(ApprovalHashMismatchError):
            sagacity.resume_saga(SAGA, order_then_wire(waiting.tools, **forged))

        refused = sagacity.history(SAGA)[-1]
        assert (refused.phase, refused.tool_name, refused.ref_seq) == (
            Phase.REFUSED,
            "send_wire_transfer",
            waiting.request.seq,
        )
        assert refused.payload["reason"] == "input_mismatch"
        assert refused.payload["request_id"] == waiting.request.request_id
        assert refused.payload["input_sha256"] == sha256_hex(forged)
        assert waiting.request.input_sha256[:12] in refused.payload["error"]
        waiting.assert_nothing_ran()
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        assert waiting.wire_ran() == 1


@dataclasses.dataclass(frozen=True)
class Beneficiary:
    name: str
    iban: bytes


class Payouts:
    def __init__(self) -> None:
        self.received: list[tuple[Any, ...]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(
        self,
        amount: decimal.Decimal,
        when: datetime.datetime,
        to: Beneficiary,
        reference: int,
        split: tuple[int, str],
    ) -> str:
        """Pay a beneficiary."""
        self.received.append((amount, when, to, reference, split))
        return str(amount + amount)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay_complex(self, amount: complex) -> str:
        """Take a value that has no way back from JSON."""
        return "never"


class TestTypedResume:
    def test_the_stored_call_gets_the_types_it_was_called_with(self, sagacity: Sagacity) -> None:
        """Resumed without work, the approved call gets its Python types again.

        Decimal, datetime, a dataclass holding bytes, a big int and a tuple are rebuilt
        from the journaled JSON, so `amount + amount` is a sum, not a concatenation.
        """
        payouts = Payouts()
        tools = tools_of(sagacity, payouts)
        arguments = {
            "amount": decimal.Decimal("900.10"),
            "when": datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC),
            "to": Beneficiary(name="ACME", iban=b"\x00DE89"),
            "reference": 2**70,
            "split": (3, "EUR"),
        }
        waiting = sagacity.saga("typed", lambda: tools["pay"](**arguments))
        assert waiting.pending[0].input["amount"] == "900.10"
        sagacity.approve("typed", approver="alice")

        result = sagacity.resume_saga("typed")

        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "1800.20")
        assert payouts.received == [tuple(arguments.values())]

    def test_a_parameter_that_cannot_be_rebuilt_is_refused_before_running(
        self, sagacity: Sagacity
    ) -> None:
        """A parameter with no way back from JSON is named, and nothing runs.

        The saga stays open, for the framework's own resume.
        """
        tools = tools_of(sagacity, Payouts())
        sagacity.saga("cx", lambda: tools["pay_complex"].invoke((), {"amount": "1+2j"}))
        sagacity.approve("cx", approver="alice")

        with pytest.raises(ConfigurationError, match="argument 'amount'"):
            sagacity.resume_saga("cx")
        assert [e.phase for e in sagacity.history("cx")] == [
            Phase.AWAITING_APPROVAL,
            Phase.APPROVED,
        ]


class TestClocks:
    def test_a_naive_clock_is_refused_when_built(self, store_url: str) -> None:
        """A clock of naive datetimes cannot be compared with stored times: refused at once."""
        with pytest.raises(ConfigurationError, match="timezone-aware"):
            Sagacity.from_url(store_url, clock=lambda: datetime.datetime(2026, 1, 1))

    def test_an_aware_clock_in_another_zone_approves(self, store_url: str) -> None:
        """A clock at UTC+02:00 with a TTL passes every check on every backend."""
        zone = datetime.timezone(datetime.timedelta(hours=2))
        clock = FakeClock(datetime.datetime(2026, 6, 1, 12, 0, tzinfo=zone))
        sagacity = Sagacity.from_url(store_url, clock=clock, approval_ttl=3600)
        try:
            waiting = waiting_saga(sagacity)
            assert waiting.request.expires_at == datetime.datetime(2026, 6, 1, 13, 0, tzinfo=zone)
            clock.advance(seconds=60)
            waiting.approve_and_resume_once()
        finally:
            sagacity.close()


class TestOneWorkerPerSaga:
    def test_a_worker_that_cannot_wait_is_refused_naming_the_holder(
        self, shared_store_url: str
    ) -> None:
        """While one worker holds a saga, another's resume is refused and runs nothing.

        The error names the holder; the holder's run goes on and completes.
        """
        holder, other = Sagacity.from_url(shared_store_url), Sagacity.from_url(shared_store_url)
        try:
            waiting = waiting_saga(holder)
            holder.approve(SAGA, approver="alice@treasury")
            other_shop = Shop()
            tools_of(other, other_shop)
            refused: list[Exception] = []

            def other_worker() -> None:
                try:
                    other.resume_saga(SAGA)
                except SagaBusyError as error:
                    refused.append(error)

            def work() -> Any:
                worker = threading.Thread(target=other_worker)
                worker.start()
                worker.join()
                return order_then_wire(waiting.tools)()

            result = holder.resume_saga(SAGA, work)

            assert result.outcome is SagaOutcome.COMPLETED
            assert len(refused) == 1
            assert f"saga {SAGA!r} is held by " in str(refused[0])
            assert other_shop.calls["send_wire_transfer"] == 0
            assert waiting.wire_ran() == 1
        finally:
            holder.close()
            other.close()
