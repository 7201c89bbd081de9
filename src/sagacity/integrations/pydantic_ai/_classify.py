"""How PydanticAI's own exceptions are journaled when a tool raises them."""

from __future__ import annotations

import asyncio

from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry

from sagacity.tools import FailureKind

__all__ = ["classify_exception"]


def classify_exception(error: BaseException) -> FailureKind | None:
    """Classify PydanticAI's control flow and retry requests; None leaves others to sagacity.

    - `ApprovalRequired` and `CallDeferred` are control flow: the call is deferred, not
      failed, and the saga goes on.
    - `ModelRetry` asks the model to call again (with a new tool-call id): FAILED
      `retryable`, the saga goes on. A `ModelRetry` raised while a `TimeoutError` was being
      handled is how `FunctionToolset` reports a tool that ran past its `timeout`; the tool
      may have acted (an abandoned sync tool is still running), so it is in doubt.
    - `ToolFailed` and everything else fail the saga (sagacity's default).
    """
    if isinstance(error, ApprovalRequired | CallDeferred):
        return FailureKind.CONTROL_FLOW
    if isinstance(error, ModelRetry):
        if isinstance(error.__context__, TimeoutError | asyncio.CancelledError):
            return FailureKind.OUTCOME_UNKNOWN
        return FailureKind.RETRYABLE
    return None
