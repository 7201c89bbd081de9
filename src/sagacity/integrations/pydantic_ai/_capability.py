"""`SagaCapability`: put every toolset of an agent under the saga."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.toolsets import AbstractToolset

from sagacity.annotations import Reversibility
from sagacity.integrations.pydantic_ai._policy import JournalPolicy
from sagacity.integrations.pydantic_ai._toolset import SagaToolset
from sagacity.saga import Sagacity

__all__ = ["SagaCapability"]


@dataclasses.dataclass
class SagaCapability(AbstractCapability[AgentDepsT]):
    """Journal every tool call of an agent: `Agent(..., capabilities=[SagaCapability(s)])`.

    It wraps the agent's assembled toolset (all but output tools) in a `SagaToolset`
    through `get_wrapper_toolset`, so calls are journaled below every capability hook and
    a failure another capability recovers with `on_tool_execute_error` still fails the
    saga. Tools from `saga_toolset`, and any name `Sagacity.wrap` declared, keep their
    declarations; every other tool is journaled by the name the model calls it by, as
    `compensations`, `irreversible`, `read_only` and `unlisted` say (see `JournalPolicy`):
    a tool named nowhere is IRREVERSIBLE and waits for approval. Build it once per
    Sagacity: the compensations are registered with it.
    """

    sagacity: Sagacity
    """The Sagacity whose sagas the calls are journaled in."""
    compensations: Mapping[str, Callable[..., Any]] = dataclasses.field(
        default_factory=dict, kw_only=True
    )
    """COMPENSATABLE tools of other toolsets, each with its compensation."""
    irreversible: Collection[str] = dataclasses.field(default=(), kw_only=True)
    """IRREVERSIBLE tools of other toolsets: each call waits for approval."""
    read_only: Collection[str] = dataclasses.field(default=(), kw_only=True)
    """Tools of other toolsets that change nothing: called straight through, not journaled.
    Only the name is checked, so it is trusted as far as the toolset behind it is."""
    unlisted: Reversibility = dataclasses.field(default=Reversibility.IRREVERSIBLE, kw_only=True)
    """The reversibility every other tool is journaled with (it has no compensation):
    IRREVERSIBLE, each call waiting for approval, unless set otherwise."""
    policy: JournalPolicy = dataclasses.field(init=False, repr=False, compare=False)
    """The policy built from the fields above."""

    def __post_init__(self) -> None:
        self.policy = JournalPolicy(
            self.sagacity,
            compensations=self.compensations,
            irreversible=self.irreversible,
            read_only=self.read_only,
            unlisted=self.unlisted,
        )

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: it holds a live Sagacity, so agent specs cannot build it."""
        return None

    def get_wrapper_toolset(
        self, toolset: AbstractToolset[AgentDepsT]
    ) -> AbstractToolset[AgentDepsT]:
        """Wrap the agent's assembled toolset so that every call is journaled."""
        return SagaToolset(toolset, self.policy)
