"""The worker process of the MCP resume test: the bank's tools, wrapped, and no resumer.

MCP pauses name no resumer: `sagacity worker` runs their approved call itself, with its
journaled input, as it does for plain `work`.
"""

from __future__ import annotations

import os

from sagacity import Sagacity
from sagacity.worker import Worker
from tests.integrations._bank import Bank


def worker() -> Worker:
    """A worker with the tools the MCP server wraps."""
    sagacity = Sagacity.from_url(os.environ["SAGACITY_DATABASE_URL"])
    sagacity.wrap(Bank())
    return Worker(sagacity, poll_interval=0.05)
