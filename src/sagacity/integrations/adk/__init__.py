"""Google ADK function tools whose calls are journaled in a saga (extra `adk`).

```python
from google.adk.agents import LlmAgent
from sagacity.integrations.adk import function_tools

agent = LlmAgent(name="orders", model=..., tools=function_tools(sagacity, OrderTools()))
result = await sagacity.asaga("order-123", lambda: run_turn(runner, session, "ship 123"))
```

Each tool is ADK's own `FunctionTool` around a function in front of the wrapped tool,
with the declaration ADK makes of the undecorated tool; the journal sees the tool's
exception before an `on_tool_error_callback` can turn it into an answer for the model.
IRREVERSIBLE tools pause with ADK's native confirmation (`adk_request_confirmation`),
which a human's hash-bound approval in sagacity must back; see `docs/integrations/adk.md`.
"""

from __future__ import annotations

try:
    import google.adk  # noqa: F401  (only checks that the extra is installed)
except ImportError as error:  # pragma: no cover - exercised with the extra missing
    raise ImportError(
        "sagacity.integrations.adk needs Google ADK: pip install 'sagacity[adk]'"
    ) from error

from sagacity.integrations.adk._confirm import (
    REQUEST_CONFIRMATION,
    confirmation_message,
    confirmation_requests,
)
from sagacity.integrations.adk._resumer import RESUMER, AdkResumer
from sagacity.integrations.adk._tools import (
    CONFIRMATION_SOURCE,
    as_function_tool,
    function_tools,
)

__all__ = [
    "CONFIRMATION_SOURCE",
    "REQUEST_CONFIRMATION",
    "RESUMER",
    "AdkResumer",
    "as_function_tool",
    "confirmation_message",
    "confirmation_requests",
    "function_tools",
]
