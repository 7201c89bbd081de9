"""The LangGraph resumer: a decision continues the paused graph with `Command(resume=...)`.

`sagacity.Worker` calls it inside the saga's re-opened scope, under its lease. The resume
value names the decided request, so that it answers that call only (a graph paused on
several calls keeps waiting on the others), and says yes or no:

- approved: `{"approved": True, "request_id": ...}`. The paused call runs when its node
  runs again, through sagacity's approval check (the value alone decides nothing), and
  the agent sees the tool's result as if it had waited. Run elsewhere already (the
  inbox, the CLI), the call is replayed from the journal.
- rejected or expired: `{"approved": False, "request_id": ..., "reason": ...}`: the call
  is not run and the model is given LangGraph's "no" (`[REJECTED] ...`); the worker then
  runs the compensation walk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from sagacity import Decision

__all__ = ["RESUMER", "AsyncLangGraphResumer", "LangGraphResumer"]

RESUMER = "langgraph"
"""The resumer name a LangGraph pause journals with its approval request (`Decision.resumer`)."""

ConfigFor = Callable[[Decision], RunnableConfig]
"""Finds the paused run's config (its thread) from the decision."""


def thread_of_saga(decision: Decision) -> RunnableConfig:
    """The default: the graph's thread id is the saga id."""
    return {"configurable": {"thread_id": decision.saga_id}}


class LangGraphResumer:
    """Continues a graph paused for approval, on its thread: `graph.invoke(Command(resume=...))`.

    Args:
        graph: The compiled graph, with the persistent checkpointer it paused under.
        config: The run's config for a decision (a function), or one config for every
            saga; by default the thread id is the saga id.
    """

    def __init__(self, graph: Any, *, config: ConfigFor | RunnableConfig | None = None) -> None:
        self.graph = graph
        self._config = config

    def config_for(self, decision: Decision) -> RunnableConfig:
        """The config of the paused run `decision` answers."""
        if self._config is None:
            return thread_of_saga(decision)
        if callable(self._config):
            return self._config(decision)
        return self._config

    @staticmethod
    def resume_value(decision: Decision) -> dict[str, Any]:
        """What the paused call is told: yes or no, naming its request."""
        if decision.approved:
            return {"approved": True, "request_id": decision.request_id}
        reason = decision.reason or f"the request was {decision.outcome.value}"
        return {"approved": False, "request_id": decision.request_id, "reason": reason}

    def command(self, decision: Decision, interrupts: Any) -> Command[Any]:
        """`Command(resume=...)` for the interrupt of the decided call.

        With the interrupt found, the value goes to it by id, and the graph's other
        interrupts keep waiting; else (the thread's state shows none: a resume already
        under way) to the next interrupt, as LangGraph's own `Command(resume=value)` does.
        """
        value = self.resume_value(decision)
        ids = [
            interrupt.id
            for interrupt in interrupts
            if isinstance(interrupt.value, Mapping)
            and interrupt.value.get("request_id") == decision.request_id
        ]
        return Command(resume={ids[0]: value}) if ids else Command(resume=value)

    def __call__(self, decision: Decision) -> Any:
        """Resume the graph's thread; returns what `graph.invoke` returns."""
        config = self.config_for(decision)
        interrupts = self.graph.get_state(config).interrupts
        return self.graph.invoke(self.command(decision, interrupts), config)


class AsyncLangGraphResumer(LangGraphResumer):
    """`LangGraphResumer` for a graph run with `ainvoke`: the worker awaits it."""

    async def __call__(self, decision: Decision) -> Any:
        """Resume the graph's thread; returns what `graph.ainvoke` returns."""
        config = self.config_for(decision)
        interrupts = (await self.graph.aget_state(config)).interrupts
        return await self.graph.ainvoke(self.command(decision, interrupts), config)
