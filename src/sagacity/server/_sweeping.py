"""The server's background sweep: due reminders, escalations and denials, while it runs."""

from __future__ import annotations

import logging
import threading

from sagacity._sweeping import Escalator
from sagacity.saga import Sagacity

__all__ = ["Sweeping"]

_log = logging.getLogger("sagacity.server.sweep")


class Sweeping:
    """Runs `Escalator.sweep` every `interval` seconds on a thread of its own, until `stop`.

    A sweep that fails (the database away) is logged and tried again at the next
    interval: what was due is still due, read from the journal.
    """

    def __init__(self, sagacity: Sagacity, interval: float) -> None:
        self.escalator = Escalator(sagacity)
        self.interval = interval
        self.sweeps = 0
        """How many sweeps ran to their end."""
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sagacity-sweep", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the sweep under way (if any); wait for it up to `timeout` seconds."""
        self._stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                done = self.escalator.sweep()
            except Exception:  # the database went away: said, and tried again later
                _log.exception("the sweep of due reminders and expiries failed")
            else:
                self.sweeps += 1
                for action in done:
                    _log.info(
                        "saga %r: request %s %s", action.saga_id, action.request_id, action.action
                    )
            self._stopping.wait(self.interval)
