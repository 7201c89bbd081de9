"""How an exception raised by a tool is journaled, and what it does to the saga."""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from collections.abc import Callable

from sagacity.journal import JsonValue

__all__ = ["ExceptionClassifier", "FailureKind", "default_classifier", "error_json"]


class FailureKind(enum.Enum):
    """How an exception from a tool is journaled, and what it does to the saga."""

    FAILURE = "failure"
    """FAILED; the saga fails and compensates."""
    RETRYABLE = "retryable"
    """FAILED, marked retryable (a retry the framework asked for); the saga goes on."""
    OUTCOME_UNKNOWN = "outcome_unknown"
    """FAILED with the outcome unknown (cancelled, timed out): in doubt, never compensated;
    the saga fails."""
    CONTROL_FLOW = "control_flow"
    """The framework's own control flow (a pause, a deferral): journaled as a FAILED that
    neither fails the saga nor leaves the call in doubt, then passed on unchanged."""


ExceptionClassifier = Callable[[BaseException], FailureKind | None]
"""Returns how to journal an exception, or None to leave it to the next classifier."""

_UNKNOWN_OUTCOME_TYPES = (
    asyncio.CancelledError,
    concurrent.futures.CancelledError,
    TimeoutError,
    KeyboardInterrupt,
    SystemExit,
)


def default_classifier(error: BaseException) -> FailureKind:
    """Cancellation, timeouts and interpreter exits leave the outcome unknown; all else fails."""
    if isinstance(error, _UNKNOWN_OUTCOME_TYPES):
        return FailureKind.OUTCOME_UNKNOWN
    return FailureKind.FAILURE


MESSAGE_LIMIT = 8_000
"""Characters of an error's message journaled; the rest is cut, and counted."""


def error_json(error: BaseException) -> dict[str, JsonValue]:
    """The journaled form of an exception: its type and message, always storable.

    A message is the tool's own text: its `str()` may raise, hold lone surrogates that
    no UTF-8 column takes, or carry a whole response body. Either way the failure is
    still journaled, with what can be said; past `MESSAGE_LIMIT` characters it is cut.
    """
    try:
        message = str(error)
    except Exception as broken:  # a broken __str__ must not hide the failure itself
        message = f"<str() of the error raised {type(broken).__name__}>"
    if len(message) > MESSAGE_LIMIT:
        cut = len(message) - MESSAGE_LIMIT
        message = f"{message[:MESSAGE_LIMIT]}… [{cut:,} more characters cut]"
    if not message.isascii():
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"type": type(error).__qualname__, "message": message}
