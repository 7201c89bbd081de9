"""Answering ADK's confirmation requests: the message that resumes a paused call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.adk.events import Event
from google.adk.sessions import Session
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from sagacity.approval import ApprovalRequest
from sagacity.errors import ApprovalNotFoundError

__all__ = ["REQUEST_CONFIRMATION", "confirmation_message", "confirmation_requests"]

REQUEST_CONFIRMATION = "adk_request_confirmation"
"""The name of the function call by which ADK asks the client to confirm a tool call."""


def confirmation_requests(session: Session | Iterable[Event]) -> dict[str, str]:
    """The confirmation ADK asked last for each paused tool call of `session`.

    Args:
        session: An ADK session, or its events.

    Returns:
        For each tool call id, the id of the latest `adk_request_confirmation` call that
        asks about it (an agent's, never the user's), in the order they were asked.
    """
    events = session.events if isinstance(session, Session) else session
    asked: dict[str, str] = {}
    for event in events:
        if event.author == "user":
            continue  # ADK acts only on the confirmation requests its agents made
        for function_call in event.get_function_calls():
            if function_call.name != REQUEST_CONFIRMATION or not function_call.id:
                continue
            original = (function_call.args or {}).get("originalFunctionCall")
            if isinstance(original, dict) and isinstance(original.get("id"), str):
                asked.pop(original["id"], None)
                asked[original["id"]] = function_call.id
    return asked


def confirmation_message(
    session: Session | Iterable[Event],
    call: str | ApprovalRequest,
    *,
    confirmed: bool = True,
    payload: Any = None,
) -> types.Content:
    """The user message that answers ADK's confirmation request for one paused call.

    Send it with `Runner.run_async(..., new_message=...)` inside
    `Sagacity.aresume_saga(saga_id, work)`. ADK then runs the call; sagacity runs it only
    if a human approved its exact input through `Sagacity.approve`: a confirmation alone
    never runs an IRREVERSIBLE call. `confirmed=False` declines the call: it is journaled
    REJECTED and never runs.

    Args:
        session: The ADK session the run paused in, or its events.
        call: The paused call's id, or the `ApprovalRequest` sagacity stored for it.
        confirmed: Whether the call is confirmed.
        payload: The `ToolConfirmation` payload; a declining one's text (or its
            `"reason"`) is journaled as the rejection's reason.

    Raises:
        ApprovalNotFoundError: ADK asked no confirmation for that call in `session`.
    """
    call_id = call.call_id if isinstance(call, ApprovalRequest) else call
    asked = confirmation_requests(session).get(call_id) if call_id else None
    if asked is None:
        raise ApprovalNotFoundError(
            f"ADK asked no confirmation for tool call {call_id!r} in this session: resume "
            "the session the run paused in (its adk_request_confirmation call names the call)"
        )
    confirmation = ToolConfirmation(confirmed=confirmed, payload=payload)
    response = types.FunctionResponse(
        id=asked,
        name=REQUEST_CONFIRMATION,
        response=confirmation.model_dump(by_alias=True, exclude_none=True),
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])
