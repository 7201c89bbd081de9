"""Joining a saga that is already open, one request or engine step at a time.

A mixin of `Sagacity` (as `_settling.py` is), so that `saga.py` stays thin: `join` holds
an open saga for calls that arrive separately (an MCP server's requests, a durable
engine's steps), and with `linger` keeps its lease for the saga's next join here
(`_leasing.ParkedLeases`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from sagacity._scope import SagaScope
from sagacity.approval._policy import starter_for
from sagacity.errors import ConfigurationError, SagaStateError

if TYPE_CHECKING:
    from sagacity._history import SagaHistory
    from sagacity._leasing import LeaseKeeper
    from sagacity._owner import SagaOwner

__all__ = ["SagaJoining", "checked_linger"]


def checked_linger(linger: object, where: str) -> float:
    """`linger` as seconds; `ConfigurationError` naming it unless finite and not negative."""
    if (
        isinstance(linger, bool)
        or not isinstance(linger, int | float)
        or not math.isfinite(linger)
        or linger < 0
    ):
        raise ConfigurationError(
            f"{where}: linger must be a finite number of seconds, 0 or more, not {linger!r}"
        )
    return float(linger)


class SagaJoining:
    """`Sagacity.join`."""

    if TYPE_CHECKING:

        def _leased(
            self,
            saga_id: str,
            *,
            opening: bool = False,
            wait: float | None = None,
            linger: float = 0.0,
        ) -> LeaseKeeper: ...

        def _history(self, saga_id: str, *, must_exist: bool = False) -> SagaHistory: ...

    @contextlib.contextmanager
    def join(
        self,
        saga_id: str,
        *,
        started_by: str | None = None,
        wait: float | None = None,
        linger: float = 0.0,
    ) -> Iterator[SagaScope]:
        """Hold saga `saga_id` open for calls that arrive one request at a time.

        For integrations whose calls of one saga come in separate requests (an MCP
        server, a durable engine's steps): takes the saga's lease, reads its journal and
        yields its open scope; run each request's calls inside `scope.entered()`. Leaving
        does not end the saga (a later `saga()`, `compensate()` or the integration's own
        end does); it lets the lease go. `started_by` is as for `saga`; `wait` is how
        long to wait for a saga another worker holds (by default `lease_wait`).

        `linger` (seconds) keeps the lease after the block, still renewed, for the
        saga's next join in this process: that join adopts it without a commit, and reads
        the saga's head (one select) instead of its journal when nothing was appended
        since. Unadopted, it is released `linger` seconds later (or when this Sagacity
        closes, or the process exits); meanwhile another worker waits for the saga as for
        any holder. Never kept after the block raised, for a lease lost or freed by the
        saga's end, nor for a saga that waits for a human (an approval request open).

        Raises:
            ConfigurationError: `linger` is negative, not finite or not a number.
            SagaBusyError: Another worker holds the saga.
            SagaStateError: The saga ended, or its journal records another starter.
        """
        linger = checked_linger(linger, f"saga {saga_id!r}")
        with self._leased(saga_id, wait=wait, linger=linger) as keeper:
            history = keeper.hold(keeper.known_history or self._history(saga_id))
            if history.ended is not None:
                raise SagaStateError(
                    f"saga {saga_id!r} ended {history.outcome} at seq {history.ended.seq}; "
                    "a saga id is used once: start a new saga"
                )
            scope = SagaScope(cast("SagaOwner", self), saga_id, history)
            scope.started_by = starter_for(history, started_by)
            scope.failed = history.has_failed_call()
            yield scope
            if history.open_requests():
                keeper.linger = 0.0  # the next step waits for a human: let the saga go now
