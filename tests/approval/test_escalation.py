"""Reminders and escalation: a request's warning time, its second group, and deny at expiry.

A fake clock moves time; `Escalator.sweep` acts at each time point, and everything it
does is read back from the journal.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from sagacity import (
    ApprovalError,
    ApprovalRequest,
    ApproverGroup,
    CompensationContext,
    ConfigurationError,
    Escalator,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaTool,
    Worker,
    compensable,
    compensation,
    verify,
)
from sagacity.cli._request_text import request_block, request_views
from sagacity.testing import FakeClock
from tests.approval._policy import OpenSagacity, inject_approval
from tests.cli._run import run_cli

SAGA = "payout-7"
HOUR = 3600.0
LEADS = ApproverGroup(name="treasury-leads", members=["carol", "dave"], ttl=1800)


class Payouts:
    """Book a payout, then wire it: reminded 10 minutes before expiry, escalated, or denied."""

    def __init__(self) -> None:
        self.wired: list[str] = []
        self.undone: list[str] = []

    @compensable(by="unbook")
    def book(self, ref: str) -> str:
        """Book the payout."""
        return f"bk-{ref}"

    @compensation
    def unbook(self, ctx: CompensationContext) -> None:
        self.undone.append(str(ctx.result))

    @compensable(
        reversibility=Reversibility.IRREVERSIBLE,
        remind_before=datetime.timedelta(minutes=10),
        escalate_to="treasury-leads",
    )
    def wire(self, amount: str) -> str:
        """Wire money: one approver, or the treasury leads once it expired."""
        self.wired.append(amount)
        return f"wire-{amount}"

    @compensable(
        reversibility=Reversibility.IRREVERSIBLE, approvers=2, escalate_to="treasury-leads"
    )
    def big_wire(self, amount: str) -> str:
        """Wire a large sum: two approvers, or two treasury leads once it expired."""
        self.wired.append(amount)
        return f"big-{amount}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE, remind_before=600)
    def refund(self, amount: str) -> str:
        """Refund: reminded, then denied at expiry."""
        self.wired.append(amount)
        return f"refund-{amount}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def plain(self, amount: str) -> str:
        """No declaration: denied at expiry, as always."""
        self.wired.append(amount)
        return f"plain-{amount}"


class Setup:
    """A Sagacity with a fake clock, the payout tools and the reminders it sent."""

    def __init__(self, open_sagacity: OpenSagacity, clock: FakeClock, **options: Any) -> None:
        self.clock = clock
        self.reminded: list[ApprovalRequest] = []
        self.sagacity: Sagacity = open_sagacity(
            approval_ttl=HOUR,
            clock=clock,
            on_approval_reminder=self.reminded.append,
            approver_groups=[LEADS],
            **options,
        )
        self.payouts = Payouts()
        self.tools: dict[str, SagaTool] = {t.name: t for t in self.sagacity.wrap(self.payouts)}

    def start(self, tool: str = "wire", saga_id: str = SAGA) -> ApprovalRequest:
        def work() -> Any:
            self.tools["book"]("P-7")
            return self.tools[tool](amount="900.00")

        result = self.sagacity.saga(saga_id, work, started_by="alice")
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        (request,) = result.pending
        return request

    def sweep(self) -> list[tuple[str, str]]:
        return [(a.saga_id, a.action) for a in Escalator(self.sagacity).sweep()]

    def phases(self, saga_id: str = SAGA) -> list[str]:
        return [e.phase.value for e in self.sagacity.history(saga_id)]

    def entry(self, phase: Phase, saga_id: str = SAGA) -> dict[str, Any]:
        (found,) = [e for e in self.sagacity.history(saga_id) if e.phase is phase]
        assert isinstance(found.payload, dict)
        return found.payload


@pytest.fixture
def clock() -> FakeClock:
    """Time that moves only when a test moves it."""
    return FakeClock(datetime.datetime(2026, 3, 6, 17, 0, tzinfo=datetime.UTC))


@pytest.fixture
def setup(open_sagacity: OpenSagacity, clock: FakeClock) -> Setup:
    """The payout tools on each backend."""
    return Setup(open_sagacity, clock)


START = datetime.datetime(2026, 3, 6, 17, 0, tzinfo=datetime.UTC)


class TestReminder:
    def test_goes_out_once_at_the_warning_time(self, setup: Setup) -> None:
        """Nothing before 50 minutes; at them one REMINDED and one hook call, never a second."""
        request = setup.start()
        assert request.remind_at == START + datetime.timedelta(minutes=50)
        assert setup.entry(Phase.AWAITING_APPROVAL)["remind_at"] == "2026-03-06T17:50:00+00:00"
        setup.clock.advance(minutes=49, seconds=59)
        assert setup.sweep() == []
        setup.clock.advance(seconds=1)
        assert setup.sweep() == [(SAGA, "reminded")]
        assert setup.sweep() == []
        setup.clock.advance(minutes=5)
        assert setup.sweep() == []
        assert [r.request_id for r in setup.reminded] == [request.request_id]
        assert setup.reminded[0].warn_at == request.remind_at
        reminded = setup.entry(Phase.REMINDED)
        assert reminded == {
            "request_id": request.request_id,
            "remind_at": "2026-03-06T17:50:00+00:00",
            "expires_at": "2026-03-06T18:00:00+00:00",
            "group": None,
        }
        assert setup.phases()[-2:] == ["AWAITING_APPROVAL", "REMINDED"]

    def test_a_failing_hook_is_logged_and_the_reminder_stands(
        self, open_sagacity: OpenSagacity, clock: FakeClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A hook that raises does not undo the REMINDED, nor make the next sweep send again."""

        def broken(request: ApprovalRequest) -> None:
            raise RuntimeError("mail server down")

        setup = Setup(open_sagacity, clock)
        setup.sagacity.approval.on_reminder = broken
        setup.start()
        clock.advance(minutes=55)
        with caplog.at_level(logging.ERROR, logger="sagacity"):
            assert setup.sweep() == [(SAGA, "reminded")]
        assert "on_approval_reminder hook raised" in caplog.text
        assert setup.sweep() == []

    def test_an_approved_request_is_not_reminded(self, setup: Setup) -> None:
        """A request approved before its warning time needs no reminder."""
        setup.start()
        setup.sagacity.approve(SAGA, approver="bob")
        setup.clock.advance(minutes=55)
        assert setup.sweep() == []
        assert "REMINDED" not in setup.phases()


class TestEscalation:
    def test_is_journaled_with_the_group_and_a_new_expiry(self, setup: Setup) -> None:
        """At expiry ESCALATED names the group, its members and when the group's time ends."""
        request = setup.start()
        setup.clock.advance(HOUR)
        assert setup.sweep() == [(SAGA, "escalated")]
        assert setup.sweep() == []
        escalated = setup.entry(Phase.ESCALATED)
        assert escalated == {
            "request_id": request.request_id,
            "group": "treasury-leads",
            "members": ["carol", "dave"],
            "expired_at": "2026-03-06T18:00:00+00:00",
            "escalated_at": "2026-03-06T18:00:00+00:00",
            "expires_at": "2026-03-06T18:30:00+00:00",
            "remind_at": "2026-03-06T18:20:00+00:00",
        }
        (shown,) = setup.sagacity.pending(SAGA)
        assert shown.escalation is not None
        assert shown.escalation.group == "treasury-leads"
        assert shown.deadline == START + datetime.timedelta(minutes=90)
        assert shown.escalation_json()["escalation"] == {
            "group": "treasury-leads",
            "members": ["carol", "dave"],
            "seq": 4,
            "escalated_at": "2026-03-06T18:00:00+00:00",
            "expires_at": "2026-03-06T18:30:00+00:00",
            "remind_at": "2026-03-06T18:20:00+00:00",
        }
        assert verify(setup.sagacity.journal, SAGA).ok

    def test_only_the_group_approves_after_it(self, setup: Setup) -> None:
        """A non-member is refused, and a row it writes does not count; a member approves."""
        setup.start()
        setup.clock.advance(HOUR)
        setup.sweep()
        with pytest.raises(ApprovalError, match="'bob' is not a member of it"):
            setup.sagacity.approve(SAGA, approver="bob")
        (request,) = setup.sagacity.pending(SAGA)
        inject_approval(setup.sagacity, request, "bob")
        assert setup.sagacity.pending(SAGA)[0].approvals == ()
        setup.sagacity.approve(SAGA, approver="carol")
        result = setup.sagacity.resume_saga(SAGA)
        assert result.outcome is SagaOutcome.COMPLETED
        assert setup.payouts.wired == ["900.00"]

    def test_an_approval_before_it_no_longer_counts(self, setup: Setup) -> None:
        """One of two approvals given before the escalation counts for nothing after it."""
        setup.start("big_wire")
        setup.sagacity.approve(SAGA, approver="bob")
        setup.clock.advance(HOUR)
        assert setup.sweep() == [(SAGA, "escalated")]
        assert setup.sagacity.pending(SAGA)[0].approvals == ()
        setup.sagacity.approve(SAGA, approver="carol")
        assert setup.sagacity.pending(SAGA)[0].state == "waiting"
        setup.sagacity.approve(SAGA, approver="dave")
        assert setup.sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        assert setup.payouts.wired == ["900.00"]

    def test_four_eyes_still_apply(self, open_sagacity: OpenSagacity, clock: FakeClock) -> None:
        """A group member who started the saga cannot approve it after the escalation."""
        setup = Setup(open_sagacity, clock)
        setup.sagacity.approval.policy.groups["treasury-leads"] = ApproverGroup(
            name="treasury-leads", members=["alice", "carol"], ttl=1800
        )
        setup.start()
        clock.advance(HOUR)
        setup.sweep()
        with pytest.raises(ApprovalError, match="started the saga"):
            setup.sagacity.approve(SAGA, approver="alice")

    def test_the_group_is_reminded_then_the_request_denied(self, setup: Setup) -> None:
        """Before the group's expiry a second reminder; at it, REJECTED and compensated."""
        setup.start()
        setup.clock.advance(HOUR)
        setup.sweep()
        setup.clock.advance(minutes=20)
        assert setup.sweep() == [(SAGA, "reminded")]
        assert setup.reminded[-1].escalation is not None
        setup.clock.advance(minutes=10)
        assert setup.sweep() == [(SAGA, "denied")]
        assert setup.sweep() == []
        assert setup.phases() == [
            "INTENT",
            "EXECUTED",
            "AWAITING_APPROVAL",
            "ESCALATED",
            "REMINDED",
            "REJECTED",
            "COMPENSATING",
            "COMPENSATED",
            "ENDED",
        ]
        assert setup.entry(Phase.REJECTED)["source"] == "expiry"
        assert setup.payouts.undone == ["bk-P-7"]
        assert setup.payouts.wired == []
        assert verify(setup.sagacity.journal, SAGA).ok


class TestForgedEscalation:
    def _forge(self, setup: Setup, request: ApprovalRequest, **payload: Any) -> None:
        """Append an ESCALATED with the journal's own API: what database access allows."""
        setup.sagacity.journal.append(
            SAGA,
            Phase.ESCALATED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload={
                "request_id": request.request_id,
                "group": "treasury-leads",
                "members": ["carol", "mallory"],
                "expired_at": "2026-03-06T18:00:00+00:00",
                "escalated_at": "2026-03-06T18:00:00+00:00",
                "expires_at": "2026-03-06T23:00:00+00:00",
                "remind_at": None,
                **payload,
            },
        )

    def test_a_member_added_in_the_row_adds_nobody(self, setup: Setup) -> None:
        """Mallory wrote herself into the group: where the group is configured she is not in it."""
        request = setup.start()
        setup.clock.advance(HOUR)
        self._forge(setup, request)
        with pytest.raises(ApprovalError, match="'mallory' is not a member"):
            setup.sagacity.approve(SAGA, approver="mallory")
        inject_approval(setup.sagacity, request, "mallory")
        (shown,) = setup.sagacity.pending(SAGA)
        assert shown.approvals == ()
        assert shown.escalation is not None
        assert shown.escalation.members == ("carol",)

    def test_an_escalation_to_another_group_lets_nobody_approve(self, setup: Setup) -> None:
        """A row naming a group the request does not escalate to: no approval counts."""
        request = setup.start("refund")  # declares no group
        self._forge(setup, request, group="treasury-leads")
        with pytest.raises(ApprovalError, match="not a member"):
            setup.sagacity.approve(SAGA, approver="carol")


class TestDeny:
    def test_at_expiry_compensates(self, setup: Setup) -> None:
        """A request that names no group is reminded, then denied at expiry and compensated."""
        setup.start("refund")
        setup.clock.advance(minutes=50)
        assert setup.sweep() == [(SAGA, "reminded")]
        setup.clock.advance(minutes=10)
        assert setup.sweep() == [(SAGA, "denied")]
        assert setup.phases()[3:] == [
            "REMINDED",
            "REJECTED",
            "COMPENSATING",
            "COMPENSATED",
            "ENDED",
        ]
        assert setup.payouts.undone == ["bk-P-7"]
        assert setup.sagacity.pending(SAGA) == []

    def test_is_the_default(self, setup: Setup) -> None:
        """With no declaration nothing is reminded, and expiry denies as it always did."""
        request = setup.start("plain")
        assert (request.remind_at, request.escalate_to) == (None, None)
        assert "remind_at" not in setup.entry(Phase.AWAITING_APPROVAL)
        assert "escalate_to" not in setup.entry(Phase.AWAITING_APPROVAL)
        setup.clock.advance(HOUR - 1)
        assert setup.sweep() == []
        setup.clock.advance(1)
        assert setup.sweep() == [(SAGA, "denied")]
        assert setup.payouts.undone == ["bk-P-7"]
        assert setup.reminded == []

    def test_left_to_the_worker_when_asked(self, setup: Setup) -> None:
        """`sweep(deny=False)` escalates but denies nothing; the worker denies and compensates."""
        setup.start("refund")
        setup.clock.advance(HOUR)
        assert [a.action for a in Escalator(setup.sagacity).sweep(deny=False)] == []
        assert "REJECTED" not in setup.phases()
        assert Worker(setup.sagacity).run_once() == 1
        assert setup.phases()[-4:] == ["REJECTED", "COMPENSATING", "COMPENSATED", "ENDED"]
        assert setup.payouts.undone == ["bk-P-7"]


class TestWorker:
    def test_reminds_escalates_and_denies_without_a_human(self, setup: Setup) -> None:
        """The worker's full look runs the sweep: reminded, escalated, then denied."""
        setup.start()
        worker = Worker(setup.sagacity)
        setup.clock.advance(minutes=55)
        assert worker.run_once() == 0
        assert setup.phases()[-1] == "REMINDED"
        setup.clock.advance(minutes=5)
        assert worker.run_once() == 0  # escalated, not denied: the group has its time
        assert setup.phases()[-1] == "ESCALATED"
        setup.clock.advance(minutes=25)
        assert worker.run_once() == 0
        assert setup.phases()[-1] == "REMINDED"
        setup.clock.advance(minutes=5)
        assert worker.run_once() == 1
        assert setup.phases()[-4:] == ["REJECTED", "COMPENSATING", "COMPENSATED", "ENDED"]
        assert [r.escalation is not None for r in setup.reminded] == [False, True]


class TestRacingSweepers:
    @pytest.mark.parametrize("round_", range(5))
    def test_two_sweepers_act_once(
        self, shared_store_url: str, clock: FakeClock, round_: int
    ) -> None:
        """Two Sagacity instances sweeping at once remind, escalate and deny each saga once."""
        sagas = [f"race-{n}" for n in range(4)]
        both = []
        for _ in range(2):
            instance = Sagacity.from_url(
                shared_store_url, approval_ttl=HOUR, clock=clock, approver_groups=[LEADS]
            )
            both.append(instance)
        try:
            reminded: list[list[str]] = [[], []]
            for n, instance in enumerate(both):
                instance.approval.on_reminder = lambda r, n=n: reminded[n].append(r.saga_id)
            tools = {t.name: t for t in both[0].wrap(Payouts())}
            for instance in both[1:]:
                instance.wrap(Payouts())
            for saga_id in sagas:
                result = both[0].saga(
                    saga_id, lambda: tools["wire"](amount="1.00"), started_by="alice"
                )
                assert result.outcome is SagaOutcome.AWAITING_APPROVAL
            acted: list[list[tuple[str, str]]] = []
            for minutes in (55, 5, 25, 5):
                clock.advance(minutes=minutes)
                acted.append(_race(both))
            assert [sorted(step) for step in acted] == [
                sorted((s, what) for s in sagas)
                for what in ("reminded", "escalated", "reminded", "denied")
            ]
            assert sorted(reminded[0] + reminded[1]) == sorted(sagas * 2)
            for saga_id in sagas:
                phases = [e.phase.value for e in both[0].history(saga_id)]
                assert phases.count("REMINDED") == 2
                assert phases.count("ESCALATED") == 1
                assert phases.count("REJECTED") == 1
                assert phases[-1] == "ENDED"
        finally:
            for instance in both:
                instance.close()


def _race(instances: list[Sagacity]) -> list[tuple[str, str]]:
    """Sweep with every instance at once, each on its own thread; what they did, together."""
    barrier = threading.Barrier(len(instances))
    done: list[tuple[str, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def sweep(instance: Sagacity) -> None:
        try:
            barrier.wait()
            actions = Escalator(instance).sweep()
            with lock:
                done.extend((a.saga_id, a.action) for a in actions)
        except BaseException as error:  # surfaced below, on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=sweep, args=(i,)) for i in instances]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # A sweeper that found a saga held by the other leaves it to the next sweep: sweep
    # again until nothing is due, so each action is counted whoever took it.
    while True:
        more = [(a.saga_id, a.action) for a in Escalator(instances[0]).sweep()]
        if not more:
            return done
        done.extend(more)


class TestPendingCommand:
    def test_shows_the_reminder_and_the_escalation(self, tmp_path: Path, clock: FakeClock) -> None:
        """`sagacity pending --json` and the terminal block: the group, who approves, until when."""
        database = str(tmp_path / "pending.db")
        setup = Setup(
            lambda **options: Sagacity.from_url(f"sqlite:///{database}", **options), clock
        )
        try:
            setup.start()
            before = request_views(setup.sagacity, setup.sagacity.pending(SAGA))
            assert request_block(before[0], clock())[6:8] == [
                "  reminder 2026-03-06T17:50:00+00:00 (in 50m 0s)",
                "  group    escalates to treasury-leads at expiry",
            ]
            clock.advance(HOUR)
            Escalator(setup.sagacity).sweep()
            (view,) = request_views(setup.sagacity, setup.sagacity.pending(SAGA))
            block = request_block(view, clock())
            assert block[5] == "  expires  2026-03-06T18:30:00+00:00 (in 30m 0s)"
            assert block[6:8] == [
                "  reminder 2026-03-06T18:20:00+00:00 (in 20m 0s)",
                "  group    escalated to treasury-leads (carol, dave) at "
                "2026-03-06T18:00:00+00:00 (seq 4): only their approvals count",
            ]
        finally:
            setup.sagacity.close()
        (document,) = [
            json.loads(line)
            for line in run_cli("pending", "--json", "--database", database).stdout.splitlines()
        ]
        assert document["expires_at"] == "2026-03-06T18:30:00+00:00"
        assert document["escalate_to"] == "treasury-leads"
        assert document["escalation"]["members"] == ["carol", "dave"]
        shown = run_cli("show", SAGA, "--database", database).stdout
        assert "ESCALATED" in shown


class TestDeclaration:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"remind_before": 0}, "remind_before must be a positive, finite duration"),
            ({"remind_before": -5}, "remind_before must be a positive, finite duration"),
            ({"remind_before": float("nan")}, "remind_before must be a positive, finite"),
            ({"remind_before": float("inf")}, "remind_before must be a positive, finite"),
            ({"remind_before": True}, "remind_before must be a timedelta or seconds"),
            ({"remind_before": "10m"}, "remind_before must be a timedelta or seconds"),
            ({"escalate_to": "Robert'); DROP TABLE--"}, "escalate_to must name an approver group"),
            ({"escalate_to": "<script>"}, "escalate_to must name an approver group"),
            ({"escalate_to": ""}, "escalate_to must name an approver group"),
            ({"escalate_to": "a" * 33}, "escalate_to must name an approver group"),
            ({"escalate_to": 7}, "escalate_to must name an approver group"),
        ],
    )
    def test_bad_values_are_refused_at_wrap(self, options: dict[str, Any], message: str) -> None:
        """The error names the tool and the field; nothing is wrapped."""
        sagacity = _sagacity(approval_ttl=HOUR, approver_groups=[LEADS])

        @compensable(reversibility=Reversibility.IRREVERSIBLE, name="pay", **options)
        def pay(amount: str) -> str:
            return amount

        with pytest.raises(ConfigurationError, match=message) as refused:
            sagacity.wrap(pay)
        assert "'pay'" in str(refused.value)

    @pytest.mark.parametrize(
        ("settings", "options", "message"),
        [
            ({}, {"escalate_to": "treasury-leads"}, "requests never expire here"),
            ({"approval_ttl": HOUR}, {"escalate_to": "auditors"}, "names no approver group"),
            ({"approval_ttl": HOUR}, {"remind_before": HOUR}, "is not shorter than approval_ttl"),
            ({"approval_ttl": 60}, {"remind_before": 120}, "is not shorter than approval_ttl"),
        ],
    )
    def test_what_cannot_apply_here_is_refused_at_wrap(
        self, settings: dict[str, Any], options: dict[str, Any], message: str
    ) -> None:
        """No expiry, an unknown group, or a reminder before the request is made: refused."""
        sagacity = _sagacity(approver_groups=[LEADS], **settings)

        @compensable(reversibility=Reversibility.IRREVERSIBLE, **options)
        def pay(amount: str) -> str:
            return amount

        with pytest.raises(ConfigurationError, match=message) as refused:
            sagacity.wrap(pay)
        assert "tool 'pay'" in str(refused.value)

    def test_only_irreversible_tools_declare_it(self) -> None:
        """A compensatable tool never waits for approval: remind_before on it is a mistake."""
        sagacity = _sagacity(approval_ttl=HOUR)

        @compensable(by=lambda ctx: None, remind_before=60)
        def book(ref: str) -> str:
            return ref

        with pytest.raises(ConfigurationError, match="only IRREVERSIBLE calls wait"):
            sagacity.wrap(book)

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"name": "Treasury", "members": ["carol"], "ttl": 60}, "its name must be"),
            ({"name": "a b", "members": ["carol"], "ttl": 60}, "its name must be"),
            ({"name": "leads", "members": [], "ttl": 60}, "needs 1 to 1000 members"),
            ({"name": "leads", "members": "carol", "ttl": 60}, "not the string"),
            ({"name": "leads", "members": [" carol"], "ttl": 60}, "spaces around it"),
            ({"name": "leads", "members": [""], "ttl": 60}, "must name a person"),
            ({"name": "leads", "members": ["carol"], "ttl": 0}, "ttl must be a positive"),
            ({"name": "leads", "members": ["carol"], "ttl": "1h"}, "ttl must be a timedelta"),
        ],
    )
    def test_a_bad_group_is_refused(self, options: dict[str, Any], message: str) -> None:
        """An approver group is checked where it is made."""
        with pytest.raises(ConfigurationError, match=message):
            ApproverGroup(**options)

    def test_two_groups_with_one_name_are_refused(self) -> None:
        """Which members count must not depend on the order of the list."""
        with pytest.raises(ConfigurationError, match="names group 'treasury-leads' twice"):
            _sagacity(approver_groups=[LEADS, LEADS])


def _sagacity(**options: Any) -> Sagacity:
    return Sagacity.from_url("memory://", **options)
