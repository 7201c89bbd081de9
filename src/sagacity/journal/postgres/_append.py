"""One append in progress: the record the single append, the batch and the async writer share.

An `Append` is what to write and what became of its last try; a `Head` is the last entry
of a saga a journal knows of, cached by its `Appender` (`_appender`); `AppendStats` counts
how the journal's appends went.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sagacity.errors import JournalError, SerializationError
from sagacity.journal._canonical import JsonValue, canonical_bytes
from sagacity.journal._entry import (
    JournalEntry,
    Phase,
    hashed_bytes,
    refused_entry,
    seal,
    utc_timestamp,
)
from sagacity.journal._group import AppendRequest
from sagacity.journal._lease import SagaLease

__all__ = ["Append", "AppendStats", "Head", "new_append", "unchecked"]

_PREV_MARK = "~" * 64
_SEQ_MARK = 2**53 - 1
_SEQ_MARK_JSON = str(_SEQ_MARK).encode()
_PREV_FIELD = b'"prev_hash":"' + _PREV_MARK.encode() + b'"'
_SEQ_FIELD = b'"seq":' + _SEQ_MARK_JSON


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AppendStats:
    """How a journal's appends went, counted since it was opened."""

    appends: int
    """Appends committed."""
    fast: int
    """Of those, committed by the one-INSERT fast path."""
    locked: int
    """Of those, committed under the saga's advisory lock."""
    conflicts: int
    """INSERTs that found their seq already taken by another worker and were redone."""
    reconnects: int
    """Attempts redone on a new connection after the server or the network dropped one."""

    @property
    def retries(self) -> int:
        """Attempts redone for any reason: conflicts plus reconnects."""
        return self.conflicts + self.reconnects


class Head:
    """The last entry of a saga this journal knows of, and how contended the saga is."""

    __slots__ = ("fenced_by", "hash", "quiet_needed", "seq")

    def __init__(self, seq: int, hash: str, quiet_needed: int = 0) -> None:
        self.seq = seq
        self.hash = hash
        self.quiet_needed = quiet_needed
        """Locked appends still needed, finding no other writer, before the fast path."""
        self.fenced_by: int | None = None
        """The lease token that held the saga at this head, as this journal knows it: an
        append fenced by it takes the fast path unchecked (see `Appender.attempt`)."""


class Append:
    """One append in progress: what to write, and what became of the last try."""

    __slots__ = (
        "_pieces",
        "call_id",
        "expected_seq",
        "fence",
        "in_doubt",
        "locked_sent",
        "payload",
        "phase",
        "recorded_at",
        "ref_seq",
        "saga_id",
        "sent",
        "tool_name",
    )

    def __init__(
        self,
        saga_id: str,
        phase: Phase,
        tool_name: str | None,
        call_id: str | None,
        ref_seq: int | None,
        payload: JsonValue,
        expected_seq: int | None,
        fence: SagaLease | None,
    ) -> None:
        self.saga_id = saga_id
        self.fence = fence
        """The lease whose token must still hold the saga when the entry is written."""
        self.phase = phase
        self.tool_name = tool_name
        self.call_id = call_id
        self.ref_seq = ref_seq
        self.payload = payload
        self.expected_seq = expected_seq
        """The last seq a conditional append requires; None for an unconditional one."""
        self.sent: tuple[JournalEntry, bytes] | None = None
        """The entry last sent, until the server answers for it. After a lost connection
        it is sent again unchanged: a row at its seq with its hash is that entry."""
        self.in_doubt = False
        """A connection was lost while `sent` was on its way."""
        self.locked_sent = False
        """The locked path's statement was sent and its reply not received: the next
        try looks for the entry before it writes."""
        self.recorded_at = ""
        self._pieces: tuple[str, bytes, bytes, bytes] | None = None

    def pieces(self) -> tuple[str, bytes, bytes, bytes]:
        """The pieces the locked path sends, made once per append.

        The payload's canonical text, and the entry's canonical JSON cut around the
        values of `prev_hash` and `seq`, which the server fills in.
        """
        if self._pieces is None:
            try:
                payload_bytes = canonical_bytes(self.payload)
                recorded_at = utc_timestamp()
                whole = hashed_bytes(
                    self.saga_id,
                    _SEQ_MARK,
                    self.phase,
                    self.tool_name,
                    self.call_id,
                    self.ref_seq,
                    payload_bytes,
                    recorded_at,
                    _PREV_MARK,
                )
            except SerializationError as error:
                raise refused_entry(
                    error, self.saga_id, self.phase, self.tool_name, self.call_id
                ) from error
            self.recorded_at = recorded_at
            # The payload comes before both fields and only strings after them, so the
            # last occurrence of each is the field itself.
            cut = whole.rindex(_PREV_FIELD) + len(_PREV_FIELD) - len(_PREV_MARK) - 1
            before_prev, rest = whole[:cut], whole[cut + len(_PREV_MARK) :]
            cut = rest.rindex(_SEQ_FIELD) + len(_SEQ_FIELD) - len(_SEQ_MARK_JSON)
            before_seq, after_seq = rest[:cut], rest[cut + len(_SEQ_MARK_JSON) :]
            self._pieces = (payload_bytes.decode(), before_prev, before_seq, after_seq)
        return self._pieces

    def token(self) -> int | None:
        """The fencing token of the append's lease, if it is fenced."""
        return None if self.fence is None else self.fence.token

    def locked_args(
        self, lock_key: int, find_own: bool, fence_token: int | None
    ) -> tuple[object, ...]:
        """The arguments of `sagacity_append_locked` for this append."""
        payload_text, before_prev, before_seq, after_seq = self.pieces()
        return (
            lock_key,
            self.saga_id,
            self.phase.value,
            self.tool_name,
            self.call_id,
            self.ref_seq,
            payload_text,
            self.recorded_at,
            before_prev,
            before_seq,
            after_seq,
            find_own,
            fence_token,
        )

    def seal_locked(
        self, row: tuple[Any, ...] | None, where: str
    ) -> tuple[JournalEntry, bytes, int]:
        """Seal the entry `sagacity_append_locked` answered `row` for, checking its hash.

        Returns the entry, its payload's bytes, and how many seqs the server found taken.
        """
        if row is None:  # the function returns one row or raises: the schema was altered
            raise JournalError(
                f"saga {self.saga_id!r}: sagacity_append_locked returned no row in {where}; "
                "its schema was changed outside sagacity"
            )
        seq, prev_hash, digest, lost = row
        entry, payload_bytes = seal(
            self.saga_id,
            seq,
            self.phase,
            tool_name=self.tool_name,
            call_id=self.call_id,
            ref_seq=self.ref_seq,
            payload=self.payload,
            prev_hash=prev_hash,
            recorded_at=self.recorded_at,
        )
        if entry.hash != digest:
            raise JournalError(
                f"saga {self.saga_id!r}: the database hashed seq {seq} to {digest[:12]}…, but "
                f"the entry hashes to {entry.hash[:12]}…; verify the saga "
                "(sagacity.audit.verify) and report this as a bug"
            )
        return entry, payload_bytes, int(lost)

    def seal_after(self, seq: int, prev_hash: str) -> tuple[JournalEntry, bytes]:
        """Seal the entry that follows (`seq`, `prev_hash`)."""
        return seal(
            self.saga_id,
            seq + 1,
            self.phase,
            tool_name=self.tool_name,
            call_id=self.call_id,
            ref_seq=self.ref_seq,
            payload=self.payload,
            prev_hash=prev_hash,
        )


def unchecked(append: Append, head: Head) -> bool:
    """Whether `append` may be written after `head` with no look at the lease.

    So when it is not fenced, or when its token held the saga at that head: a worker that
    took the lease over since journaled TAKEN_OVER at the next seq, which the append's
    `INSERT` then meets as a taken seq (and the locked path refuses it). A token let go
    here (released, or its saga ended) fences no head again (`Appender.let_go`,
    `Appender.done`): a worker takes such a lease with no TAKEN_OVER.
    """
    fence = append.fence
    return fence is None or (fence.saga_id == append.saga_id and head.fenced_by == fence.token)


def new_append(request: AppendRequest) -> Append:
    """The append in progress for a request."""
    return Append(
        request.saga_id,
        request.phase,
        request.tool_name,
        request.call_id,
        request.ref_seq,
        request.payload,
        request.expected_seq,
        request.fence,
    )
