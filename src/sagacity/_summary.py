"""How each saga stands, one line per saga, and the calls in doubt across sagas.

Read from the journal alone (no extra): the CLI's `sagacity sagas` / `sagacity doubts`
and the server's `GET /sagacity/sagas` and `GET /sagacity/doubts` use these functions.

Paging is by saga id, ascending: ids never change, so a cursor (the last saga id of a
page) stays valid while sagas are added, and no saga is skipped or shown twice. Paging by
last activity would move a saga between pages as it runs.

Entries are read in batches of consecutive sagas (`list_entries`), not saga by saga: the
first page of 50 sagas out of 10,000 costs about one query. A batch holding a row that
cannot be read (edited outside sagacity) falls back to reading its sagas one at a time,
so one broken saga is listed as `UNREADABLE` with the reason and the others as usual.

A standing grant's chain (its first entry is GRANTED, see `_chain_kind`) is not a saga:
the listings and the doubts leave it out (`sagacity grants` lists grants), and looked up by
its id it has the status `GRANT`, never `OPEN`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from sagacity._chain_kind import GRANT_STATUS, grant_id_of
from sagacity._history import CONTROL_FLOW, OUTCOME_UNKNOWN, CallState, SagaHistory, payload_of
from sagacity._verdicts import last_verdict
from sagacity.approval._policy import recorded_starter
from sagacity.errors import JournalError, SagaNotFoundError
from sagacity.journal import JournalEntry, Phase, SideEffectJournal

__all__ = [
    "STATUSES",
    "InDoubtCall",
    "SagaSummary",
    "SummaryPage",
    "iter_doubts",
    "list_doubts",
    "list_summaries",
    "summarize",
    "summary_of",
]

STATUSES = frozenset(
    {
        "COMPLETED",
        "COMPENSATED",
        "COMPENSATION_FAILED",
        "NEEDS_ATTENTION",
        "AWAITING_APPROVAL",
        "SUSPENDED",
        "OPEN",
        "UNREADABLE",
    }
)
"""Every status a summary may have: an ENDED outcome, or how an open saga stands."""

_BATCH = 1000
_FALLBACK = 100  # sagas read one at a time after a batch that cannot be read
_LAST_SEQ = 2**62  # past any seq: `after=(saga_id, _LAST_SEQ)` skips the rest of a saga


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SagaSummary:
    """How one saga stands, read from its journal."""

    saga_id: str
    """The saga."""
    status: str
    """The outcome of its ENDED entry; for an open saga `AWAITING_APPROVAL` (a request
    is open), else `OPEN`; `UNREADABLE` when its journal cannot be read; `GRANT` for a
    standing grant's chain looked up by its id (never listed)."""
    entries: int
    """How many journal entries it has."""
    first_at: str | None
    """When its first entry was recorded (RFC 3339 UTC)."""
    last_at: str | None
    """When its last entry was recorded: its last activity."""
    pending: int
    """How many approval requests are open (asked, neither rejected nor run)."""
    in_doubt: int
    """How many calls or compensations are in doubt (see `InDoubtCall`): calls, not
    attempts."""
    started_by: str | None = None
    """The principal recorded as starting the saga, if one was."""
    problem: str | None = None
    """For an `UNREADABLE` saga: why its journal cannot be read."""

    def to_json(self) -> dict[str, object]:
        """The summary as a JSON object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SummaryPage:
    """One page of `list_summaries`."""

    summaries: list[SagaSummary]
    """The sagas of this page, by ascending saga id."""
    next_cursor: str | None
    """Pass as `cursor` for the next page; None when there is no more."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InDoubtCall:
    """A call, or its compensation, that may have taken effect with nobody knowing."""

    saga_id: str
    """The saga."""
    call_id: str
    """The call: what `Sagacity.resolve` (or `resolve_compensation`) takes."""
    tool_name: str
    """The tool called."""
    seq: int
    """The entry that is in doubt: the call's INTENT, or its compensation's COMPENSATING
    (or unknown COMPENSATION_FAILED)."""
    kind: str
    """`"call"`: the tool's outcome is unknown (resolve with `Sagacity.resolve`);
    `"compensation"`: its compensation's outcome is unknown (`resolve_compensation`)."""
    reason: str
    """Why it is in doubt, from the journal."""
    recorded_at: str
    """When the doubtful entry was recorded."""
    saga_status: str
    """The saga's status: a call of a saga still `OPEN` may simply be running."""
    reconciled: dict[str, Any] | None = None
    """The latest verdict of its reconciler on it (`_verdicts.Finding`: the verdict,
    `decided_by`, the evidence, the failure of one that raised or timed out); None when no
    reconciler has answered (none is declared, or none was asked yet)."""

    def to_json(self) -> dict[str, object]:
        """The call as a JSON object."""
        return dataclasses.asdict(self)


def _status(history: SagaHistory) -> str:
    outcome = history.outcome
    if outcome is not None:
        return outcome
    if history.open_requests():
        return "AWAITING_APPROVAL"
    # The framework paused a call (its control flow) and nothing ran it since: the run
    # ended SUSPENDED, which the journal shows as that call's latest outcome.
    if any(call.kind == CONTROL_FLOW for call in history.latest_call.values()):
        return "SUSPENDED"
    return "OPEN"


def _doubts(history: SagaHistory, status: str) -> Iterator[InDoubtCall]:
    """The saga's calls in doubt, once each: a call retried under one id is one call.

    A call whose several attempts are in doubt is listed at its latest, the one
    `Sagacity.resolve` settles.
    """
    found: dict[tuple[str, str], InDoubtCall] = {}
    for call in sorted(history.calls.values(), key=lambda c: c.intent.seq):
        if history.may_have_run(call):
            doubt = _doubt(history, call, call.intent, "call", _call_reason(call), status)
        elif call.executed and not call.compensated and call.compensation_in_doubt:
            entry = call.compensating or call.compensation
            assert entry is not None
            reason = "its compensation started and no outcome was journaled"
            if entry.phase is Phase.COMPENSATION_FAILED:
                reason = f"its compensation's outcome is unknown: {payload_of(entry).get('error')}"
            doubt = _doubt(history, call, entry, "compensation", reason, status)
        else:
            continue
        key = (doubt.call_id, doubt.kind)
        found.pop(key, None)  # a later attempt: listed where it stands
        found[key] = doubt
    yield from found.values()


def _call_reason(call: CallState) -> str:
    if call.outcome is None:
        return "INTENT journaled with no outcome: the tool may have run"
    kind = call.kind
    error = payload_of(call.outcome).get("error")
    if kind == OUTCOME_UNKNOWN:
        return f"its outcome is unknown: {error}"
    return f"the call was left mid-way ({kind}): {error}"


def _doubt(
    history: SagaHistory,
    call: CallState,
    entry: JournalEntry,
    kind: str,
    reason: str,
    status: str,
) -> InDoubtCall:
    return InDoubtCall(
        saga_id=history.saga_id,
        call_id=call.intent.call_id or "",
        tool_name=call.intent.tool_name or "",
        seq=entry.seq,
        kind=kind,
        reason=reason,
        recorded_at=entry.recorded_at,
        saga_status=status,
        reconciled=last_verdict(history, call.intent.call_id or "", kind),
    )


def summary_of(saga_id: str, entries: list[JournalEntry]) -> SagaSummary:
    """Summarize a saga from its entries (in seq order); a grant's chain is a `GRANT`."""
    if grant_id_of(saga_id, entries) is not None:
        return SagaSummary(
            saga_id=saga_id,
            status=GRANT_STATUS,
            entries=len(entries),
            first_at=entries[0].recorded_at,
            last_at=entries[-1].recorded_at,
            pending=0,
            in_doubt=0,
        )
    history = SagaHistory.of(saga_id, entries)
    status = _status(history)
    return SagaSummary(
        saga_id=saga_id,
        status=status,
        entries=len(entries),
        first_at=entries[0].recorded_at if entries else None,
        last_at=entries[-1].recorded_at if entries else None,
        pending=len(history.open_requests()) if history.ended is None else 0,
        in_doubt=sum(1 for _ in _doubts(history, status)),
        started_by=recorded_starter(history),
    )


def _unreadable(saga_id: str, error: JournalError) -> SagaSummary:
    return SagaSummary(
        saga_id=saga_id,
        status="UNREADABLE",
        entries=0,
        first_at=None,
        last_at=None,
        pending=0,
        in_doubt=0,
        problem=str(error),
    )


def summarize(journal: SideEffectJournal, saga_id: str) -> SagaSummary:
    """Summarize one saga.

    Raises:
        SagaNotFoundError: The journal has no entries for `saga_id`.
        JournalError: Its entries cannot be read.
    """
    entries = journal.entries(saga_id)
    if not entries:
        raise SagaNotFoundError(f"saga {saga_id!r} has no journal entries")
    return summary_of(saga_id, entries)


def _iter_histories(
    journal: SideEffectJournal, after: str | None, *, first_batch: int = _BATCH
) -> Iterator[tuple[str, list[JournalEntry] | JournalError]]:
    """Yield (saga_id, entries) by ascending saga id after `after`, a batch at a time.

    The first batch holds `first_batch` entries, each next one twice as many up to
    `_BATCH`: a page of 50 sagas reads about what it shows, a long scan few queries.
    """
    size = max(1, min(first_batch, _BATCH))
    position: tuple[str, int] | None = (after, _LAST_SEQ) if after is not None else None
    current: str | None = None
    collected: list[JournalEntry] = []
    one_by_one = 0
    while True:
        if one_by_one:
            # A batch held a row that cannot be read: read the next sagas one at a time
            # (a broken one is yielded as its error), then try batches again.
            one_by_one -= 1
            saga_id = current
            if saga_id is None:
                ids = journal.list_sagas(after=position[0] if position else None, limit=1)
                if not ids:
                    return
                saga_id = ids[0]
            try:
                yield saga_id, journal.entries(saga_id)
            except JournalError as error:
                yield saga_id, error
            current, collected = None, []
            position = (saga_id, _LAST_SEQ)
            continue
        try:
            batch = journal.list_entries(after=position, limit=size)
        except JournalError:
            one_by_one = _FALLBACK
            continue
        for entry in batch:
            if entry.saga_id != current:
                if current is not None:
                    yield current, collected
                current, collected = entry.saga_id, []
            collected.append(entry)
        if len(batch) < size:
            if current is not None:
                yield current, collected
            return
        position = (batch[-1].saga_id, batch[-1].seq)
        size = min(2 * size, _BATCH)


def list_summaries(
    journal: SideEffectJournal,
    *,
    status: str | None = None,
    since: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    scan: int | None = None,
) -> SummaryPage:
    """List sagas by ascending saga id, `limit` at a time.

    Args:
        journal: The journal to read.
        status: Only sagas with this status (see `STATUSES`).
        since: Only sagas whose last activity is at or after this RFC 3339 UTC time.
        limit: At most this many summaries (1 to 1000).
        cursor: The `next_cursor` of the previous page; None for the first page.
        scan: With a filter, read at most this many sagas for one page (default
            `max(20 * limit, 1000)`), so that a rare status costs bounded time: a page
            may then hold fewer than `limit` sagas with `next_cursor` still set. Keep
            paging while `next_cursor` is not None.

    Raises:
        ValueError: `limit` is out of range or `status` is unknown.
    """
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit must be between 1 and 1000, not {limit}")
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown status {status!r}; use one of {sorted(STATUSES)}")
    budget = scan if scan is not None else max(20 * limit, 1000)
    found: list[SagaSummary] = []
    # A saga of a few calls has about 4 entries per call and 2 more: guess 8 per saga.
    histories = _iter_histories(journal, cursor, first_batch=8 * (limit + 1))
    for scanned, (saga_id, entries) in enumerate(histories, start=1):
        if isinstance(entries, JournalError):
            summary = _unreadable(saga_id, entries)
        elif grant_id_of(saga_id, entries) is not None:
            if scanned >= budget and len(found) < limit:
                return SummaryPage(summaries=found, next_cursor=saga_id)
            continue  # a grant's chain: `sagacity grants` lists it
        else:
            summary = summary_of(saga_id, entries)
        if len(found) == limit:
            # One saga past a full page: there is more, and the page ends before it.
            return SummaryPage(summaries=found, next_cursor=found[-1].saga_id)
        if _matches(summary, status, since):
            found.append(summary)
        if scanned >= budget and len(found) < limit:
            return SummaryPage(summaries=found, next_cursor=saga_id)
    return SummaryPage(summaries=found, next_cursor=None)


def _matches(summary: SagaSummary, status: str | None, since: str | None) -> bool:
    if status is not None and summary.status != status:
        return False
    # RFC 3339 UTC times with a fixed format compare as text.
    return since is None or (summary.last_at is not None and summary.last_at >= since)


def iter_doubts(journal: SideEffectJournal, *, saga_id: str | None = None) -> Iterator[InDoubtCall]:
    """Yield the calls in doubt of one saga, or of every saga by ascending saga id.

    A call of a saga that is still running (status `OPEN`) may simply not have finished
    yet; one of a saga that ended, or whose worker died, needs a human.
    """
    if saga_id is not None:
        entries = journal.entries(saga_id)
        if grant_id_of(saga_id, entries) is not None:
            return
        history = SagaHistory.of(saga_id, entries)
        yield from _doubts(history, _status(history))
        return
    for one, read in _iter_histories(journal, None):
        if isinstance(read, JournalError):
            continue  # listed UNREADABLE by list_summaries; verify names the row
        if grant_id_of(one, read) is not None:
            continue  # a grant's chain holds no call
        history = SagaHistory.of(one, read)
        yield from _doubts(history, _status(history))


def list_doubts(
    journal: SideEffectJournal, *, saga_id: str | None = None, limit: int = 1000
) -> list[InDoubtCall]:
    """Return up to `limit` calls in doubt (see `iter_doubts`)."""
    found: list[InDoubtCall] = []
    for doubt in iter_doubts(journal, saga_id=saga_id):
        if len(found) >= limit:
            break
        found.append(doubt)
    return found
