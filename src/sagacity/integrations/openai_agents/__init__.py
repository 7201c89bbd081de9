"""OpenAI Agents SDK function tools whose calls are journaled in a saga.

```python
from agents import Agent, Runner
from sagacity.integrations.openai_agents import function_tools

agent = Agent(name="orders", tools=function_tools(sagacity, OrderTools()))
result = await sagacity.asaga("order-123", lambda: Runner.run(agent, "ship order 123"))
```

Each tool is made by the SDK's own `function_tool` from a function in front of the
wrapped tool, so its name, description and parameter schema are what the SDK makes of the
undecorated tool, and the journal sees the tool's exception before the SDK turns it into a
message for the model. IRREVERSIBLE tools pause the run through the SDK's native approval
(`needs_approval`); `OpenAIAgentsResumer(agent, load_state)` is the run's resumer for
`sagacity.Worker`: a decision approves or rejects the interruption and runs the agent on.
See `docs/integrations/openai_agents.md`.
"""

from __future__ import annotations

try:
    import agents as _agents  # noqa: F401  (only checks that the extra is installed)
except ImportError as error:  # pragma: no cover - exercised with the extra missing
    raise ImportError(
        "sagacity.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'sagacity[openai-agents]'"
    ) from error

from sagacity.integrations.openai_agents._resumer import RESUMER, OpenAIAgentsResumer
from sagacity.integrations.openai_agents._tools import (
    REJECTION_SOURCE,
    as_function_tool,
    classify_agents_error,
    function_tools,
)

__all__ = [
    "REJECTION_SOURCE",
    "RESUMER",
    "OpenAIAgentsResumer",
    "as_function_tool",
    "classify_agents_error",
    "function_tools",
]
