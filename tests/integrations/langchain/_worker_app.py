"""The application a worker process runs for the LangGraph resume tests.

`sagacity worker --app tests.integrations.langchain._worker_app:worker` builds it: the
bank's tools, the agent graph on a SQLite checkpointer shared with the test process, and
the graph's resumer. The database and the checkpoint file come from the environment.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.sqlite import SqliteSaver

from sagacity import Sagacity
from sagacity.integrations.langchain import RESUMER, LangGraphResumer, langchain_tools
from sagacity.worker import Worker
from tests.integrations._bank import Bank
from tests.integrations.langchain._teller import Teller

CHECKPOINTS = "SAGACITY_TEST_CHECKPOINTS"
"""The environment variable naming the graph's SQLite checkpoint file."""
HANG_FINAL = "SAGACITY_TEST_HANG_FINAL"
"""Set, the model hangs on its last turn (after the wire ran), until the process is killed."""
LEASE_TTL = "SAGACITY_TEST_LEASE_TTL"
"""The worker's lease on a saga, in seconds (a killed worker's lapses that soon)."""


class HangingTeller(Teller):
    """The teller, stuck on its last turn: the resume is killed between the wire and the end."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if any(isinstance(m, ToolMessage) and m.tool_call_id == "call-w" for m in messages):
            print("teller: the last turn hangs", file=sys.stderr, flush=True)
            threading.Event().wait()
        return super()._generate(messages, *args, **kwargs)


def bank_graph(sagacity: Sagacity, checkpoints: str, *, hang: bool = False) -> Any:
    """The agent: the scripted teller, the bank's tools, a checkpointer another process reads."""
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    return create_agent(
        HangingTeller() if hang else Teller(),
        langchain_tools(sagacity, Bank()),
        middleware=[ToolErrorMiddleware(on_error=lambda error, request: f"failed: {error}")],
        checkpointer=saver,
    )


def worker() -> Worker:
    """The worker: LangGraph's pauses resume on the graph's thread (its id is the saga id)."""
    ttl = float(os.environ.get(LEASE_TTL, "30"))
    sagacity = Sagacity.from_url(os.environ["SAGACITY_DATABASE_URL"], lease_ttl=ttl)
    graph = bank_graph(sagacity, os.environ[CHECKPOINTS], hang=bool(os.environ.get(HANG_FINAL)))
    return Worker(sagacity, {RESUMER: LangGraphResumer(graph)}, poll_interval=0.05)
