"""What initiated a call: the agent's model, run id and name, as PydanticAI's RunContext says."""

from __future__ import annotations

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.function import FunctionModel

from sagacity import Phase, Sagacity, SagaOutcome
from sagacity.integrations.pydantic_ai import saga_toolset
from tests.integrations.pydantic_ai._agents import OrderTools, ScriptedModel, call

WIRE = {"amount": "2500.00", "to": "DE89 3704 0044 0532 0130 00"}


async def test_the_request_and_its_decision_record_model_run_and_agent(
    sagacity: Sagacity,
) -> None:
    """The real loop on a scripted model named `scripted-gpt`, run id `run-77`."""
    script = ScriptedModel([call("send_wire", "call-w", **WIRE)], "The wire is sent.")
    model = FunctionModel(script._respond, model_name="scripted-gpt")
    agent = Agent(
        model,
        name="payouts",
        toolsets=[saga_toolset(sagacity, OrderTools())],
        output_type=[str, DeferredToolRequests],
    )
    result = await sagacity.asaga(
        "payout-1", lambda: agent.run("Pay the supplier.", run_id="run-77")
    )
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    expected = {
        "by": "agent",
        "adapter": "pydantic_ai",
        "model": "scripted-gpt",
        "run_id": "run-77",
        "agent": "payouts",
    }
    (asked,) = [e for e in sagacity.history("payout-1") if e.phase is Phase.AWAITING_APPROVAL]
    assert asked.payload["initiated_by"] == expected
    assert sagacity.pending("payout-1")[0].initiated_by == expected
    approved = sagacity.approve("payout-1", approver="bob", via="inbox")
    assert approved.payload["initiated_by"] == expected


async def test_a_run_without_a_name_records_what_it_has(sagacity: Sagacity) -> None:
    """No name given: none is recorded, nor guessed; PydanticAI's own run id is."""
    script = ScriptedModel([call("send_wire", "call-w", **WIRE)], "The wire is sent.")
    agent = Agent(
        script.model,
        toolsets=[saga_toolset(sagacity, OrderTools())],
        output_type=[str, DeferredToolRequests],
    )
    await sagacity.asaga("payout-2", lambda: agent.run("Pay the supplier."))
    (asked,) = [e for e in sagacity.history("payout-2") if e.phase is Phase.AWAITING_APPROVAL]
    initiated = asked.payload["initiated_by"]
    assert initiated["model"] == script.model.model_name
    assert isinstance(initiated["run_id"], str)
    assert len(initiated["run_id"]) >= 32  # PydanticAI's UUID7
    assert "agent" not in initiated
