"""Temporal activities that journal a saga's calls: one per wrapped tool, and three more.

Each activity joins its saga through the journal (the workflow's id is the saga id): it
takes the saga's lease, reads the journal, runs one call and lets the lease go
(`integrations._engine`). Nothing is held in a worker's memory between activities, so the
activities of one saga may land on any worker on any machine that shares the journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from sagacity.errors import InDoubtError, LeaseLostError, SagaBusyError, SagacityError
from sagacity.integrations._engine import (
    CallNotRunError,
    Ended,
    compensate_saga,
    complete_saga,
    decision_of,
    run_call,
)
from sagacity.integrations.temporal._wire import (
    COMPENSATE_ACTIVITY,
    COMPLETE_ACTIVITY,
    DECISION_ACTIVITY,
    TEMPORAL,
    CallInput,
    CallOutput,
    DecisionInput,
    EndOutput,
)
from sagacity.saga import Sagacity
from sagacity.tools import FailureKind, SagaTool

__all__ = ["BUSY", "IN_DOUBT", "TOOL_FAILED", "SagaActivities"]

BUSY = "SagaBusy"
"""The error type of an activity that found its saga held by another worker: retried."""
IN_DOUBT = "SagacityInDoubt"
"""The error type of a call that may have run with no outcome journaled: never retried."""
TOOL_FAILED = "SagacityToolFailed"
"""The error type of a call that failed and was journaled FAILED: never retried (the
saga is failed; its compensation, not a new attempt, follows)."""


class SagaActivities:
    """The activities a Temporal worker registers to run a saga's calls.

    ```python
    activities = SagaActivities(sagacity, sagacity.wrap(Payments()))
    worker = Worker(client, task_queue="orders", workflows=[Order],
                    activities=activities.all,
                    activity_executor=ThreadPoolExecutor(16))
    ```

    One activity per tool, named after the tool, and `sagacity.complete`,
    `sagacity.compensate` and `sagacity.decision`. They are sync activities (the journal is
    written from the worker's activity executor, never on its event loop); an async tool
    runs on an event loop of the activity's own thread.
    """

    def __init__(self, sagacity: Sagacity, tools: Iterable[object]) -> None:
        self.sagacity = sagacity
        sagacity.add_classifier(_cancelled_outcome_unknown)
        self.tools = {tool.name: tool for tool in sagacity.wrap(*tools)}

    @property
    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for `Worker(activities=...)`."""
        calls = [self._tool_activity(tool) for tool in self.tools.values()]
        return [*calls, self._complete(), self._compensate(), self._decision()]

    def _tool_activity(self, tool: SagaTool) -> Callable[[CallInput], CallOutput]:
        @activity.defn(name=tool.name)
        def run(call: CallInput) -> CallOutput:
            return self.call(tool, call)

        return run

    def call(self, tool: SagaTool, call: CallInput) -> CallOutput:
        """Run one call of `tool` in the activity's saga, through the journal.

        A retried activity is the same call (`call.call_id`): a call journaled EXECUTED
        replays its result, one with an INTENT and no outcome is in doubt and is never run
        again blindly.
        """
        saga_id = _saga_id()
        where = f"saga {saga_id!r}: tool {tool.name!r} call {call.call_id!r}"
        if call.tool != tool.name:
            raise ApplicationError(
                f"{where}: the activity {tool.name!r} was given a call of {call.tool!r}",
                type="SagacityWrongTool",
                non_retryable=True,
            )
        with _errors(where):
            ran = run_call(
                self.sagacity,
                saga_id,
                tool,
                call_id=call.call_id,
                arguments=call.arguments,
                approved=call.approved is not None,
                resumer=TEMPORAL,
            )
        return CallOutput(result=ran.result, request_id=ran.request_id)

    def _complete(self) -> Callable[[], EndOutput]:
        @activity.defn(name=COMPLETE_ACTIVITY)
        def complete() -> EndOutput:
            return self._end(complete_saga)

        return complete

    def _compensate(self) -> Callable[[], EndOutput]:
        @activity.defn(name=COMPENSATE_ACTIVITY)
        def compensate() -> EndOutput:
            return self._end(compensate_saga)

        return compensate

    def _end(self, how: Callable[[Sagacity, str], Ended]) -> EndOutput:
        saga_id = _saga_id()
        with _errors(f"saga {saga_id!r}"):
            ended = how(self.sagacity, saga_id)
        return EndOutput(outcome=ended.outcome, detail=ended.detail)

    def _decision(self) -> Callable[[DecisionInput], str]:
        @activity.defn(name=DECISION_ACTIVITY)
        def decision(asked: DecisionInput) -> str:
            return decision_of(self.sagacity, _saga_id(), asked.call_id)

        return decision


@contextmanager
def _errors(where: str) -> Iterator[None]:
    """Turn what a step raised into the Temporal error that says whether to retry it."""
    try:
        yield
    except (SagaBusyError, LeaseLostError) as error:
        raise ApplicationError(f"{where}: {error}", type=BUSY) from error
    except InDoubtError as error:
        raise ApplicationError(f"{where}: {error}", type=IN_DOUBT, non_retryable=True) from error
    except CallNotRunError as error:
        raise ApplicationError(str(error), type="SagacityBadInput", non_retryable=True) from error
    except SagacityError as error:
        raise ApplicationError(
            f"{where}: {error}", type=type(error).__name__, non_retryable=True
        ) from error
    except CancelledError:
        # Temporal cancelled the activity (its worker shutting down, a cancelled workflow):
        # not the tool's failure. Temporal retries it; the journal says replay or in doubt.
        raise
    except Exception as error:
        raise ApplicationError(
            f"{where} failed: {type(error).__name__}: {error}",
            type=TOOL_FAILED,
            non_retryable=True,
        ) from error


def _cancelled_outcome_unknown(error: BaseException) -> FailureKind | None:
    """A tool interrupted by Temporal's cancellation (raised into its thread) may have acted."""
    return FailureKind.OUTCOME_UNKNOWN if isinstance(error, CancelledError) else None


def _saga_id() -> str:
    """The saga of the running activity: its workflow's id."""
    workflow_id = activity.info().workflow_id
    if workflow_id is None:
        raise ApplicationError(
            "sagacity's activities run in a workflow, whose id is the saga id; this one "
            "was started on its own",
            type="SagacityNoWorkflow",
            non_retryable=True,
        )
    return workflow_id
