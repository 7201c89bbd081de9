"""A request's input and its tool: rebuilding a stored call to run, checking an edited one.

`Sagacity.resume_saga` without work runs the approved call from its journaled input
alone, and `Sagacity.edit` replaces that input: both need the input to fit the tool's
signature, and both refuse before anything is journaled or run when it does not.
"""

from __future__ import annotations

from typing import Any

from sagacity.approval import ApprovalRequest
from sagacity.errors import ApprovalInputError, ConfigurationError, SerializationError
from sagacity.journal import JsonValue, to_json
from sagacity.journal._rebuild import rebuild_arguments
from sagacity.tools import SagaTool

__all__ = ["edited_input", "rebuilt_arguments", "wrapped_tool"]


def wrapped_tool(tools: dict[str, SagaTool], request: ApprovalRequest) -> SagaTool:
    """The tool `request` asks for, wrapped in this process.

    Raises:
        ConfigurationError: It is not wrapped here.
    """
    tool = tools.get(request.tool_name)
    if tool is None:
        raise ConfigurationError(
            f"saga {request.saga_id!r}: tool {request.tool_name!r} is not wrapped by this "
            "Sagacity; wrap it with Sagacity.wrap, or resume with the framework's own resume "
            "as `work`"
        )
    return tool


def rebuilt_arguments(tool: SagaTool, request: ApprovalRequest) -> dict[str, Any]:
    """The request's journaled input, rebuilt into the Python types of the tool's signature.

    Checked before the saga re-opens: a tool that cannot take its journaled input (one
    with framework-injected parameters, or a parameter whose type cannot be rebuilt from
    JSON) is a refusal that leaves the saga open, not a failure that compensates.

    Raises:
        ConfigurationError: The input does not fit the tool.
    """
    try:
        kwargs = rebuild_arguments(tool.func, request.input, tool_name=tool.name)
        tool.input_of((), kwargs)
    except (TypeError, SerializationError) as error:
        raise ConfigurationError(
            f"saga {request.saga_id!r}: tool {tool.name!r} cannot be called with its journaled "
            f"input ({error}); resume with the framework's own resume as `work`"
        ) from error
    return kwargs


def edited_input(
    tool: SagaTool | None, request: ApprovalRequest, new_input: object
) -> dict[str, JsonValue]:
    """The JSON input an edit of `request` journals: `new_input`, checked against the tool.

    The edit replaces the whole input. Where the tool is wrapped in this process, the
    input is bound to its signature as a call would be (defaults applied, so resuming
    hashes it alike) and each value must rebuild into its parameter's type; elsewhere it
    must be a JSON object.

    Raises:
        ApprovalInputError: It is not an object with string keys, a value cannot be made
            JSON, a field names no parameter, a required one is missing, or a value does
            not fit its parameter's type. The message names the tool and the field.
    """
    where = f"saga {request.saga_id!r}: the edited input of tool {request.tool_name!r}"
    if not isinstance(new_input, dict) or not all(isinstance(k, str) for k in new_input):
        raise ApprovalInputError(
            f"{where} must be a JSON object of the tool's arguments by name, not "
            f"{type(new_input).__name__}; nothing was journaled"
        )
    try:
        converted = to_json(new_input, where="new_input")
        assert isinstance(converted, dict)  # a dict with string keys stays one
        if tool is None:
            return converted
        kwargs = rebuild_arguments(tool.func, converted, tool_name=tool.name)
        edited = tool.input_of((), kwargs)
    except (TypeError, SerializationError) as error:
        # The rebuild's advice is for a resume; an edit is fixed by sending other input.
        why = str(error).split("; annotate the parameter")[0].split("; resume with")[0]
        raise ApprovalInputError(
            f"{where} does not fit it: {why}. Nothing was journaled; the request "
            f"{request.request_id} still waits"
        ) from None
    if not set(converted) <= set(edited):
        raise ApprovalInputError(
            f"{where} does not fit it: fields {sorted(set(converted) - set(edited))} name no "
            "parameter of the journaled input; nothing was journaled"
        )
    return edited
