"""PydanticAI adapter: put an agent's tool calls under a saga (extra `pydantic-ai`).

`saga_toolset(sagacity, *sources)` gives an `Agent` the tools of `Sagacity.wrap` as a
toolset whose definitions are exactly what PydanticAI would derive from the functions;
`SagaCapability(sagacity, ...)` puts every other toolset of the agent (MCP servers,
plain function toolsets) under the saga too. Both journal at `WrapperToolset.call_tool`,
which sees the tool's raw exception even when PydanticAI or a capability turns it into
a message for the model, and pause IRREVERSIBLE calls with PydanticAI's own
`ApprovalRequired`; `PydanticAIResumer(agent, load_messages)` is the run's resumer for
`sagacity.Worker`: a decision runs the agent on with `DeferredToolResults`.
"""

from __future__ import annotations

try:
    import pydantic_ai  # noqa: F401  (the import guard: fail here, naming the extra)
except ImportError as error:  # pragma: no cover - exercised with the extra blocked
    raise ImportError(
        "sagacity.integrations.pydantic_ai needs PydanticAI, which is not installed: "
        "pip install 'sagacity[pydantic-ai]'"
    ) from error

from sagacity.integrations.pydantic_ai._capability import SagaCapability
from sagacity.integrations.pydantic_ai._classify import classify_exception
from sagacity.integrations.pydantic_ai._policy import JournalPolicy
from sagacity.integrations.pydantic_ai._resumer import RESUMER, PydanticAIResumer
from sagacity.integrations.pydantic_ai._toolset import (
    DENIAL_SOURCE,
    METADATA_KEY,
    SagaToolset,
    saga_toolset,
)

__all__ = [
    "DENIAL_SOURCE",
    "METADATA_KEY",
    "RESUMER",
    "JournalPolicy",
    "PydanticAIResumer",
    "SagaCapability",
    "SagaToolset",
    "classify_exception",
    "saga_toolset",
]
