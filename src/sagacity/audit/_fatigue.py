"""Measured approval fatigue: how often a journal's gated calls asked a human, and how fast.

Read from the journal alone (a live database or an export read back with `read_jsonl`):
each gated call is one IRREVERSIBLE call (or workflow gate) that asked a human (its
AWAITING_APPROVAL), or that ran unasked because its tool's rule said so (`approval_rule`
in its INTENT) or a standing grant covered it (`approval_grant` in its INTENT). Each
request's outcome is counted once, and each human decision's time from its request, by
the channel it came through (`via`).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import statistics
from collections.abc import Iterable

from sagacity._history import payload_of
from sagacity.audit._verify import iter_entries
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal

__all__ = ["OUTCOMES", "UNRECORDED", "ChannelTimes", "FatigueReport", "approval_fatigue"]

OUTCOMES = ("approved", "rejected", "expired", "edited", "declined", "waiting")
"""How a request ended, in the report's order (see `FatigueReport.outcomes`)."""

UNRECORDED = "unrecorded"
"""The channel of a decision journaled before decisions recorded their `via`."""

_EXPIRY_SOURCE = "expiry"
"""A REJECTED's `source` when the request expired undecided (`_decision_log.EXPIRY`)."""

_GATE_TIMEOUT = "sagacity.expire_gates"
"""The approver a workflow gate's timeout journals (`workflows.GATE_TIMEOUT_APPROVER`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChannelTimes:
    """The human decisions that came through one channel, and how long each took."""

    via: str
    """The channel: `python`, `cli`, `api`, `inbox`, `email`, `slack`, an application's
    own name, or `unrecorded`."""
    decisions: int
    """APPROVED and REJECTED entries by a principal through it."""
    median_seconds: float
    """The median time from the request (its AWAITING_APPROVAL) to the decision."""
    p90_seconds: float
    """The 90th percentile of those times (nearest rank: 90% took at most this long)."""

    def to_json(self) -> dict[str, JsonValue]:
        """As the JSON of `sagacity report fatigue --json` shows it."""
        return {
            "via": self.via,
            "decisions": self.decisions,
            "median_seconds": self.median_seconds,
            "p90_seconds": self.p90_seconds,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class FatigueReport:
    """How much of a journal's gated work asked a human, what they said, and how fast."""

    sagas: int
    """Sagas with at least one gated call."""
    gated_calls: int
    """Calls that needed a human unless a rule or grant said otherwise: `asked +
    covered_by_rule + covered_by_grant`."""
    asked: int
    """Gated calls that asked a human (one or more AWAITING_APPROVAL)."""
    requests: int
    """AWAITING_APPROVAL entries: a call asks again after an edit or an expiry."""
    covered_by_rule: int
    """Calls that ran unasked because their tool's rule said no human was needed."""
    covered_by_grant: int
    """Calls that ran unasked because a standing grant covered them."""
    outcomes: dict[str, int]
    """Requests by how they ended (`OUTCOMES`): approved (all the approvals it needed),
    rejected (by a principal), expired (denied at expiry, a gate's timeout, or asked again
    once expired), edited (replaced by an edit), declined (a framework's own "no" inside a
    run), waiting (undecided)."""
    escalated: int
    """Requests that escalated to a second group (an ESCALATED entry)."""
    channels: tuple[ChannelTimes, ...]
    """Time to decision by channel, the busiest first."""

    def share(self, count: int) -> float:
        """`count` as a percentage of the gated calls (0.0 when there are none)."""
        return 0.0 if not self.gated_calls else round(100.0 * count / self.gated_calls, 1)

    def to_json(self) -> dict[str, JsonValue]:
        """The report as JSON (`sagacity report fatigue --json`, docs/cli.md)."""
        return {
            "sagas": self.sagas,
            "gated_calls": self.gated_calls,
            "asked": self.asked,
            "requests": self.requests,
            "covered_by_rule": self.covered_by_rule,
            "covered_by_grant": self.covered_by_grant,
            "asked_percent": self.share(self.asked),
            "outcomes": dict(self.outcomes),
            "escalated": self.escalated,
            "channels": [c.to_json() for c in self.channels],
        }


@dataclasses.dataclass
class _Request:
    asked_at: datetime.datetime | None
    required: int
    approvers: set[str] = dataclasses.field(default_factory=set)
    ended: str | None = None


def approval_fatigue(source: SideEffectJournal | Iterable[JournalEntry]) -> FatigueReport:
    """Measure approval fatigue over a journal, or over entries (one saga's, an export's).

    Entries are counted as journaled: a signature is not checked here (`verify` does),
    and an approval is counted by its distinct approvers against the request's
    `approvers_required`. Grant chains (`grant-<id>`) hold no calls and add nothing.
    """
    tally = _Tally()
    entries = iter_entries(source) if isinstance(source, SideEffectJournal) else source
    for entry in entries:
        tally.add(entry)
    return tally.report()


class _Tally:
    """What `approval_fatigue` has read so far, entry by entry."""

    def __init__(self) -> None:
        self.asked: set[tuple[str, str]] = set()
        self.by_rule: set[tuple[str, str]] = set()
        self.by_grant: set[tuple[str, str]] = set()
        self.requests: dict[tuple[str, int], _Request] = {}
        self.by_id: dict[tuple[str, str], tuple[str, int]] = {}
        self.replaced: set[tuple[str, str]] = set()
        self.escalated: set[tuple[str, int]] = set()
        self.times: dict[str, list[float]] = {}

    def add(self, entry: JournalEntry) -> None:
        payload = payload_of(entry)
        call = (entry.saga_id, entry.call_id or "")
        if entry.phase is Phase.INTENT:
            if isinstance(payload.get("approval_grant"), dict):
                self.by_grant.add(call)
            elif isinstance(payload.get("approval_rule"), dict):
                self.by_rule.add(call)
        elif entry.phase is Phase.AWAITING_APPROVAL:
            self.asked.add(call)
            required = payload.get("approvers_required", 1)
            self.requests[(entry.saga_id, entry.seq)] = _Request(
                asked_at=_time(entry.recorded_at),
                required=required if isinstance(required, int) and required > 0 else 1,
            )
            request_id, replaces = payload.get("request_id"), payload.get("replaces")
            if isinstance(request_id, str):
                self.by_id[(entry.saga_id, request_id)] = (entry.saga_id, entry.seq)
            if isinstance(replaces, str):
                self.replaced.add((entry.saga_id, replaces))
        elif entry.phase is Phase.ESCALATED and entry.ref_seq is not None:
            self.escalated.add((entry.saga_id, entry.ref_seq))
        elif entry.phase in (Phase.APPROVED, Phase.REJECTED) and entry.ref_seq is not None:
            request = self.requests.get((entry.saga_id, entry.ref_seq))
            if request is not None:
                _decided(request, entry, payload, self.times)

    def report(self) -> FatigueReport:
        outcomes = dict.fromkeys(OUTCOMES, 0)
        replaced = {self.by_id[r] for r in self.replaced if r in self.by_id}
        for key, request in self.requests.items():
            outcome = request.ended
            if outcome is None:
                if len(request.approvers) >= request.required:
                    outcome = "approved"
                elif key in replaced:
                    outcome = "expired"  # asked again undecided: it had expired
                else:
                    outcome = "waiting"
            outcomes[outcome] += 1
        channels = [
            ChannelTimes(
                via=via,
                decisions=len(seconds),
                median_seconds=round(statistics.median(seconds), 3),
                p90_seconds=round(_nearest_rank(seconds, 0.9), 3),
            )
            for via, seconds in self.times.items()
        ]
        gated = self.asked | self.by_rule | self.by_grant
        return FatigueReport(
            sagas=len({saga_id for saga_id, _ in gated}),
            gated_calls=len(gated),
            asked=len(self.asked),
            requests=len(self.requests),
            covered_by_rule=len(self.by_rule - self.asked),
            covered_by_grant=len(self.by_grant - self.asked - self.by_rule),
            outcomes=outcomes,
            escalated=len(self.escalated),
            channels=tuple(sorted(channels, key=lambda c: (-c.decisions, c.via))),
        )


def _decided(
    request: _Request,
    entry: JournalEntry,
    payload: dict[str, JsonValue],
    times: dict[str, list[float]],
) -> None:
    """Count one APPROVED or REJECTED of `request`: its outcome, and a human's time."""
    if request.ended is not None:
        return  # decided already: a later entry changes nothing
    approver = payload.get("approver")
    if entry.phase is Phase.REJECTED:
        if isinstance(payload.get("edited_to"), str):
            request.ended = "edited"
            return
        if payload.get("source") == _EXPIRY_SOURCE or approver == _GATE_TIMEOUT:
            request.ended = "expired"
            return
        if not isinstance(approver, str):
            request.ended = "declined"  # the framework's own "no": no human's time
            return
        request.ended = "rejected"
    elif not isinstance(approver, str) or approver in request.approvers:
        return
    else:
        request.approvers.add(approver)
    decided_at = _time(entry.recorded_at)
    if request.asked_at is not None and decided_at is not None:
        via = payload.get("via")
        channel = via if isinstance(via, str) and via else UNRECORDED
        seconds = max(0.0, (decided_at - request.asked_at).total_seconds())
        times.setdefault(channel, []).append(seconds)


def _nearest_rank(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _time(text: str) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)
