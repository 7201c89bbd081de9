"""The OpenAI Agents SDK on Temporal, with tools journaled in the workflow's saga.

Temporal's OpenAI Agents plugin (`temporalio.openai_agents.OpenAIAgentsPlugin`) runs the
SDK's `Runner` in the workflow and each model call in an activity. The tools made here are
the workflow's side of sagacity's tools: each call is `TemporalSaga.call` in the open
`AgentSaga` (an activity of `SagaActivities`, its call id the activity's id, `<tool>-<n>`),
so the same call for every retry and replay, on any worker; an IRREVERSIBLE call waits
in the workflow for the human's decision.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.function_schema import FuncSchema, function_schema
from agents.tool import default_tool_error_function
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.integrations.temporal._activities import TOOL_FAILED
from sagacity.integrations.temporal._agent_saga import open_agent_saga
from sagacity.integrations.temporal._workflow import SagaEndedError
from sagacity.saga import Sagacity

__all__ = ["saga_function_tools"]


def saga_function_tools(*sources: object, strict_json_schema: bool = True) -> list[FunctionTool]:
    """The SDK's function tools for the declared tools of `sources`, run as saga activities.

    ```python
    agent = Agent(name="payer", tools=saga_function_tools(Payments()))
    ```

    Each tool's definition is what the SDK derives from the declared function (its
    `function_schema`). Invoked in a workflow inside `AgentSaga`, a call runs as the
    tool's activity of `SagaActivities` (register them on the worker). A tool that raised
    (journaled FAILED) is handed back to the SDK's loop as the SDK's own default error
    message for the model; the saga still fails, and `AgentSaga` compensates it when the
    block is left. Any other failure of the activity (a call in doubt, an approval check
    that refused it, a saga that could not be joined) ends the run.

    Args:
        *sources: Objects with `compensable` methods, or declared functions; checked as
            `Sagacity.wrap` checks them.
        strict_json_schema: The SDK's strict JSON schema for the tools' parameters.

    Raises:
        ConfigurationError: A declaration is wrong (see `Sagacity.wrap`).
    """
    with Sagacity.from_url("memory://") as checker:
        declared = checker.wrap(*sources)
    tools = []
    for tool in declared:
        schema = function_schema(
            tool.func, name_override=tool.name, strict_json_schema=strict_json_schema
        )
        tools.append(
            FunctionTool(
                name=schema.name,
                description=schema.description or "",
                params_json_schema=schema.params_json_schema,
                on_invoke_tool=functools.partial(_invoke, schema),
                strict_json_schema=strict_json_schema,
            )
        )
    return tools


async def _invoke(schema: FuncSchema, ctx: RunContextWrapper[Any], input: str) -> Any:
    """Run one call of the tool as a saga activity, from the workflow."""
    saga = open_agent_saga()
    if saga is None:
        raise ApplicationError(
            f"tool {schema.name!r} was not run: run the agent inside `async with AgentSaga()` "
            "in a workflow, which ends the saga (completed, or compensated) and waits for "
            "approvals",
            type="SagacityNoSaga",
            non_retryable=True,
        )
    try:
        arguments = schema.params_pydantic_model(**json.loads(input or "{}"))
    except Exception as error:
        # The SDK tells the model of arguments that do not fit; nothing ran or is journaled.
        return default_tool_error_function(ctx, error)
    try:
        return await saga.call(schema.name, **arguments.model_dump(mode="json"))
    except SagaEndedError as refusal:
        raise saga.refused(refusal) from None
    except ActivityError as error:
        cause = error.cause
        if isinstance(cause, ApplicationError) and cause.type == TOOL_FAILED:
            return default_tool_error_function(ctx, cause)  # what the SDK's loop would say
        raise
