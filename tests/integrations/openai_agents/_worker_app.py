"""The application a worker process runs for the OpenAI Agents resume tests.

`sagacity worker --app tests.integrations.openai_agents._worker_app:worker`: the bank's
tools, the agent, and its resumer, which reads each paused run's state from the folder
the test process saved it in (`<saga>.state`) and writes the final output beside it
(`<saga>.out`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agents import Agent, RunResult

from sagacity import Decision, Sagacity
from sagacity.integrations.openai_agents import RESUMER, OpenAIAgentsResumer, function_tools
from sagacity.worker import Worker
from tests.integrations._bank import STATES, Bank
from tests.integrations.openai_agents._orders import agent_with
from tests.integrations.openai_agents._teller import Teller, told


def bank_agent(sagacity: Sagacity) -> Agent[Any]:
    """The agent: the scripted teller and the bank's tools (failures told as they are)."""
    return agent_with(Teller(), function_tools(sagacity, Bank(), failure_error_function=told))


def worker() -> Worker:
    """The worker: the SDK's interruptions are approved or rejected, then the run goes on."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    folder = Path(os.environ[STATES])
    sagacity = Sagacity.from_url(os.environ["SAGACITY_DATABASE_URL"])

    def load_state(decision: Decision) -> str:
        return (folder / f"{decision.saga_id}.state").read_text(encoding="utf-8")

    def saved(decision: Decision, result: RunResult) -> None:
        (folder / f"{decision.saga_id}.out").write_text(str(result.final_output), "utf-8")

    resumer = OpenAIAgentsResumer(bank_agent(sagacity), load_state, saved=saved)
    return Worker(sagacity, {RESUMER: resumer}, poll_interval=0.05)
