"""CrewAI adapter: put a crew's tool calls under a saga (extra `crewai`).

```python
from crewai import Agent, Crew, Task
from sagacity.integrations.crewai import crew_tools

agent = Agent(role="clerk", goal="ship orders", backstory="…",
              tools=crew_tools(sagacity, OrderTools()))
crew = Crew(agents=[agent], tasks=[Task(description="ship order 123", expected_output="…",
                                         agent=agent)])
result = sagacity.saga("order-123", crew.kickoff)
```

Each tool is a CrewAI `Tool` whose function journals the call before CrewAI turns the
tool's exception into "Error executing tool: …" for the model, on the native
function-calling and the ReAct paths alike. CrewAI's automatic re-runs of a failed call
are the same call (one call id); its cache never answers for a journaled tool, the journal
replays repeats within the saga instead; IRREVERSIBLE calls wait for sagacity's approval,
never for CrewAI's console prompt, and `CrewResumer` lets `sagacity.Worker` kick the crew
off again once a human decided. See `docs/integrations/crewai.md`.
"""

from __future__ import annotations

try:
    import crewai  # noqa: F401  (the import guard: fail here, naming the extra)
except ImportError as error:  # pragma: no cover - exercised with the extra blocked
    raise ImportError(
        "sagacity.integrations.crewai needs CrewAI, which is not installed: "
        "pip install 'sagacity[crewai]' (in an environment of its own: CrewAI 1.x pins mcp<2 "
        "and cannot share one with sagacity[mcp])"
    ) from error

from sagacity.integrations.crewai._calls import RERUN_REASON, choose_call_id
from sagacity.integrations.crewai._resumer import RESUMER, CrewResumer
from sagacity.integrations.crewai._tools import SagaCrewTool, as_crew_tool, crew_tools

__all__ = [
    "RERUN_REASON",
    "RESUMER",
    "CrewResumer",
    "SagaCrewTool",
    "as_crew_tool",
    "choose_call_id",
    "crew_tools",
]
