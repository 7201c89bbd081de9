"""Ending a saga whose calls came over MCP: `end_saga`, `sagacity/end`, `sagacity/compensate`.

Servers and proxies answer both requests (and the control tools) with these handlers.
"""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS

from sagacity.adapter import payload_of
from sagacity.errors import SagacityError, SagaNotFoundError, SagaStateError
from sagacity.integrations.mcp._sagas import open_sagas, read_history
from sagacity.integrations.mcp._wire import EndSagaParams, EndSagaResult
from sagacity.saga import Sagacity, SagaResult

__all__ = ["end_saga", "handle_compensate_request", "handle_end_request"]


async def end_saga(sagacity: Sagacity, saga_id: str) -> SagaResult:
    """End a saga whose calls came over MCP, from the server's side.

    Waits for the saga's calls still running in this process, then reads the journal:
    a failed call, or one that may have had its effect with no result known (an unknown
    outcome, an INTENT without an outcome, a control-flow exit not sent again),
    compensates the saga in reverse order, the latter listed in doubt (NEEDS_ATTENTION);
    an approval request still pending leaves it open with outcome AWAITING_APPROVAL
    (approve and call again, or `Sagacity.reject`); otherwise it ends COMPLETED. Ending a
    saga that has ended returns its recorded outcome.

    Raises:
        SagaNotFoundError: The journal has nothing for `saga_id`.
        SagaStateError: The saga is being ended already.
    """
    return await open_sagas(sagacity).end(saga_id)


async def handle_end_request(sagacity: Sagacity, params: EndSagaParams) -> EndSagaResult:
    """Serve a `sagacity/end` request: refusals become MCP errors naming the saga."""
    try:
        result = await end_saga(sagacity, params.saga_id)
    except (SagaNotFoundError, SagaStateError) as error:
        raise MCPError(code=INVALID_PARAMS, message=str(error)) from error
    except SagacityError as error:
        raise MCPError(code=INTERNAL_ERROR, message=str(error)) from error
    return await _answer(sagacity, result)


async def _answer(sagacity: Sagacity, result: SagaResult) -> EndSagaResult:
    """The wire answer for `result`: the lists of the saga's ENDED entry once it has one."""
    ended = (await read_history(sagacity, result.saga_id)).ended
    payload = payload_of(ended) if ended is not None else None
    return EndSagaResult.of(result, payload)


_RETRIED_OUTCOMES = frozenset({"COMPENSATED", "COMPENSATION_FAILED", "NEEDS_ATTENTION"})
"""The outcomes whose compensation walk may be run again: COMPLETED has nothing to undo."""


async def handle_compensate_request(sagacity: Sagacity, params: EndSagaParams) -> EndSagaResult:
    """Serve a `sagacity/compensate` request: run an ended saga's compensations again.

    Only a saga that ended compensating is walked again (COMPENSATION_FAILED, or
    NEEDS_ATTENTION after its calls in doubt were resolved, or COMPENSATED, which
    answers the same again): an open saga is ended with `sagacity/end`, and a COMPLETED
    one is never undone by a retry. The walk never repeats an undo journaled COMPENSATED.
    """
    saga_id = params.saga_id
    history = await read_history(sagacity, saga_id)
    if not history.entries:
        raise MCPError(code=INVALID_PARAMS, message=f"saga {saga_id!r} has no journal entries")
    if history.ended is None:
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"saga {saga_id!r} is still open; end it with sagacity/end first",
        )
    if history.outcome not in _RETRIED_OUTCOMES:
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"saga {saga_id!r} ended {history.outcome}: there is nothing to compensate",
        )
    sagas = open_sagas(sagacity)
    with sagas.ending(saga_id):
        try:
            result = await sagacity.acompensate(saga_id)
        except SagaStateError as error:
            raise MCPError(code=INVALID_PARAMS, message=str(error)) from error
        except SagacityError as error:
            raise MCPError(code=INTERNAL_ERROR, message=str(error)) from error
    return await _answer(sagacity, result)
