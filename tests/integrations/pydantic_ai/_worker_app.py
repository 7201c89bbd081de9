"""The application a worker process runs for the PydanticAI resume tests.

`sagacity worker --app tests.integrations.pydantic_ai._worker_app:worker`: the bank's
tools, the agent on a scripted model whose turn follows from the messages, and its
resumer, which reads each paused run's messages from the folder the test process saved
them in (`<saga>.json`) and writes the final output beside them (`<saga>.out`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.run import AgentRunResult

from sagacity import Decision, Sagacity
from sagacity.integrations.pydantic_ai import RESUMER, PydanticAIResumer, saga_toolset
from sagacity.worker import Worker
from tests.integrations._bank import STATES, Bank
from tests.integrations.pydantic_ai._agents import call

SCRIPT = [
    call("place_hold", "call-h", account="ACME-ops", amount="250.00"),
    call("send_wire_transfer", "call-w", amount="250.00", to="ACME"),
]


def teller(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A hold, then the wire; then it repeats the last tool result it was given."""
    returns = [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if len(returns) < len(SCRIPT):
        return ModelResponse(parts=[SCRIPT[len(returns)]])
    return ModelResponse(parts=[TextPart(f"The bank says: {returns[-1].content}")])


def bank_agent(sagacity: Sagacity) -> Agent[None, Any]:
    """The agent: the scripted teller and the bank's tools; a pause ends the run deferred."""
    return Agent(
        FunctionModel(teller),
        toolsets=[saga_toolset(sagacity, Bank())],
        output_type=[str, DeferredToolRequests],
    )


def worker() -> Worker:
    """The worker: a decision runs the agent on with PydanticAI's `DeferredToolResults`."""
    folder = Path(os.environ[STATES])
    sagacity = Sagacity.from_url(os.environ["SAGACITY_DATABASE_URL"])

    def load_messages(decision: Decision) -> bytes:
        return (folder / f"{decision.saga_id}.json").read_bytes()

    def saved(decision: Decision, result: AgentRunResult[Any]) -> None:
        (folder / f"{decision.saga_id}.out").write_text(str(result.output), "utf-8")

    resumer = PydanticAIResumer(bank_agent(sagacity), load_messages, saved=saved)
    return Worker(sagacity, {RESUMER: resumer}, poll_interval=0.05)
