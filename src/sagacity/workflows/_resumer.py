"""The resumer of workflow runs: a decided gate continues its run where it is registered."""

from __future__ import annotations

from sagacity._decisions import Decision, DecisionOutcome
from sagacity.errors import SagaNotFoundError
from sagacity.saga import Sagacity
from sagacity.workflows._runtime import runtimes_of
from sagacity.workflows._state import WorkflowHandle

__all__ = ["WorkflowResumer"]


class WorkflowResumer:
    """Continues a workflow run once its gate is decided, with a runtime of this process.

    `sagacity.Worker` uses one for every saga whose request journals the resumer name
    `"workflow"` (a gate), unless it is given another under that name. It finds, among
    the `WorkflowRuntime`s alive in this process on the worker's Sagacity, the one with
    the run's workflow registered, and calls its `resume(run_id)`: an approved gate runs
    its stage and the stages after it, an expired one is expired (the run compensates).
    A rejection whose undo was left to the stages' process (rejected where they are not)
    is compensated here. `resume` takes the run's lease itself (`takes_lease`).
    """

    takes_lease = True
    """The worker calls it outside any saga: `WorkflowRuntime.resume` takes the lease."""

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity

    def __call__(self, decision: Decision) -> WorkflowHandle | None:
        """Continue run `decision.saga_id` (see the class docstring).

        Raises:
            LookupError: No runtime of this process has the run's workflow registered.
        """
        run_id = decision.saga_id
        for runtime in runtimes_of(self.sagacity):
            try:
                runtime.get(run_id)
            except SagaNotFoundError:
                continue  # another runtime's workflow
            if decision.outcome is DecisionOutcome.REJECTED:
                self.sagacity.compensate(run_id)
                return runtime.get(run_id)
            return runtime.resume(run_id)
        raise LookupError(
            f"run {run_id!r}: its gate was {decision.outcome.value}, but no WorkflowRuntime "
            "of this process has its workflow registered; build the runtime before the worker "
            "runs (and keep it in a variable)"
        )
