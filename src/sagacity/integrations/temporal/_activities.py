"""Temporal activities that journal a saga's calls: one per wrapped tool, and three more.

Each activity joins its saga through the journal (the workflow's id is the saga id): it
takes the saga's lease, reads the journal, runs one call and lets the lease go. Nothing is
held in a worker's memory between activities, so the activities of one saga may land on
any worker on any machine that shares the journal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from sagacity.adapter import SagaHistory, pausing_as, payload_of, rebuild_arguments
from sagacity.approval import ApprovalRequest
from sagacity.errors import (
    InDoubtError,
    LeaseLostError,
    SagaBusyError,
    SagacityError,
    SagaNotFoundError,
    SerializationError,
)
from sagacity.integrations.temporal._decision import TEMPORAL, decision_of
from sagacity.integrations.temporal._wire import (
    COMPENSATE_ACTIVITY,
    COMPLETE_ACTIVITY,
    DECISION_ACTIVITY,
    CallInput,
    CallOutput,
    DecisionInput,
    EndOutput,
)
from sagacity.journal import to_json
from sagacity.saga import Sagacity, SagaResult
from sagacity.tools import SagaTool
from sagacity.worker import DecisionEvents

__all__ = ["BUSY", "IN_DOUBT", "TOOL_FAILED", "SagaActivities"]

_log = logging.getLogger("sagacity.temporal")

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

    def __init__(self, sagacity: Sagacity, tools: Iterable[SagaTool]) -> None:
        self.sagacity = sagacity
        self.tools = {tool.name: tool for tool in sagacity.wrap(*tools)}

    @property
    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for `Worker(activities=...)`."""
        calls = [self._tool_activity(tool) for tool in self.tools.values()]
        return [*calls, self._complete(), self._compensate(), self._decision()]

    # -- one call ----------------------------------------------------------------------

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
        asked: list[ApprovalRequest] = []
        try:
            with self.sagacity.join(saga_id) as scope, scope.entered(), pausing_as(TEMPORAL):
                kwargs = _arguments(tool, call, scope.history, where)
                if tool.is_async:
                    result = asyncio.run(
                        tool.ainvoke(
                            (), kwargs, call_id=call.call_id, on_approval_needed=asked.append
                        )
                    )
                else:
                    result = tool.invoke(
                        (), kwargs, call_id=call.call_id, on_approval_needed=asked.append
                    )
        except ApplicationError:
            raise
        except (SagaBusyError, LeaseLostError) as error:
            raise ApplicationError(f"{where}: {error}", type=BUSY) from error
        except InDoubtError as error:
            raise ApplicationError(
                f"{where}: {error}", type=IN_DOUBT, non_retryable=True
            ) from error
        except SagacityError as error:
            raise ApplicationError(
                f"{where}: {error}", type=type(error).__name__, non_retryable=True
            ) from error
        except Exception as error:
            raise ApplicationError(
                f"{where} failed: {type(error).__name__}: {error}",
                type=TOOL_FAILED,
                non_retryable=True,
            ) from error
        if asked:
            return CallOutput(request_id=asked[0].request_id)
        return CallOutput(result=to_json(result, where=f"{where} result"))

    # -- the saga's end ----------------------------------------------------------------

    def _complete(self) -> Callable[[], EndOutput]:
        @activity.defn(name=COMPLETE_ACTIVITY)
        def complete() -> EndOutput:
            return self.complete(_saga_id())

        return complete

    def complete(self, saga_id: str) -> EndOutput:
        """End a saga whose workflow returned: COMPLETED, unless a call failed or is in doubt.

        A failed call, or one that may have run with no outcome known, compensates the
        saga instead (the in-doubt ones listed, never undone). An ended saga answers
        its recorded outcome.
        """
        try:
            history = SagaHistory.of(saga_id, self.sagacity.history(saga_id))
            if history.ended is not None:
                return EndOutput(outcome=str(history.outcome))
            if history.has_failed_call() or any(
                history.may_have_run(call) for call in history.calls.values()
            ):
                return _ended(self.sagacity.compensate(saga_id))
            return _ended(self.sagacity.saga(saga_id, _nothing))
        except (SagaBusyError, LeaseLostError) as error:
            raise ApplicationError(f"saga {saga_id!r}: {error}", type=BUSY) from error

    def _compensate(self) -> Callable[[], EndOutput]:
        @activity.defn(name=COMPENSATE_ACTIVITY)
        def compensate() -> EndOutput:
            return self.compensate(_saga_id())

        return compensate

    def compensate(self, saga_id: str) -> EndOutput:
        """Run the saga's compensation walk: in reverse, each compensation at most once.

        Run again (a retried activity, a new worker), the walk skips what the journal
        says is compensated already.
        """
        try:
            return _ended(self.sagacity.compensate(saga_id))
        except SagaNotFoundError:
            return EndOutput(outcome="COMPENSATED", detail="no call of the saga was journaled")
        except (SagaBusyError, LeaseLostError) as error:
            raise ApplicationError(f"saga {saga_id!r}: {error}", type=BUSY) from error

    # -- approval ----------------------------------------------------------------------

    def _decision(self) -> Callable[[DecisionInput], str]:
        @activity.defn(name=DECISION_ACTIVITY)
        def decision(asked: DecisionInput) -> str:
            saga_id = _saga_id()
            history = SagaHistory.of(saga_id, self.sagacity.history(saga_id))
            with DecisionEvents(self.sagacity, listen=False) as events:  # read, not waited on
                return decision_of(events, history, asked.call_id)

        return decision


def _arguments(tool: SagaTool, call: CallInput, history: SagaHistory, where: str) -> dict[str, Any]:
    """The call's keyword arguments: the workflow's, or, once approved, the request's."""
    arguments = call.arguments
    if call.approved is not None:
        asked = history.asked.get(call.call_id)
        if asked is None:
            raise ApplicationError(
                f"{where}: the journal has no approval request for the call",
                type="SagacityNoRequest",
                non_retryable=True,
            )
        arguments = payload_of(asked).get("input") or {}
    try:
        return rebuild_arguments(tool.func, arguments, tool_name=tool.name)
    except SerializationError as error:
        raise ApplicationError(
            f"{where}: {error}", type="SagacityBadInput", non_retryable=True
        ) from error


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


def _nothing() -> None:
    """The work of a saga ended by its workflow: its calls ran in earlier activities."""


def _ended(result: SagaResult) -> EndOutput:
    detail = ""
    report = result.compensation
    if report is not None:
        detail = str(report)
    if result.error is not None:
        detail = f"{type(result.error).__name__}: {result.error}" + (
            f"; {detail}" if detail else ""
        )
    return EndOutput(outcome=result.outcome.value, detail=detail)
