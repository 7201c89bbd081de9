"""A workflow gate reminded before its timeout, escalated at it, and failed at the group's.

Gates use the tools' mechanism: the gate's timeout is its request's expiry, and
`expire_gates` sweeps reminders and escalations before it fails the runs whose time ran
out.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from sagacity import (
    ApprovalError,
    ApprovalRequest,
    ApproverGroup,
    CompensationContext,
    ConfigurationError,
    Phase,
    Sagacity,
    compensable,
    compensation,
)
from sagacity.testing import FakeClock
from sagacity.workflows import WorkflowRuntime, WorkflowStatus, gate, stage, workflow

LEADS = ApproverGroup(name="payout-leads", members=["carol"], ttl=600)


@workflow("supplier-payout", description="Pay a supplier")
class SupplierPayout:
    """Hold the funds, then pay behind a gate that reminds and escalates."""

    def __init__(self) -> None:
        self.log: list[str] = []

    @stage(order=1)
    @compensable(by="release")
    def hold(self, amount: str) -> str:
        """Hold the funds."""
        self.log.append(f"hold {amount}")
        return amount

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @stage(order=2)
    @gate(
        reason="money leaves the bank",
        timeout_seconds=3600,
        remind_before=300,
        escalate_to="payout-leads",
    )
    def pay(self, amount: str) -> str:
        """Pay it."""
        self.log.append(f"pay {amount}")
        return f"paid {amount}"


class Desk:
    """A runtime on a fake clock, with the reminders it sent."""

    def __init__(self, store_url: str) -> None:
        self.clock = FakeClock(datetime.datetime(2026, 3, 6, 9, 0, tzinfo=datetime.UTC))
        self.reminded: list[ApprovalRequest] = []
        self.sagacity = Sagacity.from_url(
            store_url,
            clock=self.clock,
            approver_groups=[LEADS],
            on_approval_reminder=self.reminded.append,
        )
        self.payout = SupplierPayout()
        self.runtime = WorkflowRuntime(self.sagacity, workflows=[self.payout])

    def phases(self, run_id: str) -> list[str]:
        return [e.phase.value for e in self.sagacity.history(run_id)]


@pytest.fixture
def desk(store_url: str) -> Iterator[Desk]:
    """The payout runtime on each backend."""
    opened = Desk(store_url)
    yield opened
    opened.sagacity.close()


class TestGateEscalation:
    def test_reminded_escalated_then_failed_and_compensated(self, desk: Desk) -> None:
        """5 minutes before the timeout a reminder; at it the group; at theirs, compensated."""
        run = desk.runtime.start("supplier-payout", "900.00")
        (request,) = desk.sagacity.pending(run.run_id)
        assert request.remind_at == datetime.datetime(2026, 3, 6, 9, 55, tzinfo=datetime.UTC)
        assert request.expires_at == datetime.datetime(2026, 3, 6, 10, 0, tzinfo=datetime.UTC)
        desk.clock.advance(minutes=55)
        assert desk.runtime.expire_gates() == []
        assert desk.phases(run.run_id)[-1] == "REMINDED"
        desk.clock.advance(minutes=5)
        assert desk.runtime.expire_gates() == []  # escalated, not failed
        assert desk.phases(run.run_id)[-1] == "ESCALATED"
        (escalated,) = desk.runtime.pending_gates(run.run_id)
        assert desk.runtime.get(run.run_id).status is WorkflowStatus.PAUSED_AT_GATE
        desk.clock.advance(minutes=5)
        assert desk.runtime.expire_gates() == []
        assert desk.phases(run.run_id)[-1] == "REMINDED"
        assert [r.escalation is not None for r in desk.reminded] == [False, True]
        desk.clock.advance(minutes=5)
        (expired,) = desk.runtime.expire_gates()
        assert expired.status is WorkflowStatus.COMPENSATED
        assert desk.payout.log == ["hold 900.00", "release 900.00"]
        assert escalated.request_id == request.request_id

    def test_only_the_group_approves_the_escalated_gate(self, desk: Desk) -> None:
        """After the escalation bob is refused; carol's approval lets the stage run."""
        run = desk.runtime.start("supplier-payout", "900.00")
        desk.clock.advance(minutes=60)
        desk.runtime.expire_gates()
        with pytest.raises(ApprovalError, match="not a member"):
            desk.runtime.approve_gate(run.run_id, "pay", "bob")
        desk.runtime.approve_gate(run.run_id, "pay", "carol")
        desk.clock.advance(minutes=5)  # approved in time: the timeout no longer fails it
        assert desk.runtime.expire_gates() == []
        done = desk.runtime.resume(run.run_id)
        assert done.status is WorkflowStatus.COMPLETED
        assert desk.payout.log == ["hold 900.00", "pay 900.00"]
        phases = desk.phases(run.run_id)
        assert phases.index("ESCALATED") < phases.index("APPROVED")
        (approved,) = [e for e in desk.sagacity.history(run.run_id) if e.phase is Phase.APPROVED]
        assert isinstance(approved.payload, dict)
        assert approved.payload["approver"] == "carol"


class TestGateDeclaration:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"remind_before": 60}, "no timeout_seconds"),
            ({"timeout_seconds": 60, "remind_before": 60}, "not shorter than timeout_seconds"),
            ({"timeout_seconds": 60, "remind_before": -1}, "positive, finite duration"),
            ({"timeout_seconds": 60, "escalate_to": "Ops Team"}, "must name an approver group"),
            ({"timeout_seconds": 60, "escalate_to": "auditors"}, "names no approver group"),
        ],
    )
    def test_what_cannot_apply_is_refused_when_the_runtime_is_built(
        self, options: dict[str, Any], message: str
    ) -> None:
        """The error names the workflow's stage and the field."""

        @workflow("bad-gate", description="A gate declared wrong")
        class BadGate:
            @stage(order=1)
            @gate(**options)
            def pay(self, amount: str) -> str:
                """Pay."""
                return amount

        sagacity = Sagacity.from_url("memory://", approver_groups=[LEADS])
        with pytest.raises(ConfigurationError, match=message) as refused:
            WorkflowRuntime(sagacity, workflows=[BadGate()])
        assert "pay" in str(refused.value)
