"""Journal entries, their phases, and the hash that chains them."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import time
from typing import Any

import orjson

from sagacity.errors import SerializationError
from sagacity.journal._canonical import JsonValue, canonical_bytes, canonical_string

__all__ = [
    "GENESIS_HASH",
    "JournalEntry",
    "Phase",
    "entry_hash",
    "hashed_bytes",
    "new_entry",
    "refused_entry",
    "seal",
    "utc_timestamp",
]

GENESIS_HASH = "0" * 64
"""The `prev_hash` of every saga's first entry."""


class Phase(enum.Enum):
    """What a journal entry records."""

    INTENT = "INTENT"
    """A tool is about to run with this input; committed before the call."""
    EXECUTED = "EXECUTED"
    """The tool returned this result."""
    FAILED = "FAILED"
    """The tool raised; `payload["kind"]` says whether its outcome is known."""
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """An IRREVERSIBLE call waits for a human; the payload holds its input and hash."""
    APPROVED = "APPROVED"
    """A named approver approved the request whose AWAITING_APPROVAL is `ref_seq`."""
    REJECTED = "REJECTED"
    """A named approver rejected the request whose AWAITING_APPROVAL is `ref_seq`."""
    REFUSED = "REFUSED"
    """A call was refused before it ran (an input that hashes otherwise than its approval,
    arguments with no JSON form): evidence of the attempt; nothing was executed."""
    REMINDED = "REMINDED"
    """The request whose AWAITING_APPROVAL is `ref_seq` reached its warning time: a
    reminder went out (`payload["remind_at"]`, `payload["expires_at"]`)."""
    ESCALATED = "ESCALATED"
    """The request whose AWAITING_APPROVAL is `ref_seq` expired undecided and now waits for
    the group `payload["group"]` (`payload["members"]`) until `payload["expires_at"]`:
    only their approvals journaled after this entry count."""
    COMPENSATING = "COMPENSATING"
    """The compensation of the EXECUTED entry `ref_seq` is about to run; committed before
    it is called. `payload["attempt"]` counts the compensation's attempts (1, 2, …)."""
    COMPENSATED = "COMPENSATED"
    """The compensation of the EXECUTED entry `ref_seq` ran."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """The compensation of the EXECUTED entry `ref_seq` raised."""
    ENDED = "ENDED"
    """The saga ended; `payload["outcome"]` says how."""
    TAKEN_OVER = "TAKEN_OVER"
    """Another worker took the saga over when its holder's lease had expired unreleased;
    `payload["owner"]` names the new holder. Journaled with the lease it took, in one
    commit: whatever the former holder appended is before it, and nothing after."""
    RECONCILED = "RECONCILED"
    """A reconciler's verdict on a call (`ref_seq`: its INTENT) or a compensation
    (`ref_seq`: the EXECUTED it undoes) in doubt: `payload["verdict"]` is `landed`,
    `did_not_land` or `unknown`, with the evidence and `payload["decided_by"]`. A verdict
    that settles the doubt is followed by the EXECUTED, FAILED, COMPENSATED or
    COMPENSATION_FAILED it implies (docs/journal-format.md)."""
    GRANTED = "GRANTED"
    """A standing approval: the first entry of its own chain (saga `grant-<id>`), naming
    the tool, the argument constraints, the budget, the expiry and the grantor."""
    GRANT_USED = "GRANT_USED"
    """A call in another saga consumed the grant (`payload["saga_id"]`, `["call_id"]`,
    `["input_sha256"]`, `["amount"]`); committed before that call's INTENT."""
    REVOKED = "REVOKED"
    """The grant was revoked (`payload["revoked_by"]`): no call is covered after it."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JournalEntry:
    """One row of the journal: an immutable, hash-chained record."""

    saga_id: str
    """The saga this entry belongs to."""
    seq: int
    """Position in the saga: 1, 2, 3, … with no gaps."""
    phase: Phase
    """What the entry records."""
    tool_name: str | None
    """The tool concerned, if any."""
    call_id: str | None
    """The tool call concerned, if any: the framework's id or one sagacity made."""
    ref_seq: int | None
    """The entry this one answers (EXECUTED → its INTENT, COMPENSATED → its EXECUTED, …)."""
    payload: JsonValue
    """The phase's data, exactly as hashed."""
    recorded_at: str
    """When it was appended: RFC 3339, UTC, microseconds, `Z`."""
    prev_hash: str
    """The `hash` of the previous entry of the saga; 64 zeros for the first."""
    hash: str
    """`sha256(JCS(hashed fields))`, 64 lowercase hex digits."""

    def hashed_fields(self) -> dict[str, Any]:
        """Return the object whose canonical JSON is hashed (docs/journal-format.md)."""
        return _hashed_fields(
            self.saga_id,
            self.seq,
            self.phase,
            self.tool_name,
            self.call_id,
            self.ref_seq,
            self.payload,
            self.recorded_at,
            self.prev_hash,
        )

    def computed_hash(self) -> str:
        """Recompute the hash from the fields, as a verifier does."""
        return hashlib.sha256(canonical_bytes(self.hashed_fields())).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """Return the entry as a JSON object, the form exports use."""
        fields = self.hashed_fields()
        fields["hash"] = self.hash
        return fields

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalEntry:
        """Build an entry from `to_json`'s output, without checking its hash."""
        return cls(
            saga_id=data["saga_id"],
            seq=data["seq"],
            phase=Phase(data["phase"]),
            tool_name=data["tool_name"],
            call_id=data["call_id"],
            ref_seq=data["ref_seq"],
            payload=data["payload"],
            recorded_at=data["recorded_at"],
            prev_hash=data["prev_hash"],
            hash=data["hash"],
        )


def _hashed_fields(
    saga_id: str,
    seq: int,
    phase: Phase,
    tool_name: str | None,
    call_id: str | None,
    ref_seq: int | None,
    payload: JsonValue,
    recorded_at: str,
    prev_hash: str,
) -> dict[str, Any]:
    return {
        "saga_id": saga_id,
        "seq": seq,
        "phase": phase.value,
        "tool_name": tool_name,
        "call_id": call_id,
        "ref_seq": ref_seq,
        "payload": payload,
        "recorded_at": recorded_at,
        "prev_hash": prev_hash,
    }


_HASHED_TEMPLATE = (
    b'{"call_id":%b,"payload":%b,"phase":%b,"prev_hash":%b,"recorded_at":%b,'
    b'"ref_seq":%b,"saga_id":%b,"seq":%b,"tool_name":%b}'
)
# Keyed by the value: a dict lookup by the enum member would call Enum.__hash__, in Python.
_PHASE_JSON = {phase.value: orjson.dumps(phase.value) for phase in Phase}
_STRICT_INTEGER = orjson.OPT_STRICT_INTEGER
_sha256 = hashlib.sha256
_dumps = orjson.dumps
_Fragment = orjson.Fragment


def hashed_bytes(
    saga_id: str,
    seq: int,
    phase: Phase,
    tool_name: str | None,
    call_id: str | None,
    ref_seq: int | None,
    payload_bytes: bytes,
    recorded_at: str,
    prev_hash: str,
) -> bytes:
    """Return JCS of the hashed fields, given the payload's canonical bytes.

    JCS writes an object as its members sorted by name with no white space, so the
    object's encoding is its members' encodings joined in that order: the payload is
    encoded once, and the same bytes are stored.

    Raises:
        SerializationError: A field has no canonical JSON form (a lone surrogate in an
            id, say).
    """
    if type(seq) is int and (ref_seq is None or type(ref_seq) is int):
        try:  # one orjson call on the members in JCS order, the payload as its own bytes
            return _dumps(
                {
                    "call_id": call_id,
                    "payload": _Fragment(payload_bytes),
                    "phase": phase._value_,
                    "prev_hash": prev_hash,
                    "recorded_at": recorded_at,
                    "ref_seq": ref_seq,
                    "saga_id": saga_id,
                    "seq": seq,
                    "tool_name": tool_name,
                },
                option=_STRICT_INTEGER,
            )
        except orjson.JSONEncodeError:
            pass  # let the checked encoders below say which field is wrong
    return _HASHED_TEMPLATE % (
        canonical_string(call_id),
        payload_bytes,
        _PHASE_JSON[phase._value_],
        canonical_string(prev_hash),
        canonical_string(recorded_at),
        canonical_bytes(ref_seq),
        canonical_string(saga_id),
        canonical_bytes(seq),
        canonical_string(tool_name),
    )


def entry_hash(
    saga_id: str,
    seq: int,
    phase: Phase,
    tool_name: str | None,
    call_id: str | None,
    ref_seq: int | None,
    payload_bytes: bytes,
    recorded_at: str,
    prev_hash: str,
) -> str:
    """Return the entry's hash, given its payload's canonical bytes."""
    return _sha256(
        hashed_bytes(
            saga_id, seq, phase, tool_name, call_id, ref_seq, payload_bytes, recorded_at, prev_hash
        )
    ).hexdigest()


def seal(
    saga_id: str,
    seq: int,
    phase: Phase,
    *,
    tool_name: str | None,
    call_id: str | None,
    ref_seq: int | None,
    payload: JsonValue,
    prev_hash: str,
    recorded_at: str | None = None,
) -> tuple[JournalEntry, bytes]:
    """Build the entry that follows `prev_hash`, and the canonical bytes of its payload.

    SQL backends store those payload bytes as they are, so what is read back hashes the
    same as what was hashed.

    Raises:
        SerializationError: The payload or a field has no canonical JSON form.
    """
    recorded_at = recorded_at or utc_timestamp()
    try:
        payload_bytes = canonical_bytes(payload)
        digest = _sha256(
            hashed_bytes(
                saga_id,
                seq,
                phase,
                tool_name,
                call_id,
                ref_seq,
                payload_bytes,
                recorded_at,
                prev_hash,
            )
        ).hexdigest()
    except SerializationError as error:
        raise refused_entry(error, saga_id, phase, tool_name, call_id) from error
    entry = new_entry(
        saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, digest
    )
    return entry, payload_bytes


def refused_entry(
    error: SerializationError,
    saga_id: str,
    phase: Phase,
    tool_name: str | None,
    call_id: str | None,
) -> SerializationError:
    """The error for an entry that has no canonical JSON: it names the saga and the call."""
    what = phase.value
    if tool_name is not None:
        what += f" of tool {tool_name!r}"
    if call_id is not None:
        what += f" (call {call_id!r})"
    return SerializationError(
        f"saga {saga_id!r}: cannot append {what}: {error}; the entry was not written"
    )


class _Draft:
    """An entry under construction: the same slots as `JournalEntry`, but writable."""

    __slots__ = JournalEntry.__slots__


def new_entry(
    saga_id: str,
    seq: int,
    phase: Phase,
    tool_name: str | None,
    call_id: str | None,
    ref_seq: int | None,
    payload: JsonValue,
    recorded_at: str,
    prev_hash: str,
    hash: str,
) -> JournalEntry:
    """Build a `JournalEntry` from values in field order, as its constructor would."""
    # The frozen dataclass's __init__ sets each field through object.__setattr__ (1.5 µs);
    # plain stores into a draft with the same slot layout, then retyped, take 0.3 µs.
    entry: Any = _Draft()
    entry.saga_id = saga_id
    entry.seq = seq
    entry.phase = phase
    entry.tool_name = tool_name
    entry.call_id = call_id
    entry.ref_seq = ref_seq
    entry.payload = payload
    entry.recorded_at = recorded_at
    entry.prev_hash = prev_hash
    entry.hash = hash
    entry.__class__ = JournalEntry  # the same slot layout
    return entry  # type: ignore[no-any-return]  # now a JournalEntry


_second_cache: tuple[str, str] = ("", "")
"""The digits of the last whole second and its text, replaced as one tuple so threads
never mix them."""


def utc_timestamp() -> str:
    """Return the current time as RFC 3339 UTC with microseconds, e.g. `…T12:00:00.000001Z`."""
    global _second_cache
    micros = str(time.time_ns() // 1000)  # the last six digits are the fraction, zero-padded
    second, fraction = micros[:-6], micros[-6:]
    cached_second, prefix = _second_cache
    if cached_second != second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(int(second)))
        _second_cache = (second, prefix)
    return f"{prefix}{fraction}Z"
