"""Saga leases: one worker at a time runs, resumes, compensates or resolves a saga.

A lease is a row per saga in the journal's own database: who holds it, until when, and
a fencing token that grows by one at every acquisition. Every append its holder makes
names the token, and the journal refuses it once the token is no longer the saga's: a
holder that stalled past its expiry and was taken over cannot write behind the new
holder. Taking over a lease that expired unreleased journals TAKEN_OVER with it, in one
commit (PostgreSQL's fast path relies on it: docs/postgres.md, Leases).
"""

from __future__ import annotations

import dataclasses
import datetime

from sagacity.errors import LeaseLostError, SagaBusyError

__all__ = ["RELEASED", "SagaLease", "busy", "lease_time", "lost"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SagaLease:
    """One worker's hold on a saga."""

    saga_id: str
    """The saga held."""
    owner: str
    """Who holds it: host, process and a random part, for the messages of others."""
    token: int
    """The fencing token: appends made under the lease are written only while it holds."""
    expires_at: datetime.datetime
    """When another worker may take the saga over, unless the lease is renewed."""
    head_seq: int | None = None
    """The saga's last seq when the lease was taken, its TAKEN_OVER included (0: no
    entries), or None where the journal did not say: a saga opened on a lease taken at 0
    has nothing to read."""


RELEASED = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
"""The expiry a released lease is given: any worker may take it at once."""


def lease_time(moment: datetime.datetime) -> str:
    """A lease time as stored in SQLite: UTC, six fraction digits, `Z`; sorts as it compares."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def busy(held: SagaLease) -> SagaBusyError:
    """The refusal of a lease another worker holds."""
    return SagaBusyError(
        f"saga {held.saga_id!r} is held by {held.owner} until {held.expires_at.isoformat()}: "
        "another worker is running, resuming or compensating it; try again once it is "
        "done, or after that time if the worker died"
    )


def lost(lease: SagaLease) -> LeaseLostError:
    """The refusal of an append or a renewal by a holder that was taken over."""
    return LeaseLostError(
        f"saga {lease.saga_id!r}: the lease of {lease.owner} (token {lease.token}) was taken "
        "over by another worker after it expired; nothing was written, and this worker "
        "must leave the saga to the new holder"
    )
