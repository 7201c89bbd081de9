"""PydanticAI's durable agents on Temporal, with tools journaled in the workflow's saga.

PydanticAI's Temporal integration (`TemporalDurability`, or the older `TemporalAgent`)
runs each call of a `FunctionToolset` in an activity, and the agent loop in the workflow.
`TemporalSagaToolset` is such a toolset whose calls, inside those activities, join the
saga of their workflow (the workflow's id) through the journal, under the model's
tool-call id, which the workflow's history keeps: the same call for every retry of the
activity and every replay of the workflow.

The toolset's outer layer runs in the workflow: when an IRREVERSIBLE call's activity
journaled an approval request, it waits there, durably, through the `AgentSaga` open
around the run (a signal and a poll, as `TemporalSaga.call` does), then calls the tool
again under the same call id, as approved.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset, ToolsetTool, WrapperToolset
from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

from sagacity.errors import (
    ConfigurationError,
    InDoubtError,
    LeaseLostError,
    SagaBusyError,
    SagacityError,
)
from sagacity.integrations._engine import CallNotRunError, run_call
from sagacity.integrations.pydantic_ai import classify_exception
from sagacity.integrations.temporal._activities import BUSY, IN_DOUBT, TOOL_FAILED
from sagacity.integrations.temporal._agent_saga import AgentSaga, open_agent_saga
from sagacity.integrations.temporal._wire import TEMPORAL
from sagacity.integrations.temporal._workflow import SagaEndedError
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = [
    "METADATA_KEY",
    "AgentSaga",
    "TemporalSagaToolset",
    "ToolBinding",
    "temporal_saga_toolset",
]

METADATA_KEY = "sagacity"
"""The key of sagacity's entry in the metadata of the `ApprovalRequired` an activity
returns for a call that waits for a human."""


@dataclasses.dataclass
class ToolBinding:
    """What the copies of one `TemporalSagaToolset` share: the tools and their Sagacity."""

    sources: tuple[object, ...]
    """What the tools were declared from (what `Sagacity.wrap` takes)."""
    sagacity: Sagacity | None = None
    """The Sagacity the calls journal in, in this worker; None until `bind`."""
    tools: dict[str, SagaTool] = dataclasses.field(default_factory=dict)
    """The tools wrapped by `sagacity`, by name."""

    def tool(self, toolset_id: str | None, name: str) -> tuple[Sagacity, SagaTool]:
        """The Sagacity and wrapped tool a call of `name` runs through, in this worker."""
        if self.sagacity is None:
            raise ConfigurationError(
                f"toolset {toolset_id!r}: tool {name!r} was called in an activity, but no "
                "Sagacity is bound to the toolset in this worker; call "
                "TemporalSagaToolset.bind(sagacity) before the worker starts"
            )
        tool = self.tools.get(name)
        if tool is None:
            raise ConfigurationError(
                f"toolset {toolset_id!r}: no tool {name!r} is declared in the sources bound "
                f"in this worker ({sorted(self.tools)}); bind the same sources everywhere"
            )
        return self.sagacity, tool


@dataclasses.dataclass
class TemporalSagaToolset(WrapperToolset[Any]):
    """The tools of `sources` for a PydanticAI agent on Temporal, journaled in the saga.

    ```python
    tools = temporal_saga_toolset(Payments(), id="payments")
    agent = Agent(model, toolsets=[tools], capabilities=[TemporalDurability()])
    # in the worker, before it starts:
    tools.bind(Sagacity.from_url("postgresql://app@db/sagacity"))
    ```

    Its inner `FunctionToolset` (the leaf PydanticAI moves into activities) holds the
    declared functions, so the model is sent exactly their definitions. Each call runs in
    its activity through the journal: the saga is the workflow's, the call id the model's
    tool-call id. A tool that raises is journaled FAILED, whatever the loop does with it:
    `ToolFailed` and `ModelRetry` go back to the loop (a message for the model; a
    `ModelRetry` is a retry the model was asked for and does not fail the saga), anything
    else fails the activity non-retryable. A call already EXECUTED replays its result; a
    call in doubt is refused.

    The toolset itself (this outer layer) stays in the workflow: an IRREVERSIBLE call's
    first activity journals the request, and the call then waits in the `AgentSaga` open
    around the run for the decision, and runs in a new activity once approved. Rejected
    or expired, it raises `SagaEndedError`, which ends the run and compensates the saga.
    """

    binding: ToolBinding = dataclasses.field(kw_only=True)
    """The tools and the Sagacity, shared with the leaf and every copy PydanticAI makes."""

    def bind(self, sagacity: Sagacity) -> None:
        """Journal the calls that run in this process in `sagacity` (call it in the worker)."""
        sagacity.add_classifier(classify_exception)
        self.binding.tools = {tool.name: tool for tool in sagacity.wrap(*self.binding.sources)}
        self.binding.sagacity = sagacity

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Call the tool's activity; a call that waits for a human waits in the workflow.

        Raises:
            ApplicationError: In a workflow, no `AgentSaga` is open around the run (type
                `SagacityNoSaga`, nothing is scheduled): no one would end the saga.
            SagaEndedError: The call's request was rejected or expired.
        """
        saga = open_agent_saga()
        if saga is None and workflow.in_workflow():
            raise ApplicationError(
                f"toolset {self.wrapped.id!r}: tool {name!r} call {ctx.tool_call_id!r} was not "
                "run: run the agent inside `async with AgentSaga()`, which ends the saga "
                "(completed, or compensated) and waits for approvals",
                type="SagacityNoSaga",
                non_retryable=True,
            )
        try:
            return await super().call_tool(name, tool_args, ctx, tool)
        except ApprovalRequired as pause:
            asked = (pause.metadata or {}).get(METADATA_KEY)
            if not isinstance(asked, dict) or saga is None:
                raise
            call_id, request_id = str(asked["call_id"]), str(asked["request_id"])
            decision = await saga.wait_for_decision(call_id, request_id)
            if decision != "approved":
                raise saga.refused(
                    SagaEndedError(
                        f"tool {name!r} call {call_id!r}: request {request_id} was {decision}; "
                        "the saga is compensated",
                        outcome=decision,
                    )
                ) from None
            approved = dataclasses.replace(ctx, tool_call_approved=True)
            return await super().call_tool(name, tool_args, approved, tool)


def temporal_saga_toolset(
    *sources: object, id: str, sagacity: Sagacity | None = None, **options: Any
) -> TemporalSagaToolset:
    """Declare the tools of `sources` for a durable agent, as toolset `id`.

    Args:
        *sources: Objects with `compensable` methods, or declared functions.
        id: The toolset's id, which names its activities (PydanticAI requires one).
        sagacity: The Sagacity the calls journal in; or `bind` one later, in the worker.
            Without one, the declarations are checked now on an in-memory one.
        **options: Passed to the inner `FunctionToolset` (`max_retries`, `timeout`, ...).

    Raises:
        ConfigurationError: A declaration is wrong (see `Sagacity.wrap`).
    """
    binding = ToolBinding(sources=sources)
    leaf = _SagaFunctionToolset(binding, id=id, **options)
    checker = sagacity if sagacity is not None else Sagacity.from_url("memory://")
    try:
        for tool in checker.wrap(*sources):
            leaf.add_function(tool.func, name=tool.name)
    finally:
        if sagacity is None:
            checker.close()
    toolset = TemporalSagaToolset(leaf, binding=binding)
    if sagacity is not None:
        toolset.bind(sagacity)
    return toolset


class _SagaFunctionToolset(FunctionToolset[Any]):
    """The leaf PydanticAI runs in activities: each call joins its workflow's saga."""

    def __init__(self, binding: ToolBinding, **options: Any) -> None:
        super().__init__(**options)
        self._binding = binding

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if not activity.in_activity():
            raise ConfigurationError(
                f"toolset {self.id!r}: tool {name!r} runs in a Temporal activity, under a "
                "durable agent (TemporalDurability); this call was made outside one. Give a "
                "plain agent sagacity.integrations.pydantic_ai.saga_toolset instead"
            )
        saga_id = activity.info().workflow_id
        call_id = ctx.tool_call_id
        where = f"saga {saga_id!r}: tool {name!r} call {call_id!r}"
        if saga_id is None or call_id is None:
            raise ApplicationError(
                f"{where}: a journaled call needs its workflow's id and the model's tool-call id",
                type="SagacityNoWorkflow",
                non_retryable=True,
            )
        with _errors(where):
            sagacity, saga_tool = self._binding.tool(self.id, name)
            ran = await asyncio.to_thread(
                run_call,
                sagacity,
                saga_id,
                saga_tool,
                call_id=call_id,
                arguments=tool_args,
                approved=bool(ctx.tool_call_approved),
                resumer=TEMPORAL,
            )
        if ran.request_id is not None:
            raise ApprovalRequired(
                metadata={
                    METADATA_KEY: {
                        "call_id": call_id,
                        "request_id": ran.request_id,
                        "tool_name": name,
                    }
                }
            )
        return ran.result


@contextmanager
def _errors(where: str) -> Iterator[None]:
    """Hand the loop what it turns into a message; turn the rest into Temporal's errors."""
    try:
        yield
    except (ToolFailed, ModelRetry):
        raise  # journaled already: the agent loop tells the model
    except (SagaBusyError, LeaseLostError) as error:
        raise ApplicationError(f"{where}: {error}", type=BUSY) from error
    except InDoubtError as error:
        raise ApplicationError(f"{where}: {error}", type=IN_DOUBT, non_retryable=True) from error
    except CallNotRunError as error:
        raise ApplicationError(str(error), type="SagacityBadInput", non_retryable=True) from error
    except SagacityError as error:
        raise ApplicationError(
            f"{where}: {error}", type=type(error).__name__, non_retryable=True
        ) from error
    except Exception as error:
        raise ApplicationError(
            f"{where} failed: {type(error).__name__}: {error}",
            type=TOOL_FAILED,
            non_retryable=True,
        ) from error
