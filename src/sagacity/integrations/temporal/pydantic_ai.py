"""PydanticAI's durable agents on Temporal with sagacity's tools (extras `temporal`, `pydantic-ai`).

```python
# the agent, imported by the workflow (through the sandbox's pass-through) and the worker
tools = temporal_saga_toolset(Payments(), id="payments")
agent = Agent(model, name="payer", toolsets=[tools], capabilities=[TemporalDurability()])

@workflow.defn
class Pay:
    @workflow.run
    async def run(self, prompt: str) -> str:
        async with AgentSaga() as saga:
            return (await agent.run(prompt)).output

# the worker
tools.bind(sagacity)
Worker(client, task_queue="pay", workflows=[Pay], plugins=[PydanticAIPlugin()],
       activities=SagaActivities(sagacity, []).all, activity_executor=ThreadPoolExecutor(16))
```

See `docs/integrations/temporal.md`.
"""

from __future__ import annotations

try:
    import pydantic_ai as _pydantic_ai  # noqa: F401  (only checks that the extra is installed)
    import temporalio as _temporalio  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised with an extra missing
    raise ImportError(
        "sagacity.integrations.temporal.pydantic_ai needs the Temporal SDK and PydanticAI: "
        "pip install 'sagacity[temporal,pydantic-ai]'"
    ) from error

from sagacity.integrations.temporal._pydantic_ai import (
    METADATA_KEY,
    AgentSaga,
    TemporalSagaToolset,
    ToolBinding,
    temporal_saga_toolset,
)

__all__ = [
    "METADATA_KEY",
    "AgentSaga",
    "TemporalSagaToolset",
    "ToolBinding",
    "temporal_saga_toolset",
]
