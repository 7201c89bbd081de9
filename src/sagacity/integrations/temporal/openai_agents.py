"""The OpenAI Agents SDK on Temporal with sagacity's tools (Temporal's OpenAI Agents plugin).

```python
# the agent, imported by the workflow (through the sandbox's pass-through)
agent = Agent(name="payer", instructions="...", tools=saga_function_tools(Payments()))

@workflow.defn
class Pay:
    @workflow.run
    async def run(self, prompt: str) -> str:
        async with AgentSaga():
            return str((await Runner.run(agent, prompt)).final_output)

# the worker (its client has plugins=[OpenAIAgentsPlugin(...)])
Worker(client, task_queue="pay", workflows=[Pay],
       activities=SagaActivities(sagacity, [Payments()]).all,
       activity_executor=ThreadPoolExecutor(16))
```

Needs `temporalio-openai-agents`, which pins `openai-agents<0.23` while sagacity's
`openai-agents` extra needs 0.24: it lives in a venv of its own (the
`temporal-openai-agents` extra; `make test-openai-temporal`). See
`docs/integrations/temporal.md`.
"""

from __future__ import annotations

try:
    import agents as _agents  # noqa: F401  (only checks that the extra is installed)
    import temporalio as _temporalio  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised with an extra missing
    raise ImportError(
        "sagacity.integrations.temporal.openai_agents needs the Temporal SDK and the OpenAI "
        "Agents SDK: pip install 'sagacity[temporal-openai-agents]'"
    ) from error

from sagacity.integrations.temporal._agent_saga import AgentSaga
from sagacity.integrations.temporal._openai_agents import saga_function_tools

__all__ = ["AgentSaga", "saga_function_tools"]
