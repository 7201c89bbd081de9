"""Sagas inside Temporal workflows: the workflow is the saga, its tool calls are activities.

```python
# the worker
activities = SagaActivities(sagacity, sagacity.wrap(Payments()))
worker = Worker(client, task_queue="orders", workflows=[Order], activities=activities.all,
                activity_executor=ThreadPoolExecutor(16))

# the workflow (deterministic: it never touches the journal)
with workflow.unsafe.imports_passed_through():
    from sagacity.integrations.temporal import TemporalSaga

@workflow.defn
class Order:
    @workflow.run
    async def run(self, order: dict) -> str:
        async with TemporalSaga() as saga:
            charge = await saga.call("charge", amount=order["amount"])
            return await saga.call("wire", to=order["iban"], amount=order["amount"])
```

Temporal owns durability and scheduling (the workflow's history, retries, timers,
signals); sagacity owns the effects (INTENT/EXECUTED in the journal), the compensation
walk and approval. See `docs/integrations/temporal.md`.
"""

from __future__ import annotations

try:
    import temporalio as _temporalio  # noqa: F401  (only checks that the extra is installed)
except ImportError as error:  # pragma: no cover - exercised with the extra missing
    raise ImportError(
        "sagacity.integrations.temporal needs the Temporal SDK: pip install 'sagacity[temporal]'"
    ) from error

from sagacity.integrations.temporal._activities import SagaActivities
from sagacity.integrations.temporal._decision import DecisionRelay
from sagacity.integrations.temporal._wire import (
    DECISION_SIGNAL,
    TEMPORAL,
    CallInput,
    CallOutput,
    EndOutput,
)
from sagacity.integrations.temporal._workflow import (
    SAGA_RETRY_POLICY,
    SagaEndedError,
    TemporalSaga,
)

__all__ = [
    "DECISION_SIGNAL",
    "SAGA_RETRY_POLICY",
    "TEMPORAL",
    "CallInput",
    "CallOutput",
    "DecisionRelay",
    "EndOutput",
    "SagaActivities",
    "SagaEndedError",
    "TemporalSaga",
]
