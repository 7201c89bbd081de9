"""The PydanticAI resumer: a decision continues the deferred run with `DeferredToolResults`.

`sagacity.Worker` calls it inside the saga's re-opened scope, under its lease. It loads the
paused run's messages (the application kept them, as `result.all_messages_json()`, where
it keeps such things) and runs the agent on them with PydanticAI's own answer for the
decided call:

- approved: `DeferredToolResults(approvals={call_id: True})`. The call runs through
  sagacity's approval check (PydanticAI's flag alone decides nothing), and the agent sees
  its result as if it had waited. Run elsewhere already (the inbox, the CLI), the call
  is replayed from the journal.
- rejected or expired: `ToolDenied(message)`: the model is told no, and the run goes on;
  the worker then runs the compensation walk.

What the run returns goes to `saved`, if given: a run deferred again has new messages to
keep for the next decision.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic_ai import (
    Agent,
    DeferredToolResults,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ToolDenied,
)
from pydantic_ai.run import AgentRunResult

from sagacity import Decision

__all__ = ["RESUMER", "PydanticAIResumer"]

RESUMER = "pydantic_ai"
"""The resumer name a deferred PydanticAI call journals with its request (`Decision.resumer`)."""

Messages = Sequence[ModelMessage] | bytes | str
"""A run's messages, or the JSON `all_messages_json()` made of them."""
MessagesLoader = Callable[[Decision], "Messages | Awaitable[Messages]"]
ResultSaver = Callable[[Decision, AgentRunResult[Any]], "Awaitable[None] | None"]


class PydanticAIResumer:
    """Continues a run that ended with `DeferredToolRequests`, with `deferred_tool_results`.

    Args:
        agent: The agent, with the `saga_toolset` (or `SagaCapability`) it ran with.
        load_messages: The paused run's messages (or their JSON) for a decision, sync or
            async.
        saved: Called with the decision and the resumed run's result (sync or async).
        denial_message: The text the model is given for a rejected call; by default it
            names the request and the decision's reason.
        **run_options: Passed to `agent.run` (`deps`, `output_type`, `usage_limits`, ...).
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        load_messages: MessagesLoader,
        *,
        saved: ResultSaver | None = None,
        denial_message: Callable[[Decision], str] | None = None,
        **run_options: Any,
    ) -> None:
        self.agent = agent
        self.load_messages = load_messages
        self.saved = saved
        self.denial_message = denial_message or _denial_message
        self.run_options = run_options

    def answer(self, decision: Decision) -> bool | ToolDenied:
        """PydanticAI's answer for the decided call: True, or its denial."""
        return True if decision.approved else ToolDenied(self.denial_message(decision))

    async def __call__(self, decision: Decision) -> AgentRunResult[Any]:
        """Run the agent on from the paused run's messages, the decided call answered."""
        loaded = self.load_messages(decision)
        if inspect.isawaitable(loaded):
            loaded = await loaded
        messages = (
            ModelMessagesTypeAdapter.validate_json(loaded)
            if isinstance(loaded, bytes | str)
            else list(loaded)
        )
        result = await self.agent.run(
            message_history=messages,
            deferred_tool_results=DeferredToolResults(
                approvals={decision.call_id: self.answer(decision)}
            ),
            **self.run_options,
        )
        if self.saved is not None:
            kept = self.saved(decision, result)
            if inspect.isawaitable(kept):
                await kept
        return result


def _denial_message(decision: Decision) -> str:
    reason = decision.reason or f"the request was {decision.outcome.value}"
    return (
        f"[REJECTED] {decision.tool} was not run: approval request {decision.request_id} was "
        f"{decision.outcome.value}: {reason}. Do not call it again; tell the user it was not done."
    )
