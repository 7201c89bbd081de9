"""The ids sagacity stores and shows: saga ids and call ids, checked before anything runs."""

from __future__ import annotations

import re

from sagacity.errors import InvalidIdError

__all__ = ["MAX_ID_LENGTH", "WORKFLOW_START_CALL", "require_id", "require_name"]

MAX_ID_LENGTH = 512
"""Longer than any framework's tool-call id; short enough to show in a listing."""

WORKFLOW_START_CALL = "workflow"
"""The call id of a workflow run's start (the call of the workflow's own tool): the
journal's mark of a run, read by the core to tell a workflow's gate from a tool's
request."""

# C0 and C1 controls, DEL, the line and paragraph separators, and lone surrogates: none
# survives a terminal, a log line or a UTF-8 column unchanged.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def require_id(value: object, what: str) -> str:
    """Return `value` if it can be a saga or call id, else raise `InvalidIdError`.

    Args:
        value: The id.
        what: Names it in the error, such as "saga id" or "saga 'order-1': call id".
    """
    if not isinstance(value, str):
        raise InvalidIdError(f"{what} must be a string, not {type(value).__name__} {value!r}")
    if not value.strip():
        raise InvalidIdError(f"{what} {value!r} is empty or blank; give it a visible name")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"{what} {value[:40]!r}… is {len(value)} characters long; at most "
            f"{MAX_ID_LENGTH} are stored"
        )
    found = _UNSHOWABLE.search(value)
    if found is not None:
        raise InvalidIdError(
            f"{what} {value!r} holds the character U+{ord(found.group()):04X} at position "
            f"{found.start()}, which cannot be stored or shown; use printable text"
        )
    return value


def require_name(value: object, field: str) -> None:
    """Refuse an approver or resolver that names nobody, or names someone ambiguously.

    A name is compared exactly (four eyes, N distinct approvers): 'bob ' would be another
    principal than 'bob', so spaces around a name are refused rather than kept or cut.
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} must name a person or service, not {value!r}")
    if value != value.strip():
        raise ValueError(
            f"{field} {value!r} has spaces around it; give the name as it is recorded "
            f"({value.strip()!r})"
        )
