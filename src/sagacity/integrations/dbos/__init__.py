"""Sagas inside DBOS workflows: the workflow is the saga, its tool calls are steps.

```python
steps = SagaSteps(sagacity, [Payments()])  # once, at import time

@DBOS.workflow()
def transfer(amount: str, iban: str) -> str:
    with DBOSSaga(steps) as saga:
        saga.call("charge", amount=amount)
        return saga.call("wire", to=iban, amount=amount)  # IRREVERSIBLE: waits for a human
```

DBOS owns durability (the workflow's checkpoints, recovery, `recv`/`send`); sagacity owns
the effects (INTENT/EXECUTED in the journal), the compensation walk and approval. See
`docs/integrations/dbos.md`.
"""

from __future__ import annotations

try:
    import dbos as _dbos  # noqa: F401  (only checks that the extra is installed)
except ImportError as error:  # pragma: no cover - exercised with the extra missing
    raise ImportError(
        "sagacity.integrations.dbos needs DBOS: pip install 'sagacity[dbos]'"
    ) from error

from sagacity.integrations.dbos._saga import DBOSSaga, SagaEndedError
from sagacity.integrations.dbos._steps import (
    DBOS_RESUMER,
    DecisionRelay,
    SagaSteps,
    decision_topic,
)

__all__ = [
    "DBOS_RESUMER",
    "DBOSSaga",
    "DecisionRelay",
    "SagaEndedError",
    "SagaSteps",
    "decision_topic",
]
