"""The workflow's side of a saga in DBOS: calls as steps, the end, approval by `DBOS.recv`."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from dbos import DBOS

from sagacity.errors import SagacityError
from sagacity.integrations._engine import Ended
from sagacity.integrations.dbos._steps import SagaSteps, decision_topic

__all__ = ["DBOSSaga", "SagaEndedError"]


class SagaEndedError(SagacityError):
    """The saga did not complete: a call failed or was refused, and it was compensated.

    `outcome` is what ended it (rejected, expired, or the saga's outcome) and `detail`
    what a human should know.
    """

    def __init__(self, message: str, *, outcome: str, detail: str = "") -> None:
        super().__init__(message)
        self.outcome = outcome
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        # DBOS records a workflow's exception; keep what it needs to rebuild this one.
        return (_rebuilt, (str(self), self.outcome, self.detail))


def _rebuilt(message: str, outcome: str, detail: str) -> SagaEndedError:
    return SagaEndedError(message, outcome=outcome, detail=detail)


class DBOSSaga:
    """A saga in a DBOS workflow: its id is the workflow's, its calls are steps.

    ```python
    @DBOS.workflow()
    def order(sku: str) -> str:
        with DBOSSaga(steps) as saga:
            saga.call("reserve", sku=sku)
            return saga.call("wire", to="DE89…", amount="900.00")  # waits for a human
    ```

    Leaving the block normally ends the saga (`sagacity.complete`): COMPLETED, or, if a
    call failed that the workflow caught and went on from, compensated, and then the block
    raises `SagaEndedError`. Leaving it by an exception runs the compensation walk
    (`sagacity.compensate`) and lets the exception go on.

    Each call's id is its first step's: `<tool>-<function id>`, the same whenever DBOS
    recovers the workflow. An IRREVERSIBLE call returns once a human decided: the
    workflow waits in `DBOS.recv` (woken by `DecisionRelay`) and asks the journal every
    `decision_poll` seconds in case no message came. Approved, the call runs (the approved
    input, an edited one included); rejected or expired, `SagaEndedError` after the walk.
    """

    def __init__(self, steps: SagaSteps, *, decision_poll: float = 30.0) -> None:
        self.steps = steps
        self.decision_poll = decision_poll
        self.outcome: Ended | None = None
        """How the saga ended, once the block left."""

    def call(self, tool: str, /, **arguments: Any) -> Any:
        """Run a journaled call of `tool` with `arguments` (JSON values); return its result.

        Raises:
            Exception: What the tool raised (journaled FAILED), or a refusal.
            SagaEndedError: An IRREVERSIBLE call was rejected or its request expired.
        """
        ran = self.steps.call(tool, None, arguments, False)
        while ran.request_id is not None:
            call_id = ran.call_id
            decision = self._decision(call_id)
            if decision != "approved":
                raise SagaEndedError(
                    f"tool {tool!r} call {call_id!r}: request {ran.request_id} was {decision}; "
                    "the saga is compensated",
                    outcome=decision,
                )
            ran = self.steps.call(tool, call_id, arguments, True)
        return ran.result

    def _decision(self, call_id: str) -> str:
        while True:
            DBOS.recv(decision_topic(call_id), timeout_seconds=self.decision_poll)
            decision = self.steps.decision(call_id)
            if decision != "pending":
                return decision

    def __enter__(self) -> DBOSSaga:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.outcome = self.steps.complete()
            if self.outcome.outcome != "COMPLETED":
                raise SagaEndedError(
                    f"saga ended {self.outcome.outcome}: a call failed or is in doubt, though "
                    f"the workflow went on; {self.outcome.detail}",
                    outcome=self.outcome.outcome,
                    detail=self.outcome.detail,
                )
            return
        self.outcome = self.steps.compensate()
