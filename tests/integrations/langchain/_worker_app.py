"""The application a worker process runs for the LangGraph resume tests.

`sagacity worker --app tests.integrations.langchain._worker_app:worker` builds it: the
bank's tools, the agent graph on a SQLite checkpointer shared with the test process, and
the graph's resumer. The database and the checkpoint file come from the environment.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langgraph.checkpoint.sqlite import SqliteSaver

from sagacity import Sagacity
from sagacity.integrations.langchain import RESUMER, LangGraphResumer, langchain_tools
from sagacity.worker import Worker
from tests.integrations._bank import Bank
from tests.integrations.langchain._teller import Teller

CHECKPOINTS = "SAGACITY_TEST_CHECKPOINTS"
"""The environment variable naming the graph's SQLite checkpoint file."""


def bank_graph(sagacity: Sagacity, checkpoints: str) -> Any:
    """The agent: the scripted teller, the bank's tools, a checkpointer another process reads."""
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    return create_agent(
        Teller(),
        langchain_tools(sagacity, Bank()),
        middleware=[ToolErrorMiddleware(on_error=lambda error, request: f"failed: {error}")],
        checkpointer=saver,
    )


def worker() -> Worker:
    """The worker: LangGraph's pauses resume on the graph's thread (its id is the saga id)."""
    sagacity = Sagacity.from_url(os.environ["SAGACITY_DATABASE_URL"])
    graph = bank_graph(sagacity, os.environ[CHECKPOINTS])
    return Worker(sagacity, {RESUMER: LangGraphResumer(graph)}, poll_interval=0.05)
