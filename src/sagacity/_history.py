"""What a saga's journal entries say, derived in one pass: calls, approvals, the end."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from sagacity.journal import JournalEntry, Phase

__all__ = ["CallState", "SagaHistory", "payload_of"]

OUTCOME_UNKNOWN = "outcome_unknown"

# On Python 3.11 `Phase.INTENT` goes through EnumType.__getattr__ (0.07 µs); `add` is on
# the hot path of every call.
_INTENT, _EXECUTED, _FAILED = Phase.INTENT, Phase.EXECUTED, Phase.FAILED


@dataclasses.dataclass(slots=True)
class CallState:
    """One INTENT and what became of it."""

    intent: JournalEntry
    outcome: JournalEntry | None = None
    compensation: JournalEntry | None = None

    @property
    def executed(self) -> bool:
        return self.outcome is not None and self.outcome.phase is Phase.EXECUTED

    @property
    def in_doubt(self) -> bool:
        if self.outcome is None:
            return True
        return (
            self.outcome.phase is Phase.FAILED
            and payload_of(self.outcome).get("kind") == OUTCOME_UNKNOWN
        )

    @property
    def compensated(self) -> bool:
        return self.compensation is not None and self.compensation.phase is Phase.COMPENSATED


@dataclasses.dataclass(slots=True)
class SagaHistory:
    """A saga's journal, indexed; `add` keeps it current as entries are appended."""

    saga_id: str
    entries: list[JournalEntry] = dataclasses.field(default_factory=list)
    calls: dict[int, CallState] = dataclasses.field(default_factory=dict)
    """By INTENT seq."""
    latest_call: dict[str, CallState] = dataclasses.field(default_factory=dict)
    """By call id: the call's latest INTENT."""
    awaiting: dict[str, JournalEntry] = dataclasses.field(default_factory=dict)
    """AWAITING_APPROVAL entries by request id."""
    decisions: dict[int, list[JournalEntry]] = dataclasses.field(default_factory=dict)
    """APPROVED and REJECTED entries by the seq of the AWAITING_APPROVAL they answer."""
    ended: JournalEntry | None = None

    @classmethod
    def of(cls, saga_id: str, entries: Iterable[JournalEntry]) -> SagaHistory:
        history = cls(saga_id)
        for entry in entries:
            history.add(entry)
        return history

    def add(self, entry: JournalEntry) -> None:
        self.entries.append(entry)
        phase = entry.phase
        if phase is _INTENT:
            started = CallState(entry)
            self.calls[entry.seq] = started
            if entry.call_id is not None:
                self.latest_call[entry.call_id] = started
        elif phase is _EXECUTED or phase is _FAILED:
            answered = self.calls.get(entry.ref_seq or 0)
            if answered is not None:
                answered.outcome = entry
        elif phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED):
            executed = self.entry(entry.ref_seq or 0)
            call = self.calls.get(executed.ref_seq or 0) if executed else None
            if call is not None:
                call.compensation = entry
        elif phase is Phase.AWAITING_APPROVAL:
            request_id = payload_of(entry).get("request_id")
            if isinstance(request_id, str):
                self.awaiting[request_id] = entry
        elif phase in (Phase.APPROVED, Phase.REJECTED):
            self.decisions.setdefault(entry.ref_seq or 0, []).append(entry)
        elif phase is Phase.ENDED:
            self.ended = entry

    def entry(self, seq: int) -> JournalEntry | None:
        """Return the entry at `seq`, if it exists where seq says it should."""
        if 1 <= seq <= len(self.entries) and self.entries[seq - 1].seq == seq:
            return self.entries[seq - 1]
        return next((e for e in self.entries if e.seq == seq), None)

    @property
    def last_seq(self) -> int:
        """The seq of the saga's last entry; 0 when it has none."""
        return self.entries[-1].seq if self.entries else 0

    @property
    def outcome(self) -> str | None:
        """The outcome of the latest ENDED entry, or None while the saga is open."""
        if self.ended is None:
            return None
        value = payload_of(self.ended).get("outcome")
        return value if isinstance(value, str) else None

    def has_failed_call(self) -> bool:
        """True when any attempt of any call failed the saga (a failure or an unknown outcome).

        Every attempt counts, as it does while the saga runs: a call that failed and then
        succeeded on a retry still failed the saga.
        """
        return any(
            call.outcome is not None
            and call.outcome.phase is Phase.FAILED
            and payload_of(call.outcome).get("kind") in ("failure", OUTCOME_UNKNOWN)
            for call in self.calls.values()
        )

    def rejected(self, awaiting_seq: int) -> JournalEntry | None:
        return next(
            (d for d in self.decisions.get(awaiting_seq, ()) if d.phase is Phase.REJECTED), None
        )

    def approvals(self, awaiting_seq: int) -> list[JournalEntry]:
        return [d for d in self.decisions.get(awaiting_seq, ()) if d.phase is Phase.APPROVED]

    def open_requests(self) -> list[JournalEntry]:
        """AWAITING_APPROVAL entries neither rejected nor followed by their call's run."""
        found = []
        for entry in self.awaiting.values():
            if self.rejected(entry.seq) is not None:
                continue
            call = self.latest_call.get(entry.call_id or "")
            if call is not None and call.intent.seq > entry.seq:
                continue
            found.append(entry)
        return found


def payload_of(entry: JournalEntry) -> dict[str, Any]:
    """The entry's payload when it is an object, else an empty dict."""
    return entry.payload if isinstance(entry.payload, dict) else {}
