"""The runs of a runtime's workflows, read from the journal: `WorkflowRuntime`'s base.

A run is a saga whose id is the run id and whose first call starts a registered
workflow. A gate whose approval request a crash kept from the approval store is read
from its journal entry, and stored again under the run's lease.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from sagacity._history import SagaHistory
from sagacity.approval import ApprovalRequest
from sagacity.approval._check import journaled_request
from sagacity.errors import ConfigurationError, SagaNotFoundError
from sagacity.saga import Sagacity
from sagacity.workflows._declare import workflow_of
from sagacity.workflows._definition import (
    START_CALL,
    PlannedWorkflow,
    WorkflowDefinition,
    plan,
    register,
)
from sagacity.workflows._state import WorkflowHandle, WorkflowStatus, read_run

__all__ = ["WorkflowRuns"]


class WorkflowRuns:
    """The workflows registered on a `Sagacity`, and their runs as the journal has them.

    Args:
        sagacity: Whose journal and approval store the runs use.
        workflows: `workflow` classes (built with no arguments) or their instances.

    Raises:
        ConfigurationError: A declaration is wrong (see `WorkflowRuntime`).
    """

    def __init__(self, sagacity: Sagacity, workflows: Iterable[object]) -> None:
        self.sagacity = sagacity
        """The `Sagacity` the runs are sagas of."""
        planned: dict[str, PlannedWorkflow] = {}
        for source in workflows:
            cls = source if isinstance(source, type) else type(source)
            declared = workflow_of(cls)
            if declared is not None and declared.name in planned:
                other = planned[declared.name].owner.__qualname__
                raise ConfigurationError(
                    f"two workflows are named {declared.name!r} ({other} and "
                    f"{cls.__qualname__}); give each workflow its own name"
                )
            checked = plan(sagacity, source)
            planned[checked.definition.name] = checked
        # Every workflow is checked before any is registered: a runtime refused leaves
        # the Sagacity as it was, and the corrected runtime can be built on it.
        self._definitions: dict[str, WorkflowDefinition] = {
            d.name: d for d in register(sagacity, list(planned.values()))
        }

    @property
    def workflows(self) -> tuple[str, ...]:
        """The names of the workflows this runtime runs."""
        return tuple(self._definitions)

    def definition(self, name: str) -> WorkflowDefinition:
        """The checked declarations of workflow `name`.

        Raises:
            ConfigurationError: No workflow of that name is registered here.
        """
        try:
            return self._definitions[name]
        except KeyError:
            raise ConfigurationError(
                f"no workflow named {name!r} is registered in this runtime; registered: "
                f"{sorted(self._definitions)}"
            ) from None

    # -- reading ----------------------------------------------------------------------------

    def get(self, run_id: str) -> WorkflowHandle:
        """How run `run_id` stands, read from the journal.

        Raises:
            SagaNotFoundError: No run of a workflow registered here has this id.
        """
        history = self._history(run_id)
        return self._read(self._definition_of(history), history, self.sagacity.pending(run_id))

    def list(self, status: WorkflowStatus | str | None = None) -> builtins.list[WorkflowHandle]:
        """The runs of the workflows registered here, oldest saga id first; or those in `status`.

        Reads every saga's journal: meant for an operator's page, not a hot loop.
        """
        wanted = None if status is None else WorkflowStatus(status)
        pending = self.sagacity.pending()
        found = []
        after: str | None = None
        while True:
            page = self.sagacity.journal.list_sagas(after=after, limit=200)
            for saga_id in page:
                history = SagaHistory.of(saga_id, self.sagacity.journal.entries(saga_id))
                definition = self._registered(history)
                if definition is None:
                    continue
                handle = self._read(definition, history, pending)
                if wanted is None or handle.status is wanted:
                    found.append(handle)
            if len(page) < 200:
                return found
            after = page[-1]

    # -- internals --------------------------------------------------------------------------

    def _history(self, run_id: str) -> SagaHistory:
        history = self.sagacity.approval.history(run_id)
        if not history.entries:
            raise SagaNotFoundError(f"run {run_id!r} has no journal entries")
        return history

    def _registered(self, history: SagaHistory) -> WorkflowDefinition | None:
        start = history.latest_call.get(START_CALL)
        if start is None or start.intent.seq != 1:
            return None
        return self._definitions.get(start.intent.tool_name or "")

    def _definition_of(self, history: SagaHistory) -> WorkflowDefinition:
        definition = self._registered(history)
        if definition is None:
            raise SagaNotFoundError(
                f"saga {history.saga_id!r} is not a run of a workflow registered here "
                f"({sorted(self._definitions)})"
            )
        return definition

    def _read(
        self,
        definition: WorkflowDefinition,
        history: SagaHistory,
        pending: builtins.list[ApprovalRequest],
    ) -> WorkflowHandle:
        """The run's handle; a gate whose request a crash kept from the store shows too."""
        known = {r.request_id for r in pending}
        lost = self._lost_requests(definition, history, known)
        return read_run(definition, history, [*pending, *lost])

    def _restore_gate(self, definition: WorkflowDefinition, history: SagaHistory) -> bool:
        """Store again the request of a gate whose store write a crash lost; True if one was.

        Call it holding the run's lease: nobody else asks, runs or consumes a gate
        meanwhile.
        """
        lost = self._lost_requests(definition, history)
        for request in lost:
            self.sagacity.approvals.save(request)
        return bool(lost)

    def _lost_requests(
        self,
        definition: WorkflowDefinition,
        history: SagaHistory,
        known: frozenset[str] | set[str] = frozenset(),
    ) -> builtins.list[ApprovalRequest]:
        """The requests of gates that wait in the journal and are missing from the store.

        A process killed between a gate's AWAITING_APPROVAL entry and its store write
        leaves such a gate: nobody could approve or reject it. The entry records all of
        the request (id, input, hash, reason, expiry, policy), which is rebuilt from it,
        asked at the entry's `recorded_at`.
        """
        lost: builtins.list[ApprovalRequest] = []
        if history.ended is not None:
            return lost
        for awaiting in history.open_requests():
            call_id = awaiting.call_id or ""
            if history.asked.get(call_id) is not awaiting:
                continue  # asked again since: the later request is the gate's
            declared = next((s for s in definition.stages if s.call_id == call_id), None)
            if declared is None or awaiting.tool_name != declared.tool.name:
                continue
            request = journaled_request(history.saga_id, awaiting)
            if request.request_id in known:
                continue  # pending: stored
            if self.sagacity.approvals.get(request.request_id) is None:
                lost.append(request)
        return lost

    def _lost_gate(self, definition: WorkflowDefinition, history: SagaHistory) -> bool:
        """Restore a lost gate request under the run's lease (see `_lost_requests`)."""
        if not self._lost_requests(definition, history):
            return False
        with self.sagacity.join(history.saga_id):
            return self._restore_gate(definition, self._history(history.saga_id))
