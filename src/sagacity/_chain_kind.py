"""Which of the journal's chains are sagas, and which are standing grants'.

A standing grant's chain (`sagacity.approval._grants`) is journaled beside the sagas, as
the saga id `grant-<id>`, and begins with its GRANTED entry; a saga never does (only a
grant journals GRANTED). The first entry tells the two apart, not the id: an
application's saga may be called `grant-…` and stays a saga. The saga listings
(`sagacity sagas`, doubts, the inbox, `GET /sagacity/sagas`) leave grant chains out, and
every action on a saga (run, resume, compensate, resolve, decide) refuses one: acting on
it would append a saga's entry to the grant, which then covers nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from sagacity.errors import SagaStateError
from sagacity.journal import JournalEntry, Phase

__all__ = ["GRANT_STATUS", "grant_id_of", "refuse_grant_chain"]

GRANT_STATUS = "GRANT"
"""The status a grant's chain is shown with where one saga id is looked up (`show`)."""

_PREFIX = "grant-"


def grant_id_of(saga_id: str, entries: Sequence[JournalEntry]) -> str | None:
    """The grant whose chain `entries` are (its first entry is GRANTED); None for a saga."""
    if not entries or entries[0].phase is not Phase.GRANTED:
        return None
    payload = entries[0].payload
    named = payload.get("grant_id") if isinstance(payload, dict) else None
    if isinstance(named, str) and named:
        return named
    return saga_id.removeprefix(_PREFIX)


def refuse_grant_chain(saga_id: str, entries: Sequence[JournalEntry]) -> None:
    """Refuse to act, as on a saga, on a standing grant's chain.

    Raises:
        SagaStateError: `entries` begin with GRANTED: they are grant `<id>`'s chain.
    """
    grant_id = grant_id_of(saga_id, entries)
    if grant_id is not None:
        raise SagaStateError(
            f"saga {saga_id!r} is the chain of standing grant {grant_id!r}, not a saga: it "
            "cannot be run, resumed, compensated or resolved; see the grant with "
            f"'sagacity grants', and end it with 'sagacity revoke {grant_id}'"
        )
