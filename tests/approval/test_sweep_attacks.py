"""The sweep under attack: racing processes, decisions mid-sweep, clocks, bad groups, kill -9.

Each test keeps one way the reminder and escalation sweep could act twice, act on a
decided request, lose an entry, hold a saga, or accept a configuration that can never
work.
"""

from __future__ import annotations

import datetime
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sagacity import (
    ApprovalError,
    ApprovalRequest,
    ApproverGroup,
    ConfigurationError,
    Escalator,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaTool,
    compensable,
    verify,
)
from sagacity._history import SagaHistory
from sagacity.testing import FakeClock
from tests.approval._policy import OpenSagacity
from tests.approval._sweep_child import HOUR, LEADS, START, Wires
from tests.processes._kill import ROOT, kill, running_until

SAGA = "wire-1"
CHILD = "tests.approval._sweep_child"


def _start(sagacity: Sagacity, tools: dict[str, SagaTool], saga_id: str = SAGA) -> ApprovalRequest:
    result = sagacity.saga(saga_id, lambda: tools["wire"](amount="10.00"), started_by="alice")
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    (request,) = result.pending
    return request


def _phases(sagacity: Sagacity, saga_id: str = SAGA) -> list[str]:
    return [e.phase.value for e in sagacity.history(saga_id)]


def _tools(sagacity: Sagacity) -> dict[str, SagaTool]:
    return {t.name: t for t in sagacity.wrap(Wires())}


class TestDecidedMidSweep:
    """A decision lands between the sweep's read of the journal and its append."""

    def _deciding_on_read(
        self, sweeper: Sagacity, decide: Callable[[], object], read: int
    ) -> list[int]:
        """Make the sweeper's `read`th journal read of the saga run `decide` right after it."""
        real = sweeper.approval.history
        reads = [0]

        def history(saga_id: str) -> SagaHistory:
            found = real(saga_id)
            reads[0] += 1
            if reads[0] == read:
                decide()
            return found

        sweeper.approval.history = history  # type: ignore[method-assign]
        return reads

    @pytest.mark.parametrize("read", [1, 2], ids=["before-the-lease", "under-the-lease"])
    def test_no_reminder_after_an_approval(self, open_sagacity: OpenSagacity, read: int) -> None:
        """Approved after the sweep read the journal: no REMINDED follows, no hook is told."""
        clock = FakeClock(START)
        told: list[ApprovalRequest] = []
        sweeper = open_sagacity(
            approval_ttl=HOUR,
            clock=clock,
            approver_groups=[LEADS],
            on_approval_reminder=told.append,
        )
        approver = open_sagacity(approval_ttl=HOUR, clock=clock, approver_groups=[LEADS])
        tools = _tools(sweeper)
        _tools(approver)
        _start(sweeper, tools)
        clock.advance(minutes=55)
        reads = self._deciding_on_read(
            sweeper, lambda: approver.approve(SAGA, approver="bob"), read
        )
        assert Escalator(sweeper).sweep() == []
        assert reads[0] >= read  # the approval landed where it was meant to
        assert Escalator(sweeper).sweep() == []
        assert _phases(sweeper) == ["AWAITING_APPROVAL", "APPROVED"]
        assert told == []
        assert sweeper.resume_saga(SAGA).value == "wire-10.00"

    @pytest.mark.parametrize("read", [1, 2], ids=["before-the-lease", "under-the-lease"])
    def test_no_escalation_of_an_approved_request(
        self, open_sagacity: OpenSagacity, read: int
    ) -> None:
        """At expiry, approved by a process whose clock is a second behind: no ESCALATED."""
        clock = FakeClock(START)
        behind = FakeClock(START)
        sweeper = open_sagacity(approval_ttl=HOUR, clock=clock, approver_groups=[LEADS])
        approver = open_sagacity(approval_ttl=HOUR, clock=behind, approver_groups=[LEADS])
        tools = _tools(sweeper)
        _tools(approver)
        _start(sweeper, tools)
        clock.advance(HOUR)
        behind.advance(HOUR - 1)
        # The reminder is due too: let it be journaled first, as a sweep an hour ago would.
        self._deciding_on_read(sweeper, lambda: approver.approve(SAGA, approver="bob"), read)
        assert [a.action for a in Escalator(sweeper).sweep()] == []
        assert [a.action for a in Escalator(sweeper).sweep()] == []
        assert "ESCALATED" not in _phases(sweeper)
        assert "REMINDED" not in _phases(sweeper)
        assert _phases(sweeper)[-1] == "APPROVED"

    def test_no_escalation_of_a_rejected_request(self, open_sagacity: OpenSagacity) -> None:
        """Rejected while the sweep escalates it: the REJECTED stands, nothing follows.

        A rejection takes the saga's lease, so it can land only before the sweep holds it.
        """
        clock = FakeClock(START)
        sweeper = open_sagacity(approval_ttl=HOUR, clock=clock, approver_groups=[LEADS])
        decider = open_sagacity(approval_ttl=HOUR, clock=clock, approver_groups=[LEADS])
        tools = _tools(sweeper)
        _tools(decider)
        _start(sweeper, tools)
        clock.advance(minutes=55)
        assert [a.action for a in Escalator(sweeper).sweep()] == ["reminded"]
        clock.advance(minutes=5)

        def reject() -> None:
            decider.reject(SAGA, approver="bob", reason="not now")

        self._deciding_on_read(sweeper, reject, 1)
        assert Escalator(sweeper).sweep() == []
        assert Escalator(sweeper).sweep() == []
        assert _phases(sweeper) == ["AWAITING_APPROVAL", "REMINDED", "REJECTED", "ENDED"]


class TestHookOutsideTheLease:
    def test_the_hook_runs_with_the_saga_free(self, open_sagacity: OpenSagacity) -> None:
        """Inside on_approval_reminder another process can take the saga's lease."""
        clock = FakeClock(START)
        other = open_sagacity(approval_ttl=HOUR, clock=clock, approver_groups=[LEADS])
        taken: list[str] = []

        def hook(request: ApprovalRequest) -> None:
            with other._leased(request.saga_id, wait=0):
                taken.append(request.saga_id)

        sweeper = open_sagacity(
            approval_ttl=HOUR, clock=clock, approver_groups=[LEADS], on_approval_reminder=hook
        )
        tools = _tools(sweeper)
        _start(sweeper, tools)
        clock.advance(minutes=55)
        assert [a.action for a in Escalator(sweeper).sweep()] == ["reminded"]
        assert taken == [SAGA]

    def test_a_hanging_hook_holds_neither_the_saga_nor_the_sweep(
        self, open_sagacity: OpenSagacity, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The sweep returns after its timeout; the saga is approved and resumed meanwhile."""
        clock = FakeClock(START)
        release, returned = threading.Event(), threading.Event()
        told: list[str] = []

        def hook(request: ApprovalRequest) -> None:
            told.append(request.saga_id)
            release.wait()
            returned.set()

        sweeper = open_sagacity(
            approval_ttl=HOUR, clock=clock, approver_groups=[LEADS], on_approval_reminder=hook
        )
        other = open_sagacity(approval_ttl=HOUR, clock=clock, approver_groups=[LEADS])
        tools = _tools(sweeper)
        _tools(other)
        _start(sweeper, tools)
        _start(sweeper, tools, "wire-2")
        clock.advance(minutes=55)
        try:
            with caplog.at_level(logging.WARNING, logger="sagacity"):
                acted = Escalator(sweeper, hook_timeout=0.2).sweep()
                assert sorted((a.saga_id, a.action) for a in acted) == [
                    (SAGA, "reminded"),
                    ("wire-2", "reminded"),
                ]
                assert "did not return within 0.2 s" in caplog.text
                # The next sweep does not wait for a hook known to hang.
                assert Escalator(sweeper, hook_timeout=30).sweep() == []
            other.approve(SAGA, approver="bob")
            assert other.resume_saga(SAGA).value == "wire-10.00"
        finally:
            release.set()
        assert returned.wait(10)
        assert told[0] == SAGA


class TestThreadsOfOneSagacity:
    def test_four_sweeps_at_once_act_once(self, open_sagacity: OpenSagacity) -> None:
        """Four threads sweeping one Sagacity at each time point act once on each saga.

        One of them leaves denials to a worker; each saga is reminded, escalated, reminded
        and denied once, and each reminder's hook told once.
        """
        clock = FakeClock(START)
        told: list[str] = []
        sweeper = open_sagacity(
            approval_ttl=HOUR,
            clock=clock,
            approver_groups=[LEADS],
            on_approval_reminder=lambda r: told.append(r.saga_id),
        )
        tools = _tools(sweeper)
        sagas = [f"wire-{n:02}" for n in range(8)]
        for saga_id in sagas:
            _start(sweeper, tools, saga_id)
        for minutes, action in (
            (55, "reminded"),
            (5, "escalated"),
            (25, "reminded"),
            (5, "denied"),
        ):
            clock.advance(minutes=minutes)
            acted = _sweep_at_once(sweeper, [True, True, False, True])
            acted.extend((a.saga_id, a.action) for a in Escalator(sweeper).sweep())
            assert sorted(acted) == [(saga_id, action) for saga_id in sagas]
        assert sorted(told) == sorted(sagas * 2)

    @pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "10"])
    def test_a_hook_timeout_that_is_no_duration_is_refused(self, timeout: Any) -> None:
        """Escalator(hook_timeout=) must be a positive number of seconds."""
        with pytest.raises(ConfigurationError, match="hook_timeout must be a positive number"):
            Escalator(Sagacity.from_url("memory://"), hook_timeout=timeout)


def _sweep_at_once(sagacity: Sagacity, denies: list[bool]) -> list[tuple[str, str]]:
    """Sweep `sagacity` from one thread per entry of `denies`, all at once; what they did."""
    barrier = threading.Barrier(len(denies))
    acted: list[tuple[str, str]] = []
    errors: list[BaseException] = []

    def sweep(deny: bool) -> None:
        try:
            barrier.wait()
            acted.extend((a.saga_id, a.action) for a in Escalator(sagacity).sweep(deny=deny))
        except BaseException as error:  # surfaced below, on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=sweep, args=(deny,)) for deny in denies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return acted


class TestClocks:
    def test_processes_in_other_time_zones_remind_once(self, open_sagacity: OpenSagacity) -> None:
        """A request made at +05:30, swept at -08:00 and at UTC: each step once, in UTC."""
        base = FakeClock(START)
        india = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
        pacific = datetime.timezone(datetime.timedelta(hours=-8))
        made = open_sagacity(
            approval_ttl=HOUR, clock=lambda: base().astimezone(india), approver_groups=[LEADS]
        )
        sweepers = [
            open_sagacity(
                approval_ttl=HOUR, clock=lambda: base().astimezone(pacific), approver_groups=[LEADS]
            ),
            open_sagacity(approval_ttl=HOUR, clock=base, approver_groups=[LEADS]),
        ]
        tools = _tools(made)
        for each in sweepers:
            _tools(each)
        _start(made, tools)
        acted = []
        for minutes in (55, 5, 25):
            base.advance(minutes=minutes)
            for each in sweepers * 2:
                acted.extend(a.action for a in Escalator(each).sweep())
        assert acted == ["reminded", "escalated", "reminded"]
        assert _phases(made) == ["AWAITING_APPROVAL", "REMINDED", "ESCALATED", "REMINDED"]
        (escalated,) = [e.payload for e in made.history(SAGA) if e.phase.value == "ESCALATED"]
        assert isinstance(escalated, dict)
        assert escalated["escalated_at"] == "2026-03-06T18:00:00+00:00"
        assert escalated["expires_at"] == "2026-03-06T18:30:00+00:00"
        assert escalated["remind_at"] == "2026-03-06T18:20:00+00:00"

    def test_the_journal_wins_over_a_clock_that_is_behind(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """Escalated by a process ahead: one behind refuses a non-member, as the journal says.

        Its clock says the request has not expired yet; the ESCALATED entry wins.
        """
        ahead = FakeClock(START)
        behind = FakeClock(START)
        sweeper = open_sagacity(approval_ttl=HOUR, clock=ahead, approver_groups=[LEADS])
        late = open_sagacity(approval_ttl=HOUR, clock=behind, approver_groups=[LEADS])
        tools = _tools(sweeper)
        _tools(late)
        _start(sweeper, tools)
        ahead.advance(HOUR)
        behind.advance(HOUR - 120)
        assert [a.action for a in Escalator(sweeper).sweep()] == ["escalated"]
        with pytest.raises(ApprovalError, match="not a member"):
            late.approve(SAGA, approver="bob")
        late.approve(SAGA, approver="carol")
        assert _phases(late)[-2:] == ["ESCALATED", "APPROVED"]

    def test_a_clock_that_turns_naive_is_refused_by_the_sweep(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """A clock that turns naive after construction: ConfigurationError, not TypeError.

        Nothing is journaled.
        """
        times = [START]
        sweeper = open_sagacity(approval_ttl=HOUR, clock=lambda: times[-1], approver_groups=[LEADS])
        tools = _tools(sweeper)
        _start(sweeper, tools)
        times.append((START + datetime.timedelta(minutes=55)).replace(tzinfo=None))
        with pytest.raises(ConfigurationError, match="clock returned"):
            Escalator(sweeper).sweep()
        assert _phases(sweeper) == ["AWAITING_APPROVAL"]


class TestGroupConfiguration:
    def test_members_from_a_generator(self) -> None:
        """Members given as a generator are read once, not checked then lost."""
        group = ApproverGroup(name="leads", members=(m for m in ["carol", "dave"]), ttl=60)
        assert group.members == ("carol", "dave")

    @pytest.mark.parametrize(
        ("members", "message"),
        [
            ([], r"'leads': members: it needs 1 to 1000 members, not 0"),
            (None, r"'leads': members must be a list of principals, not NoneType"),
            (7, r"'leads': members must be a list of principals, not int"),
            (b"carol", r"'leads': members must be a list of principals, not the string"),
            ([None], r"'leads': member must name a person"),
        ],
    )
    def test_unusable_members_are_refused_naming_the_field(
        self, members: Any, message: str
    ) -> None:
        """An empty group, or members that are no principals: ConfigurationError, not TypeError."""
        with pytest.raises(ConfigurationError, match=message):
            ApproverGroup(name="leads", members=members, ttl=60)

    def test_one_principal_spelled_twice_is_one_member(self) -> None:
        """'Carol' and 'carol' are one approver, as approvals count them."""
        group = ApproverGroup(name="leads", members=["Carol", "carol", "dave"], ttl=60)
        assert group.members == ("Carol", "dave")

    def test_a_ttl_past_any_date_is_refused(self) -> None:
        """A ttl whose expiry no clock could compute is refused where it is made."""
        with pytest.raises(ConfigurationError, match="'leads': ttl must be at most 3660 days"):
            ApproverGroup(name="leads", members=["carol"], ttl=1e13)
        assert ApproverGroup(name="leads", members=["carol"], ttl=3660 * 86400).ttl.days == 3660

    def test_a_group_smaller_than_the_approvers_is_refused_at_wrap(self) -> None:
        """Two approvers needed, one member in the group: no escalated request could pass."""
        sagacity = Sagacity.from_url(
            "memory://",
            approval_ttl=HOUR,
            approver_groups=[ApproverGroup(name="leads", members=["carol"], ttl=60)],
        )

        @compensable(reversibility=Reversibility.IRREVERSIBLE, approvers=2, escalate_to="leads")
        def pay(amount: str) -> str:
            return amount

        with pytest.raises(
            ConfigurationError, match=r"tool 'pay': escalate_to='leads'.*approvers=2"
        ):
            sagacity.wrap(pay)

    def test_a_gate_escalating_to_a_group_smaller_than_its_approvers_is_refused(self) -> None:
        """A workflow gate whose stage needs two approvers cannot escalate to one member."""
        from sagacity.workflows import WorkflowRuntime, gate, stage, workflow

        @workflow("pay-two", description="Pay with two approvers")
        class PayTwo:
            @stage(order=1)
            @gate(reason="money leaves", timeout_seconds=3600, escalate_to="leads")
            @compensable(reversibility=Reversibility.IRREVERSIBLE, approvers=2)
            def pay(self, amount: str) -> str:
                """Pay."""
                return amount

        sagacity = Sagacity.from_url(
            "memory://",
            approver_groups=[ApproverGroup(name="leads", members=["carol"], ttl=60)],
        )
        with pytest.raises(ConfigurationError, match=r"stage 'pay'.*escalate_to='leads'"):
            WorkflowRuntime(sagacity, workflows=[PayTwo()])


class TestReadsOnlyWhatIsDue:
    def test_a_pass_reads_the_journals_of_the_due_requests(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """After a first read of each of 20 requests, a pass reads only the ones due.

        The requests are made a minute apart; none is read again until its time comes.
        """
        clock = FakeClock(START)
        sweeper = open_sagacity(approval_ttl=HOUR, clock=clock, approver_groups=[LEADS])
        tools = _tools(sweeper)
        for n in range(20):
            _start(sweeper, tools, f"wire-{n:02}")
            clock.advance(minutes=1)
        real = sweeper.approval.history
        read: list[str] = []

        def history(saga_id: str) -> SagaHistory:
            read.append(saga_id)
            return real(saga_id)

        sweeper.approval.history = history  # type: ignore[method-assign]
        assert Escalator(sweeper).sweep() == []
        assert len(read) == 20
        read.clear()
        assert Escalator(sweeper).sweep() == []
        assert read == []
        clock.advance((START + datetime.timedelta(minutes=50) - clock()).total_seconds())
        assert [a.saga_id for a in Escalator(sweeper).sweep()] == ["wire-00"]
        assert set(read) == {"wire-00"}
        read.clear()
        assert Escalator(sweeper).sweep() == []
        assert Escalator(sweeper).sweep() == []
        assert read == ["wire-00"]  # read again once, to learn its next time: the expiry

    def test_a_step_another_process_took_is_read_at_the_time_it_was_due(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """Two sweepers taking turns: each step is journaled once, whoever's turn it was."""
        clock = FakeClock(START)
        told: list[str] = []
        both = [
            open_sagacity(
                approval_ttl=HOUR,
                clock=clock,
                approver_groups=[LEADS],
                on_approval_reminder=lambda r: told.append(r.saga_id),
            )
            for _ in range(2)
        ]
        tools = _tools(both[0])
        _tools(both[1])
        _start(both[0], tools)
        for each in both:
            assert Escalator(each).sweep() == []
        acted = []
        for turn, minutes in enumerate((55, 5, 25, 5)):
            clock.advance(minutes=minutes)
            acted.extend(a.action for a in Escalator(both[turn % 2]).sweep())
            acted.extend(a.action for a in Escalator(both[(turn + 1) % 2]).sweep())
        assert acted == ["reminded", "escalated", "reminded", "denied"]
        assert told == [SAGA, SAGA]
        assert _phases(both[0])[:4] == ["AWAITING_APPROVAL", "REMINDED", "ESCALATED", "REMINDED"]
        assert _phases(both[0]).count("REJECTED") == 1


def _child(mode: str, url: str, at: datetime.datetime, *more: str) -> list[str]:
    return [sys.executable, "-m", CHILD, mode, url, at.isoformat(), *more]


def _waiting(url: str, count: int) -> Iterator[Sagacity]:
    sagacity = Sagacity.from_url(
        url, approval_ttl=HOUR, clock=FakeClock(START), approver_groups=[LEADS]
    )
    tools = _tools(sagacity)
    for n in range(count):
        _start(sagacity, tools, f"wire-{n:02}")
    yield sagacity


@pytest.mark.slow
class TestTwoSweeperProcesses:
    def _race(self, url: str, at: datetime.datetime) -> list[dict[str, Any]]:
        children = [
            subprocess.Popen(
                _child("race", url, at),
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            for child in children:
                assert child.stdout is not None
                line = child.stdout.readline()
                assert line == "ready\n", child.stderr.read() if child.stderr else line
            for child in children:
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            said = []
            for child in children:
                out, err = child.communicate(timeout=120)
                assert child.returncode == 0, err
                said.append(json.loads(out))
            return said
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()

    def test_each_step_is_journaled_once(self, shared_store_url: str) -> None:
        """Two processes sweeping 8 sagas at once journal each reminder and escalation once.

        Each reminder's hook is told once, in one of them; a third sweep finds nothing.
        """
        sagas = [f"wire-{n:02}" for n in range(8)]
        for sagacity in _waiting(shared_store_url, len(sagas)):
            try:
                for at, action, phase in (
                    (START + datetime.timedelta(minutes=55), "reminded", "REMINDED"),
                    (START + datetime.timedelta(minutes=60), "escalated", "ESCALATED"),
                ):
                    said = self._race(shared_store_url, at)
                    acted = sorted(tuple(a) for s in said for a in s["acted"])
                    assert acted == [(saga, action) for saga in sagas]
                    if action == "reminded":
                        assert sorted(t for s in said for t in s["told"]) == sagas
                    for saga in sagas:
                        assert _phases(sagacity, saga).count(phase) == 1
                    late = Sagacity.from_url(
                        shared_store_url,
                        approval_ttl=HOUR,
                        clock=FakeClock(at),
                        approver_groups=[LEADS],
                    )
                    try:
                        _tools(late)
                        assert Escalator(late).sweep() == []
                    finally:
                        late.close()
                assert verify(sagacity.journal).ok
            finally:
                sagacity.close()


@pytest.mark.slow
class TestKilledSweeper:
    @pytest.mark.parametrize(
        ("mode", "said"),
        [("kill-in-lease", "reminded wire-01"), ("kill-in-hook", "told wire-01")],
        ids=["holding-the-lease", "in-the-hook"],
    )
    def test_nothing_lost_nothing_twice(self, shared_store_url: str, mode: str, said: str) -> None:
        """A sweeper killed after its second REMINDED: the next reminds the rest, none twice.

        Killed holding the saga's lease, or inside the hook; the chain verifies.
        """
        sagas = [f"wire-{n:02}" for n in range(5)]
        at = START + datetime.timedelta(minutes=55)
        for sagacity in _waiting(shared_store_url, len(sagas)):
            try:
                with running_until(_child(mode, shared_store_url, at, "2"), said) as child:
                    kill(child)
                assert [_phases(sagacity, s).count("REMINDED") for s in sagas] == [1, 1, 0, 0, 0]
                after = Sagacity.from_url(
                    shared_store_url,
                    approval_ttl=HOUR,
                    clock=FakeClock(at),
                    approver_groups=[LEADS],
                )
                try:
                    _tools(after)
                    acted = [(a.saga_id, a.action) for a in Escalator(after).sweep()]
                    assert acted == [(s, "reminded") for s in sagas[2:]]
                    assert Escalator(after).sweep() == []
                finally:
                    after.close()
                assert [_phases(sagacity, s).count("REMINDED") for s in sagas] == [1] * 5
                assert verify(sagacity.journal).ok
            finally:
                sagacity.close()
