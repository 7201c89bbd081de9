"""The ids sagacity stores and shows: saga ids and call ids, checked before anything runs."""

from __future__ import annotations

import re
from typing import Any

from sagacity._unicode import principal_name_problem
from sagacity.errors import InvalidIdError

__all__ = [
    "MAX_ID_LENGTH",
    "WORKFLOW_START_CALL",
    "require_id",
    "require_lookup",
    "require_name",
]

MAX_ID_LENGTH = 512
"""Longer than any framework's tool-call id; short enough to show in a listing."""

WORKFLOW_START_CALL = "workflow"
"""The call id of a workflow run's start (the call of the workflow's own tool): the
journal's mark of a run, read by the core to tell a workflow's gate from a tool's
request."""

# C0 and C1 controls, DEL, the line and paragraph separators, and lone surrogates: none
# survives a terminal, a log line or a UTF-8 column unchanged.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# What no backend can store or look up: NUL (PostgreSQL text) and lone surrogates (UTF-8).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def require_id(value: object, what: str) -> str:
    """Return `value` if it can be a saga or call id, else raise `InvalidIdError`.

    Total: whatever `value` is (another type, a `str` subclass with methods of its own,
    an object whose `repr` raises), the answer is a plain `str` or `InvalidIdError`.

    Args:
        value: The id.
        what: Names it in the error, such as "saga id" or "saga 'order-1': call id".
    """
    # Printable ASCII, the common case, is checked in C: a few tens of nanoseconds.
    if (
        type(value) is str
        and value.isascii()
        and value.isprintable()
        and 0 < len(value) <= MAX_ID_LENGTH
        and not value.isspace()
    ):
        return value
    if not isinstance(value, str):
        raise InvalidIdError(f"{what} must be a string, not {type(value).__name__} {_shown(value)}")
    text = str.__str__(value)  # the characters themselves, whatever a subclass overrides
    if not text.strip():
        raise InvalidIdError(f"{what} {text!r} is empty or blank; give it a visible name")
    if len(text) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"{what} {text[:40]!r}… is {len(text)} characters long; at most "
            f"{MAX_ID_LENGTH} are stored"
        )
    found = _UNSHOWABLE.search(text)
    if found is not None:
        raise InvalidIdError(
            f"{what} {text!r} holds the character U+{ord(found.group()):04X} at position "
            f"{found.start()}, which cannot be stored or shown; use printable text"
        )
    return text


def require_lookup(value: object, what: str) -> Any:
    """Return a saga id to look up or list after, refusing one no database can hold.

    Reading is more lenient than writing: a journal lists every saga id it holds, ones
    `require_id` refuses included (written before it did, or planted), and whatever a
    listing returns can be read back and paged after. An empty string sorts first;
    `bytes` is what SQLite returns for an id stored as a BLOB. Only what no backend can
    store or compare is refused: a lone surrogate (no UTF-8 form), a NUL (no PostgreSQL
    text), or a value that is not text.

    Raises:
        InvalidIdError: `value` is none of None, text, or the bytes of a listing.
    """
    if value is None or (type(value) is str and value.isascii() and "\x00" not in value):
        return value
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise InvalidIdError(f"{what} must be a string, not {type(value).__name__} {_shown(value)}")
    text = str.__str__(value)
    found = _UNSTORABLE.search(text)
    if found is not None:
        raise InvalidIdError(
            f"{what} {text[:40]!r} holds the character U+{ord(found.group()):04X} at position "
            f"{found.start()}, which cannot be stored; no saga id holds it"
        )
    return text


def _shown(value: object) -> str:
    """`repr(value)`, shortened, or a stand-in when its `repr` raises."""
    try:
        shown = repr(value)
    except Exception:  # a hostile or broken __repr__ must not replace the refusal
        return "(whose repr fails)"
    return shown if len(shown) <= 80 else f"{shown[:80]}…"


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
    problem = principal_name_problem(value)
    if problem is not None:  # a bidi override or a zero-width space reads as another name
        raise ValueError(f"{field} {value!r} is refused: {problem}")
