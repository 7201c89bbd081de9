"""Control tools: `sagacity/end` and `sagacity/compensate` as tools any MCP client can call.

The requests are the protocol's way to end a saga and retry its failed undos, but a
client that sends only the standard methods (the MCP Inspector CLI, most hosts) cannot
send them. With `control_tools=True` a server or proxy lists two extra tools that run
the same handlers. They are answered before any saga is joined, so a call of one is
never journaled as a call of the saga it names, whatever its `_meta` says.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from mcp.server.extension import ToolBinding
from mcp.server.mcpserver.tools import Tool as RegisteredTool
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import BaseModel, Field

from sagacity.errors import ConfigurationError
from sagacity.integrations.mcp._end import handle_compensate_request, handle_end_request
from sagacity.integrations.mcp._wire import EndSagaParams, EndSagaResult, error_result
from sagacity.saga import Sagacity

__all__ = [
    "COMPENSATE_TOOL",
    "CONTROL_TOOLS",
    "END_TOOL",
    "SagaEnding",
    "call_control_tool",
    "control_tool_bindings",
    "control_tools_listed",
    "refuse_collisions",
]

COMPENSATE_TOOL = "sagacity_compensate"
"""The control tool that runs `sagacity/compensate`: input `{"saga_id": ...}`."""
END_TOOL = "sagacity_end"
"""The control tool that runs `sagacity/end`: input `{"saga_id": ...}`."""
CONTROL_TOOLS = (COMPENSATE_TOOL, END_TOOL)
"""The names `control_tools=True` adds to a server's or proxy's tool list."""


class SagaEnding(BaseModel):
    """The structured answer of a control tool: how the saga ended (`EndSagaResult`'s lists)."""

    saga_id: str = Field(description="The saga.")
    outcome: str = Field(
        description="COMPLETED, COMPENSATED, COMPENSATION_FAILED, NEEDS_ATTENTION (compensated, "
        "with calls in doubt) or AWAITING_APPROVAL (still open)."
    )
    compensated: list[str] = Field(
        default_factory=list, description="Call ids whose compensation ran, in the order they ran."
    )
    compensation_failed: list[str] = Field(
        default_factory=list, description="Call ids whose compensation raised: still dirty."
    )
    in_doubt: list[str] = Field(
        default_factory=list,
        description="Call ids whose outcome is unknown: never compensated, for a human to resolve.",
    )
    pending: list[str] = Field(
        default_factory=list,
        description="Approval request ids the saga still waits on (outcome AWAITING_APPROVAL).",
    )
    compensation_waiting: list[str] = Field(
        default_factory=list,
        description="Call ids whose undo this server does not have (outcome NEEDS_ATTENTION): "
        "the server of their tools runs it, and the rest.",
    )
    waiting_tools: list[str] = Field(
        default_factory=list,
        description="The tools of compensation_waiting, in the same order.",
    )

    @classmethod
    def of(cls, answer: EndSagaResult) -> SagaEnding:
        """The request's answer, field for field."""
        return cls(
            saga_id=answer.saga_id,
            outcome=answer.outcome,
            compensated=answer.compensated,
            compensation_failed=answer.compensation_failed,
            in_doubt=answer.in_doubt,
            pending=answer.pending,
            compensation_waiting=answer.compensation_waiting,
            waiting_tools=answer.waiting_tools,
        )


SagaIdArgument = Annotated[
    str, Field(min_length=1, description="The saga id, as journaled (its calls' _meta).")
]


# The two functions below exist to be listed: MCP derives each tool's input and output
# schema from its signature, the same way for `mcp_server` and for the proxy. A call is
# answered by `call_control_tool` before it reaches them.


async def sagacity_compensate(saga_id: SagaIdArgument) -> Annotated[CallToolResult, SagaEnding]:
    """Retry the failed compensations of a saga that has ended (COMPENSATION_FAILED).

    Runs the saga's undos again in reverse order, never repeating one already
    compensated, and answers the lists. Refused for an unknown saga, an open one (end it
    with sagacity_end first) and a completed one (nothing to undo).
    """
    raise AssertionError("answered by sagacity before the tool runs")  # pragma: no cover


async def sagacity_end(saga_id: SagaIdArgument) -> Annotated[CallToolResult, SagaEnding]:
    """End a saga: compensate it if a call failed or is in doubt, else complete it.

    Waits for the saga's calls still running, then answers how it ended. Ending a saga
    that has ended answers what its end recorded.
    """
    raise AssertionError("answered by sagacity before the tool runs")  # pragma: no cover


_ANNOTATIONS = {
    COMPENSATE_TOOL: ToolAnnotations(
        title="Retry a saga's failed compensations",
        read_only_hint=False,
        destructive_hint=True,  # it undoes what the saga's calls did
        idempotent_hint=True,  # an undo journaled COMPENSATED is never run again
        open_world_hint=True,  # the undos reach the systems the calls changed
    ),
    END_TOOL: ToolAnnotations(
        title="End a saga",
        read_only_hint=False,
        destructive_hint=True,  # a failed saga is compensated
        idempotent_hint=True,  # a saga that has ended answers its recorded end
        open_world_hint=True,
    ),
}
_FUNCTIONS = {COMPENSATE_TOOL: sagacity_compensate, END_TOOL: sagacity_end}
_OPTIONS: dict[str, dict[str, Any]] = {
    name: {
        "name": name,
        "description": inspect.cleandoc(function.__doc__ or ""),
        "annotations": _ANNOTATIONS[name],
    }
    for name, function in _FUNCTIONS.items()
}


def control_tool_bindings() -> list[ToolBinding]:
    """The control tools as an `Extension` contributes them to an `MCPServer`."""
    return [ToolBinding(fn=_FUNCTIONS[name], kwargs=dict(_OPTIONS[name])) for name in CONTROL_TOOLS]


def control_tools_listed() -> list[Tool]:
    """The control tools as `tools/list` lists them: what `MCPServer` lists for the bindings."""
    listed = []
    for name in CONTROL_TOOLS:
        tool = RegisteredTool.from_function(_FUNCTIONS[name], **_OPTIONS[name])
        listed.append(
            Tool(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                input_schema=tool.parameters,
                output_schema=tool.output_schema,
                annotations=tool.annotations,
            )
        )
    return listed


def refuse_collisions(names: Sequence[str], where: str) -> None:
    """Refuse tool names that a control tool would shadow.

    Raises:
        ConfigurationError: One of `names` is a control tool's name.
    """
    taken = sorted(set(names) & set(CONTROL_TOOLS))
    if taken:
        raise ConfigurationError(
            f"{where} has a tool named {', '.join(map(repr, taken))}, the name of a control "
            "tool that control_tools=True adds; a client could not tell them apart. Turn "
            "control_tools off, or rename the tool"
        )


async def call_control_tool(
    sagacity: Sagacity, name: str, arguments: Mapping[str, Any] | None
) -> CallToolResult:
    """Answer a call of a control tool with the `sagacity/end` or `sagacity/compensate` handler.

    The answer is the handler's lists as `structuredContent` (a `SagaEnding`) and as
    JSON text. A refusal of the handler (no such saga, still open, completed, being
    ended) is an `isError` result with its text, which names the saga; so are arguments
    other than one non-empty string `saga_id`.
    """
    given = dict(arguments or {})
    saga_id = given.get("saga_id")
    if set(given) != {"saga_id"} or not isinstance(saga_id, str) or not saga_id:
        return error_result(
            f"tool {name!r}: arguments must be {{'saga_id': <a non-empty string>}}, "
            f"not {json.dumps(given, default=repr)[:200]}; nothing was run"
        )
    handler = handle_compensate_request if name == COMPENSATE_TOOL else handle_end_request
    try:
        answer = await handler(sagacity, EndSagaParams(saga_id=saga_id))
    except MCPError as error:
        return error_result(f"tool {name!r}: {error.error.message}")
    structured = SagaEnding.of(answer).model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(structured, indent=2))],
        structured_content=structured,
    )
