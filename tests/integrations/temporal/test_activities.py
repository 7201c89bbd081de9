"""A retried activity is the same call: replayed when it ran, in doubt when nobody knows."""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from sagacity import Sagacity
from sagacity.integrations.temporal import CallInput, SagaActivities
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
