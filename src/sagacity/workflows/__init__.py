"""Workflows: ordered stages, output chaining, approval gates, pre-flight checks.

A workflow is a class declared with `workflow`, whose `stage` methods run in ascending
order, each receiving the previous stage's output. `gate` pauses a run before a stage
until a human approves the exact value the stage will receive; `check` runs
`StageCheck`s before it. A run is a saga (its id is the run id): one hash chain, the
same compensations, approval checks and stores. See `docs/workflows.md`.

Part of the core: it needs no extra.
"""

from __future__ import annotations

from sagacity.workflows._declare import (
    CheckContext,
    CheckResult,
    StageCheck,
    check,
    gate,
    stage,
    workflow,
)
from sagacity.workflows._gating import GATE_TIMEOUT_APPROVER
from sagacity.workflows._resumer import WorkflowResumer
from sagacity.workflows._runtime import WorkflowRuntime, pending_gates
from sagacity.workflows._state import (
    CheckFailedError,
    GateRequest,
    StageState,
    StageStatus,
    WorkflowHandle,
    WorkflowStatus,
)

__all__ = [
    "GATE_TIMEOUT_APPROVER",
    "CheckContext",
    "CheckFailedError",
    "CheckResult",
    "GateRequest",
    "StageCheck",
    "StageState",
    "StageStatus",
    "WorkflowHandle",
    "WorkflowResumer",
    "WorkflowRuntime",
    "WorkflowStatus",
    "check",
    "gate",
    "pending_gates",
    "stage",
    "workflow",
]
