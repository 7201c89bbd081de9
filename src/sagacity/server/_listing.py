"""Listing sagas: a page of how each stands and who works on it, from a given time.

`GET /sagacity/sagas` answers with a `SagaListPage`; its `since` is read by `since_of`.
"""

from __future__ import annotations

import datetime
import re

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict

from sagacity._lease_view import Worker, is_stalled
from sagacity._summary import SagaSummary
from sagacity.server._models import SagaSummaryModel

__all__ = ["SagaListItem", "SagaListPage", "WorkerModel", "since_of"]


class WorkerModel(BaseModel):
    """Who works on a saga that has not ended, read from its lease (docs/server.md)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    live: bool
    """A worker holds the saga's lease now."""
    holder: str | None
    """The lease's holder (host:pid:…); null when the lease was let go or never taken."""
    expires_at: str | None
    """When the holder's lease expires (RFC 3339 UTC); null when it was let go."""
    since: str | None
    """With no live worker: since when; null while one holds it, or when `gone`."""
    gone: bool
    """Its lease runs, but its holder's process, on this server's host, is gone."""


class SagaListItem(SagaSummaryModel):
    """How one saga stands, and who works on it."""

    worker: WorkerModel | None = None
    """null for a saga that ended."""
    stalled: bool = False
    """An OPEN saga that no live worker holds: its worker died, or nothing runs it."""

    @classmethod
    def of_worker(cls, summary: SagaSummary, worker: Worker | None) -> SagaListItem:
        return cls.model_validate(
            {
                **summary.to_json(),
                "worker": None if worker is None else worker.to_json(),
                "stalled": is_stalled(summary, worker),
            }
        )


class SagaListPage(BaseModel):
    """One page of sagas, by ascending saga id."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    sagas: list[SagaListItem]
    next_cursor: str | None
    """Pass as `cursor` for the next page; null when there is no more."""


_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def since_of(value: str | None) -> str | None:
    """An RFC 3339 time as the journal writes `recorded_at` (UTC, microseconds, Z).

    Taken as text, not as pydantic's lax datetime, which would read `-44798` as a Unix
    time. A leap second (`:60`) counts as `:59`; digits past the microsecond are dropped.
    """
    if value is None:
        return None
    found = _RFC3339.fullmatch(value)
    moment = None
    if found is not None:
        date, minutes, seconds, fraction, offset = found.groups()
        seconds = "59" if seconds == "60" else seconds
        fraction = ((fraction or "") + "000000")[:6]
        offset = "+00:00" if offset in ("Z", "z") else offset
        try:
            moment = datetime.datetime.fromisoformat(
                f"{date}T{minutes}:{seconds}.{fraction}{offset}"
            )
        except ValueError:
            moment = None
    if moment is None:
        raise HTTPException(
            422, detail=f"since={value!r} is not an RFC 3339 time such as 2026-12-01T09:00:00Z"
        )
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
