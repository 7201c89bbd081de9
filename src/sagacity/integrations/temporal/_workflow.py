"""The workflow's side of a saga: journaled calls scheduled as activities, deterministically.

Workflow code never touches the journal: it schedules activities (`SagaActivities` runs
them) and waits on timers and signals, so replaying the workflow's history schedules
nothing new and reads nothing. Import it through the sandbox's pass-through:

```python
with workflow.unsafe.imports_passed_through():
    from sagacity.integrations.temporal import TemporalSaga
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from types import TracebackType
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from sagacity.integrations.temporal._wire import (
    COMPENSATE_ACTIVITY,
    COMPLETE_ACTIVITY,
    DECISION_ACTIVITY,
    DECISION_SIGNAL,
    CallInput,
    CallOutput,
    DecisionInput,
    EndOutput,
)

__all__ = ["SAGA_RETRY_POLICY", "SagaEndedError", "TemporalSaga"]

SAGA_RETRY_POLICY = RetryPolicy(
    initial_interval=datetime.timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=datetime.timedelta(seconds=10),
)
"""What Temporal retries for a saga's activities: only what sagacity leaves to it.

A tool's failure is journaled FAILED and raised non-retryable (sagacity's declared
`retries` are the one owner of a tool's retries); a call in doubt is non-retryable too.
Temporal retries the rest: a worker lost mid-activity (the retry replays or finds the
call in doubt), a saga held by another worker, a journal that could not be reached.
"""


class SagaEndedError(ApplicationError):
    """The saga did not complete: a call failed or was refused, and it was compensated.

    Raised from `TemporalSaga`'s block, it fails the workflow; `outcome` and `detail`
    say how the saga ended.
    """

    def __init__(self, message: str, *, outcome: str, detail: str = "") -> None:
        super().__init__(message, outcome, detail, type="SagacitySagaEnded", non_retryable=True)
        self.outcome = outcome
        self.detail = detail


@dataclasses.dataclass
class _Options:
    start_to_close_timeout: datetime.timedelta
    retry_policy: RetryPolicy
    decision_poll: datetime.timedelta


class TemporalSaga:
    """A saga in a Temporal workflow: its id is the workflow's, its calls are activities.

    ```python
    async with TemporalSaga() as saga:
        hold = await saga.call("reserve", sku="A-1", qty=2)
        await saga.call("wire", to="DE89…", amount=900)  # IRREVERSIBLE: waits for a human
    ```

    Leaving the block normally ends the saga (`sagacity.complete`): COMPLETED, or, if a
    call failed that the workflow caught and went on from, compensated, and then the
    block raises `SagaEndedError`. Leaving it by an exception (a failed call, a refused
    approval, any error of the workflow's own, a cancellation) runs the compensation walk
    (`sagacity.compensate`) and lets the exception go on.

    Each call's id is its first activity's id (`<tool>-<n>`, `n` counting the saga's
    calls in workflow order): the same for every retry of the activity and every replay
    of the workflow. An IRREVERSIBLE call returns once a human decided: the workflow
    waits for the `sagacity.decision` signal (sent by `DecisionRelay` when the decision
    is journaled), and asks the journal itself every `decision_poll` in case a signal
    was missed. Approved, the call runs (the approved input, an edited one included);
    rejected or expired, the block raises `SagaEndedError` after compensating.
    """

    def __init__(
        self,
        *,
        start_to_close_timeout: datetime.timedelta = datetime.timedelta(minutes=5),
        retry_policy: RetryPolicy = SAGA_RETRY_POLICY,
        decision_poll: datetime.timedelta = datetime.timedelta(seconds=30),
    ) -> None:
        self._options = _Options(start_to_close_timeout, retry_policy, decision_poll)
        self._calls = 0
        self._hints: set[str] = set()
        self.outcome: EndOutput | None = None
        """How the saga ended, once the block left."""
        workflow.set_signal_handler(DECISION_SIGNAL, self._hint)

    def _hint(self, call_id: str) -> None:
        """A decision for `call_id` was journaled: ask the journal now, not at the poll."""
        self._hints.add(call_id)

    async def call(self, tool: str, /, **arguments: Any) -> Any:
        """Run a journaled call of `tool` with `arguments` (JSON values) and return its result.

        Raises:
            ActivityError: The call failed (journaled FAILED), was refused, or is in doubt.
            SagaEndedError: An IRREVERSIBLE call was rejected or its request expired.
        """
        self._calls += 1
        activity_id = f"{tool}-{self._calls}"
        call = CallInput(tool=tool, call_id=activity_id, arguments=arguments)
        output = await self._execute(tool, call, activity_id)
        resumes = 0
        while output.request_id is not None:
            decision = await self._decision(call.call_id, output.request_id)
            if decision != "approved":
                raise SagaEndedError(
                    f"tool {tool!r} call {call.call_id!r}: request {output.request_id} was "
                    f"{decision}; the saga is compensated",
                    outcome=decision,
                )
            resumes += 1
            approved = dataclasses.replace(call, approved=output.request_id)
            output = await self._execute(tool, approved, f"{activity_id}-approved-{resumes}")
        return output.result

    async def _execute(self, tool: str, call: CallInput, activity_id: str) -> CallOutput:
        options = self._options
        output: CallOutput = await workflow.execute_activity(
            tool,
            call,
            activity_id=activity_id,
            start_to_close_timeout=options.start_to_close_timeout,
            retry_policy=options.retry_policy,
            result_type=CallOutput,
        )
        return output

    async def _decision(self, call_id: str, request_id: str) -> str:
        """Wait until the journal says how the call's request was decided."""
        asked = DecisionInput(call_id=call_id, request_id=request_id)
        while True:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: call_id in self._hints, timeout=self._options.decision_poll
                )
            self._hints.discard(call_id)
            decision: str = await workflow.execute_activity(
                DECISION_ACTIVITY,
                asked,
                start_to_close_timeout=self._options.start_to_close_timeout,
                retry_policy=self._options.retry_policy,
                result_type=str,
            )
            if decision != "pending":
                return decision

    async def _end(self, activity: str) -> EndOutput:
        ended: EndOutput = await workflow.execute_activity(
            activity,
            start_to_close_timeout=self._options.start_to_close_timeout,
            retry_policy=self._options.retry_policy,
            result_type=EndOutput,
        )
        return ended

    async def __aenter__(self) -> TemporalSaga:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exc, GeneratorExit):
            # The worker evicted the workflow (it stopped, or its cache is full): the next
            # worker replays it. Nothing ends here; a compensation scheduled now would be a
            # command the replay never makes.
            return
        if exc is None:
            self.outcome = await self._end(COMPLETE_ACTIVITY)
            if self.outcome.outcome != "COMPLETED":
                raise SagaEndedError(
                    f"saga ended {self.outcome.outcome}: a call failed or is in doubt, though "
                    f"the workflow went on; {self.outcome.detail}",
                    outcome=self.outcome.outcome,
                    detail=self.outcome.detail,
                )
            return
        self.outcome = await self._end(COMPENSATE_ACTIVITY)
        if isinstance(exc, SagaEndedError):
            exc.outcome, exc.detail = self.outcome.outcome, self.outcome.detail
