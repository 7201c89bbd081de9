"""DBOS steps that journal a saga's calls, and the relay that wakes waiting workflows.

Each step joins its saga through the journal (the workflow's id is the saga id): it
takes the saga's lease, reads the journal, acts and lets the lease go
(`integrations._engine`). A call's lease lingers a moment: the workflow's next step, in
the same process, adopts it instead of taking it again. DBOS checkpoints each step's
output, so a recovered workflow gets a finished step's output back without running it;
a step interrupted by a crash runs again with the same function id, so the same call
id: replayed from the journal if the call ran, in doubt if nobody knows, never run twice.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

from dbos import DBOS

from sagacity.errors import ConfigurationError, LeaseLostError, SagaBusyError
from sagacity.integrations._engine import (
    Ended,
    Ran,
    compensate_saga,
    complete_saga,
    decision_of,
    run_call,
)
from sagacity.saga import Sagacity
from sagacity.worker import DecisionEvents

__all__ = ["DBOS_RESUMER", "DecisionRelay", "SagaSteps", "decision_topic"]

DBOS_RESUMER = "dbos"
"""The resumer name a DBOS step's approval requests journal (`pausing_as`)."""

_log = logging.getLogger("sagacity.dbos")


def decision_topic(call_id: str) -> str:
    """The `DBOS.recv` topic on which a workflow waits for the decision on `call_id`."""
    return f"sagacity.decision:{call_id}"


def _busy(error: BaseException) -> bool:
    """Retry a step only when another worker held the saga: a tool's failure is final."""
    return isinstance(error, SagaBusyError | LeaseLostError)


class SagaSteps:
    """The DBOS steps that run a saga's calls, for the tools of one `Sagacity`.

    ```python
    steps = SagaSteps(sagacity, [Payments()])

    @DBOS.workflow()
    def transfer(amount: str, iban: str) -> str:
        with DBOSSaga(steps) as saga:
            saga.call("charge", amount=amount)
            return saga.call("wire", to=iban, amount=amount)
    ```

    Create it once per process, at import time, like the workflows that use it. Its
    steps are `sagacity.call`, `sagacity.complete`, `sagacity.compensate` and
    `sagacity.decision`; DBOS retries a step only when another worker held the saga for
    a moment (never a tool's failure: a tool's `retries` are sagacity's).

    `linger` (seconds, 2 by default; 0 turns it off): after a call, the saga's lease is
    kept, renewed, for the workflow's next step, which adopts it without a commit and
    checks the saga's head with one select instead of reading its journal. Unadopted, it
    is released after `linger` seconds, so another process that wants the saga meanwhile
    waits up to that long (a step retries, `lease_wait` waits). Not kept after a call
    that raised or that waits for a human's decision.

    Raises:
        ConfigurationError: `linger` is negative or not finite.
    """

    def __init__(self, sagacity: Sagacity, tools: Iterable[object], *, linger: float = 2.0) -> None:
        # The check `Sagacity.join` makes (`_joining.checked_linger`), repeated: an
        # integration uses only the core's public names (tests/test_architecture.py).
        if (
            isinstance(linger, bool)
            or not isinstance(linger, int | float)
            or not math.isfinite(linger)
            or linger < 0
        ):
            raise ConfigurationError(
                f"SagaSteps: linger must be a finite number of seconds, 0 or more, not {linger!r}"
            )
        self.linger = float(linger)
        """Seconds a call's lease is kept for the workflow's next step."""
        self.sagacity = sagacity
        self.tools = {tool.name: tool for tool in sagacity.wrap(*tools)}
        retry: dict[str, Any] = {
            "retries_allowed": True,
            "interval_seconds": 0.2,
            "backoff_rate": 2.0,
            "max_attempts": 12,
            "should_retry": _busy,
        }

        def call(tool: str, call_id: str | None, arguments: dict[str, Any], approved: bool) -> Ran:
            return self._call(tool, call_id, arguments, approved)

        self.call: Callable[[str, str | None, dict[str, Any], bool], Ran] = DBOS.step(
            name="sagacity.call", **retry
        )(call)
        self.complete: Callable[[], Ended] = DBOS.step(name="sagacity.complete", **retry)(
            lambda: complete_saga(self.sagacity, _saga_id())
        )
        self.compensate: Callable[[], Ended] = DBOS.step(name="sagacity.compensate", **retry)(
            lambda: compensate_saga(self.sagacity, _saga_id())
        )
        self.decision: Callable[[str], str] = DBOS.step(name="sagacity.decision")(
            lambda call_id: decision_of(self.sagacity, _saga_id(), call_id)
        )

    def _call(
        self, tool: str, call_id: str | None, arguments: dict[str, Any], approved: bool
    ) -> Ran:
        saga_id = _saga_id()
        wrapped = self.tools.get(tool)
        if wrapped is None:
            raise KeyError(f"saga {saga_id!r}: no tool named {tool!r} is in these SagaSteps")
        step = DBOS.step_id
        return run_call(
            self.sagacity,
            saga_id,
            wrapped,
            call_id=call_id or f"{tool}-{step}",
            arguments=arguments,
            approved=approved,
            resumer=DBOS_RESUMER,
            linger=self.linger,
        )


def _saga_id() -> str:
    workflow_id = DBOS.workflow_id
    if workflow_id is None:
        raise RuntimeError("sagacity's DBOS steps run in a workflow, whose id is the saga id")
    return workflow_id


class DecisionRelay:
    """Sends each waiting DBOS workflow its saga's decision as soon as it is journaled.

    ```python
    relay = DecisionRelay(sagacity)
    threading.Thread(target=relay.run, daemon=True).start()  # relay.close() stops it
    ```

    Follows every decision (`DecisionEvents`: LISTEN/NOTIFY on PostgreSQL, a poll
    elsewhere) and `DBOS.send`s it to the workflow whose id is the saga's, for requests
    that DBOS steps asked. A hint: without it a workflow learns the decision at its next
    `decision_poll`.
    """

    def __init__(self, sagacity: Sagacity, *, poll_interval: float | None = None) -> None:
        self.sagacity = sagacity
        self._events = DecisionEvents(sagacity, poll_interval=poll_interval)

    def run(self) -> None:
        """Relay decisions until `close()`."""
        for decision in self._events.follow():
            if decision.resumer != DBOS_RESUMER:
                continue
            try:
                DBOS.send(
                    decision.saga_id, decision.call_id, topic=decision_topic(decision.call_id)
                )
            except Exception as error:  # a workflow that is gone, a DBOS not launched
                _log.info("saga %r: the decision was not sent: %s", decision.saga_id, error)

    def close(self) -> None:
        """Stop `run` and release the journal watch."""
        self._events.close()
