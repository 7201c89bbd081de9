"""`AgentSaga`: the `TemporalSaga` an agent framework's loop runs inside, in a workflow.

An agent framework's tools (PydanticAI's durable toolsets, the OpenAI Agents SDK's
workflow tools) find the open `AgentSaga` here and wait in it for a human's decision. It
imports no agent framework.
"""

from __future__ import annotations

import contextvars
from types import TracebackType

from sagacity.integrations.temporal._workflow import SagaEndedError, TemporalSaga

__all__ = ["AgentSaga", "open_agent_saga"]

_open_saga: contextvars.ContextVar[AgentSaga | None] = contextvars.ContextVar(
    "sagacity_temporal_agent_saga", default=None
)


def open_agent_saga() -> AgentSaga | None:
    """The `AgentSaga` open around the running workflow code, if any."""
    return _open_saga.get()


class AgentSaga(TemporalSaga):
    """A `TemporalSaga` around a durable agent run: its tools' approvals wait in it.

    ```python
    async with AgentSaga():
        result = await agent.run(prompt)
    ```

    As `TemporalSaga`: leaving the block normally ends the saga COMPLETED, or, when a call
    failed that the agent loop turned into a message for the model, compensates it and
    raises `SagaEndedError`; leaving it by an exception compensates. While it is open, an
    IRREVERSIBLE call of sagacity's agent tools waits in it for the human's journaled
    decision. A refusal (a rejected or expired request) ends the saga compensated even if
    the agent loop caught it and went on.
    """

    _refusal: SagaEndedError | None = None

    async def __aenter__(self) -> AgentSaga:
        self._token = _open_saga.set(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _open_saga.reset(self._token)
        refusal = self._refusal
        if exc is None and refusal is not None:
            # The loop swallowed the refusal: the saga ends as if it had been raised.
            await super().__aexit__(type(refusal), refusal, None)
            raise refusal
        await super().__aexit__(exc_type, exc, traceback)

    async def wait_for_decision(self, call_id: str, request_id: str) -> str:
        """approved, rejected or expired: the journal's decision on the call's request.

        Waits durably (a timer, and the `sagacity.decision` signal that `DecisionRelay`
        sends), asking the journal through an activity, never from workflow code.
        """
        return await self._decision(call_id, request_id)

    def refused(self, error: SagaEndedError) -> SagaEndedError:
        """Note that a call was refused (its request rejected or expired); return `error`."""
        self._refusal = error
        return error
