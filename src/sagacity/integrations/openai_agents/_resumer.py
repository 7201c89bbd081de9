"""The OpenAI Agents SDK resumer: a decision approves or rejects the run's interruption.

`sagacity.Worker` calls it inside the saga's re-opened scope, under its lease. It loads the
paused run's `RunState` (the application saved it, as `result.to_state().to_string()`,
where it keeps such things), answers the interruption of the decided call with the SDK's
own `state.approve(item)` or `state.reject(item)`, and runs `Runner.run(agent, state)`:

- approved: the SDK runs the call, through sagacity's approval check (the SDK's flag alone
  decides nothing), and the agent sees its result as if it had waited. Run elsewhere
  already (the inbox, the CLI), the call is replayed from the journal.
- rejected or expired: the SDK gives the model its rejection message, and the run goes
  on; the worker then runs the compensation walk.

What the run returns goes to `saved`, if given: a run interrupted again (another
IRREVERSIBLE call) has a new state to keep for the next decision.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, Runner, RunResult, RunState

from sagacity import Decision
from sagacity.errors import SagaStateError

__all__ = ["RESUMER", "OpenAIAgentsResumer"]

RESUMER = "openai_agents"
"""The resumer name an SDK interruption journals with its approval request (`Decision.resumer`)."""

StateLoader = Callable[[Decision], "RunState[Any] | str | Awaitable[RunState[Any] | str]"]
"""Finds the paused run's state (or its string) from the decision."""
ResultSaver = Callable[[Decision, RunResult], "Awaitable[None] | None"]
"""Keeps what the resumed run returned (its `to_state()`, if it was interrupted again)."""


class OpenAIAgentsResumer:
    """Continues a run interrupted for approval: approve or reject its item, then `Runner.run`.

    Args:
        agent: The agent the run belongs to, with the tools `function_tools` made.
        load_state: The paused run's `RunState`, or the string `to_string()` made of it,
            for a decision (sync or async).
        saved: Called with the decision and the resumed run's result (sync or async).
        rejection_message: The text the model is given for a rejected call; by default
            the decision's reason.
        **run_options: Passed to `Runner.run` (`context`, `max_turns`, ...).
    """

    def __init__(
        self,
        agent: Agent[Any],
        load_state: StateLoader,
        *,
        saved: ResultSaver | None = None,
        rejection_message: Callable[[Decision], str] | None = None,
        **run_options: Any,
    ) -> None:
        self.agent = agent
        self.load_state = load_state
        self.saved = saved
        self.rejection_message = rejection_message or _rejection_message
        self.run_options = run_options

    async def __call__(self, decision: Decision) -> RunResult:
        """Answer the decided call's interruption the SDK's way and run the agent on."""
        state = await self.state_of(decision)
        items = [
            item
            for item in state.get_interruptions()
            if getattr(item.raw_item, "call_id", None) == decision.call_id
        ]
        if not items:
            raise SagaStateError(
                f"saga {decision.saga_id!r}: the run state loaded for request "
                f"{decision.request_id} has no interruption of call {decision.call_id!r} "
                f"(tool {decision.tool!r}); load the state saved when the run paused on it"
            )
        for item in items:
            if decision.approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=self.rejection_message(decision))
        result = await Runner.run(self.agent, state, **self.run_options)
        if self.saved is not None:
            kept = self.saved(decision, result)
            if inspect.isawaitable(kept):
                await kept
        return result

    async def state_of(self, decision: Decision) -> RunState[Any]:
        """The paused run's `RunState`, rebuilt from its string where it was kept as one."""
        loaded = self.load_state(decision)
        if inspect.isawaitable(loaded):
            loaded = await loaded
        if isinstance(loaded, str):
            return await RunState.from_string(self.agent, loaded)
        return loaded


def _rejection_message(decision: Decision) -> str:
    reason = decision.reason or f"the request was {decision.outcome.value}"
    return (
        f"[REJECTED] {decision.tool} was not run: approval request {decision.request_id} was "
        f"{decision.outcome.value}: {reason}. Do not call it again; tell the user it was not done."
    )
