"""A retried activity is the same call: replayed when it ran, in doubt when nobody knows."""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from sagacity import (
    CompensationContext,
    Evidence,
    ReconcileContext,
    Reconciled,
    Sagacity,
    compensable,
    compensation,
)
from sagacity.integrations.temporal import CallInput, SagaActivities
from sagacity.integrations.temporal._wire import DecisionInput
from tests._shop import Shop, journal_intent


def environment(saga_id: str, *, attempt: int = 1) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=saga_id, attempt=attempt)
    return env


def test_an_activity_retried_after_its_call_ran_replays_the_journaled_result(
    sagacity: Sagacity,
) -> None:
    shop = Shop()
    activities = SagaActivities(sagacity, [shop])
    tool = activities.tools["charge_card"]
    call = CallInput(
        tool="charge_card", call_id="charge_card-1", arguments={"amount": "9", "card": "4242"}
    )
    first = environment("s-1").run(activities.call, tool, call)
    again = environment("s-1", attempt=2).run(activities.call, tool, call)
    assert first.result == again.result == "ch-9"
    assert shop.calls["charge_card"] == 1
    assert [e.phase.value for e in sagacity.history("s-1")] == ["INTENT", "EXECUTED"]


def test_an_activity_retried_after_a_crash_between_intent_and_outcome_is_in_doubt(
    sagacity: Sagacity,
) -> None:
    shop = Shop()
    activities = SagaActivities(sagacity, [shop])
    journal_intent(sagacity, "s-2", "reserve_inventory-1", tool_input={"sku": "A-1", "qty": 2})
    call = CallInput(
        tool="reserve_inventory", call_id="reserve_inventory-1", arguments={"sku": "A-1", "qty": 2}
    )
    with pytest.raises(ApplicationError) as refused:
        environment("s-2", attempt=2).run(
            activities.call, activities.tools["reserve_inventory"], call
        )
    assert refused.value.type == "SagacityInDoubt"
    assert refused.value.non_retryable
    assert shop.calls["reserve_inventory"] == 0  # never run again blindly


def test_an_activity_given_another_tools_call_is_refused(sagacity: Sagacity) -> None:
    activities = SagaActivities(sagacity, [Shop()])
    call = CallInput(tool="ship", call_id="ship-1", arguments={"order_id": "o"})
    with pytest.raises(ApplicationError, match="was given a call of 'ship'"):
        environment("s-3").run(activities.call, activities.tools["charge_card"], call)
    assert sagacity.history("s-3") == []


class Payments:
    """A charge whose provider can be asked, by idempotency key, whether it took it."""

    def __init__(self, taken: dict[str, str]) -> None:
        self.taken = taken  # the provider's charges by key
        self.ran = 0

    @compensable(by="refund", reconcile="find_charge")
    def charge(self, amount: str) -> str:
        self.ran += 1
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        """Refund the charge."""

    def find_charge(self, ctx: ReconcileContext) -> Reconciled:
        found = self.taken.get(ctx.call_id)
        evidence = Evidence.of(f"charges?key={ctx.call_id}", (found or "none").encode())
        if found is None:
            return Reconciled.did_not_land(evidence=evidence)
        return Reconciled.landed(found, evidence=evidence)


@pytest.mark.parametrize(
    ("taken", "result", "ran"),
    [({"charge-1": "ch-provider"}, "ch-provider", 0), ({}, "ch-9", 1)],
    ids=["landed", "did-not-land"],
)
def test_a_retried_activity_in_doubt_asks_the_tools_reconciler_first(
    sagacity: Sagacity, taken: dict[str, str], result: str, ran: int
) -> None:
    payments = Payments(taken)
    activities = SagaActivities(sagacity, [payments])
    journal_intent(sagacity, "s-4", "charge-1", tool_name="charge", tool_input={"amount": "9"})
    call = CallInput(tool="charge", call_id="charge-1", arguments={"amount": "9"})
    output = environment("s-4", attempt=2).run(activities.call, activities.tools["charge"], call)
    assert (output.result, payments.ran) == (result, ran)
    phases = [e.phase.value for e in sagacity.history("s-4")]
    assert phases[:2] == ["INTENT", "RECONCILED"]


def test_the_decision_activity_answers_the_calls_newest_request(sagacity: Sagacity) -> None:
    """Pending until decided; an edited request is pending again until its replacement is."""
    activities = SagaActivities(sagacity, [Shop()])
    (decision,) = [a for a in activities.all if a.__name__ == "decision"]
    wire = CallInput(
        tool="send_wire_transfer",
        call_id="send_wire_transfer-1",
        arguments={"amount": "40.00", "to": "ACME"},
    )
    for sid, decide, answer in [
        ("s-approve", lambda sid: sagacity.approve(sid, approver="alice"), "approved"),
        ("s-reject", lambda sid: sagacity.reject(sid, approver="alice", reason="no"), "rejected"),
    ]:
        env = environment(sid)
        asked = env.run(activities.call, activities.tools["send_wire_transfer"], wire)
        assert asked.request_id is not None
        ask = DecisionInput(call_id=wire.call_id, request_id=asked.request_id)
        assert env.run(decision, ask) == "pending"
        sagacity.edit(sid, approver="bob", new_input={"amount": "35.00", "to": "ACME"})
        assert env.run(decision, ask) == "pending"  # the replacement waits for its own
        decide(sid)
        assert env.run(decision, ask) == answer
