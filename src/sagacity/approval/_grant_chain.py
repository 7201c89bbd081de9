"""A standing grant's chain read back: its terms, what it has covered, and whether it verifies.

`read_grant` reads a chain (`grant-<id>`: GRANTED, GRANT_USED…, REVOKED) into a
`StandingGrant` with its remaining budget, recomputing every hash and link and, where
approvals must be signed, the grant's signature: a chain that does not verify is
`unverifiable` and covers nothing. `covered_amount` says whether a call fits a grant's
constraints and remaining budget. The terms are checked here both when granting and when
reading back, so an edited row that still hashes (a rewritten chain) is held to them too.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sagacity._history import payload_of
from sagacity._unicode import principal_key
from sagacity.errors import ApprovalInputError, SerializationError
from sagacity.journal import GENESIS_HASH, JournalEntry, JsonValue, Phase
from sagacity.journal._canonical import canonical_bytes, copy_json

if TYPE_CHECKING:
    from sagacity.approval._policy import ApprovalPolicy

__all__ = [
    "GRANT_PREFIX",
    "StandingGrant",
    "checked_terms",
    "covered_amount",
    "grant_signed_bytes",
    "granted_problem",
    "read_grant",
    "rfc3339",
]

GRANT_PREFIX = "grant-"
"""The saga id of a grant's chain is this prefix and the grant id."""

_MAX_FIELDS = 32
"""How many argument constraints one grant may hold."""

_MAX_ONE_OF = 1000
"""How many values one allow-list may hold."""

_MAX_SAFE_INT = 2**53 - 1
"""The largest whole number a journal entry holds exactly (RFC 8785's range)."""

logger = logging.getLogger("sagacity")


def grant_signed_bytes(
    grant_id: str, terms: Mapping[str, JsonValue], grantor: str, reason: str | None
) -> bytes:
    """The exact bytes a grant's signature covers (RFC 8785 canonical JSON, UTF-8).

    `{"kind": "sagacity.grant", "version": 1, "grant_id", "grantor", "terms", "reason"}`:
    the whole of the terms, so no limit, constraint or expiry can be edited without the
    signature failing; the reason, without which a grant covers no call of a tool whose
    approvals must say why; and the grant id, so a signature copied onto another chain
    does not verify.
    """
    return canonical_bytes(
        {
            "kind": "sagacity.grant",
            "version": 1,
            "grant_id": grant_id,
            "grantor": grantor,
            "terms": dict(terms),
            "reason": reason,
        }
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StandingGrant:
    """A standing approval as its chain records it, with what is left of its budget."""

    grant_id: str
    """The grant's id; its chain is the saga `grant-<grant_id>`."""
    tool_name: str
    """The one tool whose calls it covers."""
    grantor: str
    """Who granted it; journaled, and covered by its signature when signed."""
    granted_at: str
    """When GRANTED was journaled (RFC 3339, UTC)."""
    expires_at: str
    """After this time it covers nothing (RFC 3339, UTC)."""
    match: dict[str, dict[str, JsonValue]]
    """The argument constraints, by field: `{"equals": v}`, `{"one_of": [...]}` or
    `{"min": a, "max": b}` (either bound may be left out)."""
    max_calls: int
    """How many calls it covers at most."""
    max_amount: JsonValue
    """The most the covered calls' `amount_field` may add up to; None: no limit."""
    amount_field: str | None
    """The argument that holds a call's amount; None when there is no amount limit."""
    started_by: str | None
    """Covers only sagas started by this principal; None: any saga not started by the
    grantor."""
    reason: str | None
    """Why it was granted, as the grantor wrote it."""
    used_calls: int
    """How many calls it has covered (GRANT_USED entries)."""
    used_amount: str
    """The sum of their amounts, as a decimal string."""
    revoked_at: str | None
    """When REVOKED was journaled; None while not revoked."""
    revoked_by: str | None
    """Who revoked it."""
    state: str
    """`active`, `expired`, `revoked`, `exhausted`, or `unverifiable` (covers nothing)."""
    problem: str | None
    """Why it is unverifiable; None otherwise."""

    @property
    def remaining_calls(self) -> int:
        """How many more calls it may cover (0 once revoked, expired or unverifiable)."""
        if self.state != "active":
            return 0
        return max(self.max_calls - self.used_calls, 0)

    @property
    def remaining_amount(self) -> str | None:
        """How much amount is left, as a decimal string; None when there is no limit."""
        if self.max_amount is None:
            return None
        if self.state != "active":
            return "0"
        left = _decimal(self.max_amount) - decimal.Decimal(self.used_amount)
        return _text(max(left, decimal.Decimal(0)))

    def describe(self) -> str:
        """The constraints in one line: `payee in ["ACME"], 0 <= amount <= 500`."""
        parts = []
        for field, constraint in self.match.items():
            if "equals" in constraint:
                parts.append(f"{field} = {canonical_bytes(constraint['equals']).decode()}")
            elif "one_of" in constraint:
                parts.append(f"{field} in {canonical_bytes(constraint['one_of']).decode()}")
            else:
                low, high = constraint.get("min"), constraint.get("max")
                parts.append(
                    (f"{low} <= " if low is not None else "")
                    + field
                    + (f" <= {high}" if high is not None else "")
                )
        if self.started_by is not None:
            parts.append(f"sagas of {self.started_by}")
        return ", ".join(parts) or "any call"

    def to_json(self) -> dict[str, JsonValue]:
        """The grant as the CLI, the REST API and the inbox show it."""
        shown: dict[str, JsonValue] = {
            field.name: copy_json(getattr(self, field.name)) for field in dataclasses.fields(self)
        }
        shown["remaining_calls"] = self.remaining_calls
        shown["remaining_amount"] = self.remaining_amount
        return shown


def read_grant(
    entries: list[JournalEntry], policy: ApprovalPolicy, now: datetime.datetime
) -> StandingGrant | None:
    """Read a grant's chain; None when it holds no entry.

    A chain that does not verify is returned with state `unverifiable` and its problem:
    it covers nothing.
    """
    if not entries:
        return None
    saga_id = entries[0].saga_id
    problem = _chain_problem(entries)
    first = entries[0]
    payload = payload_of(first)
    terms = payload.get("terms")
    grant_id = saga_id[len(GRANT_PREFIX) :]
    grantor = payload.get("grantor")
    if problem is None:
        problem = granted_problem(first, grant_id, policy)
    if problem is not None or not isinstance(terms, dict) or not isinstance(grantor, str):
        return _unverifiable(saga_id, first, problem or "its GRANTED entry is malformed")
    used_calls = 0
    used_amount = decimal.Decimal(0)
    revoked: JournalEntry | None = None
    for entry in entries[1:]:
        if entry.phase is Phase.GRANT_USED and revoked is None:
            amount = payload_of(entry).get("amount")
            if amount is not None and (not _is_number(amount) or _decimal(amount) < 0):
                # A negative amount would give budget back: no call ever consumes one.
                return _unverifiable(
                    saga_id, first, f"GRANT_USED at seq {entry.seq} has no amount of at least 0"
                )
            used_calls += 1
            used_amount += _decimal(amount) if amount is not None else 0
        elif entry.phase is Phase.REVOKED:
            revoked = revoked or entry  # a later one takes away nothing more
        else:
            return _unverifiable(
                saga_id,
                first,
                f"seq {entry.seq} is a {entry.phase.name} entry, which a grant's chain does "
                "not hold" + (" after its REVOKED" if revoked is not None else ""),
            )
    max_calls, max_amount = int(terms["max_calls"]), terms.get("max_amount")
    expires_at = str(terms.get("expires_at"))
    if revoked is not None:
        state = "revoked"
    elif _parse_time(expires_at) <= now:
        state = "expired"
    elif used_calls >= max_calls or (
        max_amount is not None and used_amount >= _decimal(max_amount)
    ):
        state = "exhausted"
    else:
        state = "active"
    revoked_by = payload_of(revoked).get("revoked_by") if revoked is not None else None
    return StandingGrant(
        grant_id=grant_id,
        tool_name=str(first.tool_name),
        grantor=grantor,
        granted_at=first.recorded_at,
        expires_at=expires_at,
        match=terms["match"],
        max_calls=max_calls,
        max_amount=max_amount,
        amount_field=terms.get("amount_field"),
        started_by=terms.get("started_by"),
        reason=payload.get("reason"),
        used_calls=used_calls,
        used_amount=_text(used_amount),
        revoked_at=revoked.recorded_at if revoked is not None else None,
        revoked_by=revoked_by if isinstance(revoked_by, str) else None,
        state=state,
        problem=None,
    )


def _unverifiable(saga_id: str, first: JournalEntry, problem: str) -> StandingGrant:
    logger.warning("grant chain %r covers nothing: %s", saga_id, problem)
    return StandingGrant(
        grant_id=saga_id[len(GRANT_PREFIX) :],
        tool_name=str(first.tool_name),
        grantor=str(payload_of(first).get("grantor")),
        granted_at=first.recorded_at,
        expires_at="",
        match={},
        max_calls=0,
        max_amount=None,
        amount_field=None,
        started_by=None,
        reason=None,
        used_calls=0,
        used_amount="0",
        revoked_at=None,
        revoked_by=None,
        state="unverifiable",
        problem=problem,
    )


def _chain_problem(entries: list[JournalEntry]) -> str | None:
    """Why the chain's hashes or links do not verify; None when they do."""
    prev = GENESIS_HASH
    for number, entry in enumerate(entries, start=1):
        if entry.seq != number:
            return f"seq {number} is missing (found {entry.seq})"
        if entry.prev_hash != prev:
            return f"seq {entry.seq} does not link to the entry before it"
        if entry.computed_hash() != entry.hash:
            return f"seq {entry.seq} does not match its hash: it was edited"
        prev = entry.hash
    return None


def granted_problem(first: JournalEntry, grant_id: str, policy: ApprovalPolicy) -> str | None:
    """Why the GRANTED entry is not a grant this process trusts; None when it is."""
    if first.phase is not Phase.GRANTED:
        return f"its first entry is {first.phase.name}, not GRANTED"
    payload = payload_of(first)
    terms, grantor, reason = payload.get("terms"), payload.get("grantor"), payload.get("reason")
    if not isinstance(terms, dict) or not isinstance(grantor, str):
        return "its GRANTED entry does not name its terms and grantor"
    if not isinstance(reason, str | None):
        return "its GRANTED entry's reason is not text"
    if terms.get("tool_name") != first.tool_name or payload.get("grant_id") != grant_id:
        return "its GRANTED entry names another tool or grant than its chain"
    try:
        checked_terms(terms)
    except ApprovalInputError as error:
        return f"its terms are malformed: {error}"
    if not policy.require_signed:
        return None
    signature, key_id = payload.get("signature"), payload.get("key_id")
    if not isinstance(signature, str) or not signature:
        return "it carries no signature, and approvals must be signed"
    if not isinstance(key_id, str) or key_id not in policy.public_keys:
        return f"it is signed with key {key_id!r}, which is not one of the trusted keys"
    if not policy.public_keys[key_id].verify(
        grant_signed_bytes(grant_id, terms, grantor, reason), signature
    ):
        return f"its signature does not verify with key {key_id!r}"
    return None


def checked_terms(terms: Mapping[str, Any]) -> None:
    """Refuse terms a grant cannot hold (also read back from the journal, so total)."""
    tool_name = terms.get("tool_name")
    if not isinstance(tool_name, str) or not tool_name:
        raise ApprovalInputError(f"a grant names the tool it covers, not {tool_name!r}")
    match = terms.get("match")
    if not isinstance(match, dict) or len(match) > _MAX_FIELDS:
        raise ApprovalInputError(f"match must be an object of at most {_MAX_FIELDS} fields")
    for field, constraint in match.items():
        _checked_constraint(field, constraint)
    max_calls = terms.get("max_calls")
    if (
        isinstance(max_calls, bool)
        or not isinstance(max_calls, int)
        or not 1 <= max_calls <= _MAX_SAFE_INT
    ):
        raise ApprovalInputError(
            f"max_calls must be a whole number from 1 to {_MAX_SAFE_INT}, not {max_calls!r}"
        )
    max_amount, amount_field = terms.get("max_amount"), terms.get("amount_field")
    if (max_amount is None) != (amount_field is None):
        raise ApprovalInputError(
            "max_amount and amount_field go together: name the argument that holds the amount"
        )
    if max_amount is not None and (not _is_number(max_amount) or _decimal(max_amount) < 0):
        raise ApprovalInputError(
            f"max_amount must be a number of at least 0 (a whole one at most {_MAX_SAFE_INT}), "
            f"not {max_amount!r}"
        )
    if amount_field is not None and (not isinstance(amount_field, str) or not amount_field):
        raise ApprovalInputError(f"amount_field must name an argument, not {amount_field!r}")
    expires_at = terms.get("expires_at")
    if not isinstance(expires_at, str):
        raise ApprovalInputError("a grant needs an expiry (expires_at)")
    try:
        _parse_time(expires_at)
    except ValueError:
        raise ApprovalInputError(f"expires_at {expires_at!r} is not an RFC 3339 time") from None
    started_by = terms.get("started_by")
    if started_by is not None and not isinstance(started_by, str):
        raise ApprovalInputError("started_by must name a principal")


def _checked_constraint(field: object, constraint: object) -> None:
    if not isinstance(field, str) or not field:
        raise ApprovalInputError(f"a constraint must name an argument, not {field!r}")
    if not isinstance(constraint, dict) or not constraint:
        raise ApprovalInputError(
            f"the constraint on {field!r} must be {{'equals': v}}, {{'one_of': [...]}} or "
            f"{{'min': a, 'max': b}}, not {constraint!r}"
        )
    keys = set(constraint)
    try:
        canonical_bytes(constraint)
    except SerializationError as error:
        raise ApprovalInputError(f"the constraint on {field!r} is not JSON: {error}") from None
    if keys == {"equals"}:
        return
    if keys == {"one_of"}:
        values = constraint["one_of"]
        if not isinstance(values, list) or not values or len(values) > _MAX_ONE_OF:
            raise ApprovalInputError(
                f"the allow-list of {field!r} must be a list of 1 to {_MAX_ONE_OF} values"
            )
        return
    if keys and keys <= {"min", "max"}:
        for bound in keys:
            if not _is_number(constraint[bound]):
                raise ApprovalInputError(
                    f"the {bound} of {field!r} must be a number (a whole one at most "
                    f"{_MAX_SAFE_INT}), not {constraint[bound]!r}"
                )
        low, high = constraint.get("min"), constraint.get("max")
        if low is not None and high is not None and _decimal(low) > _decimal(high):
            raise ApprovalInputError(f"the range of {field!r} is empty: min {low} > max {high}")
        return
    raise ApprovalInputError(
        f"the constraint on {field!r} has the keys {sorted(keys)}; use 'equals', 'one_of', or "
        "'min' and/or 'max'"
    )


def _fits(constraint: Mapping[str, JsonValue], value: JsonValue) -> bool:
    """Whether an argument's value meets its constraint (JSON equality, as rules compare)."""
    if "equals" in constraint:
        return canonical_bytes(value) == canonical_bytes(constraint["equals"])
    if "one_of" in constraint:
        shown = canonical_bytes(value)
        allowed = constraint["one_of"]
        assert isinstance(allowed, list)
        return any(canonical_bytes(v) == shown for v in allowed)
    if not _is_number(value):
        return False  # a range holds numbers only: a string amount is not in it
    number = _decimal(value)
    low, high = constraint.get("min"), constraint.get("max")
    return (low is None or number >= _decimal(low)) and (high is None or number <= _decimal(high))


def covered_amount(
    grant: StandingGrant, input: Mapping[str, JsonValue], started_by: str | None
) -> JsonValue | bool:
    """The amount the call consumes (None when the grant has no amount limit).

    False when the grant does not cover the call: the saga's starter is the grantor (four
    eyes) or not the principal it names, an argument is missing or out of its
    constraint, or the count or amount left is too small.
    """
    if started_by is not None and principal_key(started_by) == principal_key(grant.grantor):
        return False  # four eyes: a grantor's standing approval does not cover their sagas
    if grant.started_by is not None and (
        started_by is None or principal_key(started_by) != principal_key(grant.started_by)
    ):
        return False
    for field, constraint in grant.match.items():
        if field not in input or not _fits(constraint, input[field]):
            return False
    if grant.used_calls + 1 > grant.max_calls:
        return False
    if grant.amount_field is None:
        return None
    amount = input.get(grant.amount_field)
    if not _is_number(amount) or _decimal(amount) < 0:
        return False  # no amount, or a negative one that would add to the budget
    total = decimal.Decimal(grant.used_amount) + _decimal(amount)
    if total > _decimal(grant.max_amount):
        return False
    return amount


def _is_number(value: object) -> bool:
    """A JSON number a journal entry holds exactly: finite, a whole one within ±(2**53 - 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT
    return value == value and abs(value) != float("inf")


def _decimal(value: JsonValue) -> decimal.Decimal:
    # repr is the shortest form that reads back as the float: 0.1 is 0.1, not 0.1000…0555
    return decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(str(value))


def _text(value: decimal.Decimal) -> str:
    """A decimal as plain text: `12.5`, `300`, never `3E+2`."""
    text = format(value.normalize(), "f")
    return text if text != "-0" else "0"


def rfc3339(moment: datetime.datetime) -> str:
    """`moment` in UTC, as RFC 3339 with microseconds.

    Raises:
        ApprovalInputError: In UTC it falls outside the years 1 to 9999 (late on
            9999-12-31 in a zone west of UTC).
    """
    try:
        return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except OverflowError:
        raise ApprovalInputError(
            f"{moment.isoformat()} is past the last time a journal holds (9999-12-31 UTC)"
        ) from None


def _parse_time(text: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(text)
    return moment
