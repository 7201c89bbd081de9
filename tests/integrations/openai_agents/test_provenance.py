"""What initiated a call: the SDK's trace id when tracing is on; nothing it does not expose."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import RunConfig, Runner, set_trace_processors, set_tracing_disabled
from agents.tracing import TracingProcessor

from sagacity import Phase, Reversibility, Sagacity, SagaOutcome, compensable
from sagacity.integrations.openai_agents import function_tools
from tests.integrations.openai_agents._orders import agent_with, call, scripted

TRACE_ID = "trace_" + "7e" * 16


class Payouts:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay_refund(self, amount: int, to: str) -> str:
        """Pay a refund to a customer."""
        return f"paid {amount} to {to}"


class Kept(TracingProcessor):
    """Keeps the traces here: nothing is exported."""

    def __init__(self) -> None:
        self.trace_ids: list[str] = []

    def on_trace_start(self, trace: object) -> None:
        self.trace_ids.append(str(getattr(trace, "trace_id", "")))

    def on_trace_end(self, trace: object) -> None: ...

    def on_span_start(self, span: object) -> None: ...

    def on_span_end(self, span: object) -> None: ...

    def shutdown(self) -> None: ...

    def force_flush(self) -> None: ...


@pytest.fixture
def tracing() -> Iterator[Kept]:
    """Tracing on, into a local processor only; off again afterwards, as conftest has it."""
    kept = Kept()
    set_trace_processors([kept])
    set_tracing_disabled(False)
    yield kept
    set_tracing_disabled(True)


async def run_refund(sagacity: Sagacity, saga_id: str, config: RunConfig | None) -> None:
    model = scripted([call("pay_refund", "call-1", amount=5000, to="bob")])
    agent = agent_with(model, function_tools(sagacity, Payouts()))
    result = await sagacity.asaga(saga_id, lambda: Runner.run(agent, "refund", run_config=config))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL


def initiated(sagacity: Sagacity, saga_id: str) -> object:
    (asked,) = [e for e in sagacity.history(saga_id) if e.phase is Phase.AWAITING_APPROVAL]
    return asked.payload["initiated_by"]


async def test_the_trace_id_of_the_run_is_recorded(sagacity: Sagacity, tracing: Kept) -> None:
    """The run's trace (the id RunConfig names) is the request's and its decision's."""
    await run_refund(sagacity, "refund-1", RunConfig(trace_id=TRACE_ID))
    assert tracing.trace_ids == [TRACE_ID]
    expected = {"by": "agent", "adapter": "openai_agents", "trace_id": TRACE_ID}
    assert initiated(sagacity, "refund-1") == expected
    rejected = sagacity.reject("refund-1", approver="bob", reason="no", via="api")
    assert rejected.outcome is SagaOutcome.COMPENSATED
    (decision,) = [e for e in sagacity.history("refund-1") if e.phase is Phase.REJECTED]
    assert decision.payload["initiated_by"] == expected


async def test_with_tracing_off_nothing_is_guessed(sagacity: Sagacity) -> None:
    """Tracing off (the SDK's no-op trace): the adapter alone, no made-up id."""
    await run_refund(sagacity, "refund-2", RunConfig(trace_id=TRACE_ID))
    assert initiated(sagacity, "refund-2") == {"by": "agent", "adapter": "openai_agents"}
