"""LangChain tools whose calls are journaled in a saga; they run in LangGraph as they are.

```python
from langchain.agents import create_agent
from sagacity.integrations.langchain import langchain_tools

agent = create_agent(model, tools=langchain_tools(sagacity, OrderTools()), checkpointer=saver)
result = sagacity.saga("order-123", lambda: agent.invoke({"messages": [...]}, config))
```

Each tool is a `StructuredTool` built by LangChain's own `StructuredTool.from_function`
from the undecorated function, so its name, description and argument schema are what
LangChain makes of it; only its `func` / `coroutine` is replaced by the journaled call.
That is below the place where `handle_tool_error`, `ToolNode(handle_tool_errors=...)` and
agent middleware turn an exception into a `ToolMessage(status="error")`, so the journal
sees the raw exception. IRREVERSIBLE tools pause the graph with LangGraph's `interrupt()`;
a "no" in the resume value (`Command(resume={"approved": False})`) is journaled as a
rejection and the call is not run, while a "yes" is never enough: sagacity's journal
decides. A tool-call id names one call: a second call under it in one run is refused.
A pause under `InMemorySaver` warns (`InMemoryCheckpointerWarning`): another process
could not resume it. `LangGraphResumer(graph)` is the graph's resumer for
`sagacity.Worker`: a decision resumes the paused thread with `Command(resume=...)`. See
`docs/integrations/langchain.md`.
"""

from __future__ import annotations

try:
    import langchain_core as _langchain_core  # noqa: F401  (only checks the extra)
    import langgraph as _langgraph  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised with the extra missing
    raise ImportError(
        "sagacity.integrations.langchain needs LangChain and LangGraph: "
        "pip install 'sagacity[langchain]'"
    ) from error

from sagacity.integrations.langchain._graph import (
    APPROVAL_INTERRUPT,
    InMemoryCheckpointerWarning,
    classify_langgraph_error,
)
from sagacity.integrations.langchain._resume import RESUME_SOURCE
from sagacity.integrations.langchain._resumer import (
    RESUMER,
    AsyncLangGraphResumer,
    LangGraphResumer,
)
from sagacity.integrations.langchain._tools import (
    SagaStructuredTool,
    as_langchain_tool,
    langchain_tools,
)

__all__ = [
    "APPROVAL_INTERRUPT",
    "RESUMER",
    "RESUME_SOURCE",
    "AsyncLangGraphResumer",
    "InMemoryCheckpointerWarning",
    "LangGraphResumer",
    "SagaStructuredTool",
    "as_langchain_tool",
    "classify_langgraph_error",
    "langchain_tools",
]
