"""Standing approvals: a human's grant that covers future calls of one tool, within limits.

A grant is a chain of its own in the journal, saga `grant-<id>`:

- GRANTED (seq 1): the terms (the tool, argument constraints, a maximum count, a maximum
  total amount and the field that holds it, an expiry, whose sagas it covers), the
  grantor, and an Ed25519 signature over the terms when approvals are signed;
- GRANT_USED, one per covered call, appended by the call before its INTENT: the saga,
  call id and input hash it covered, and the amount it consumed;
- REVOKED: no call is covered after it.

Every GRANT_USED is a conditional append on the chain's last seq, so the journal's unique
seq serialises consumptions against each other and against a revocation, in one process
or many: a call that read the chain before a REVOKED (or before another call took the
last of the budget) loses its append, reads the chain again, and is not covered. A call
covered by a grant journals which grant and which GRANT_USED in its INTENT payload
(`approval_grant`). A chain that does not verify (an edited row, a broken link, a missing
or wrong signature where signatures are required, an entry that is not a grant's) covers
nothing: the call asks a human.

A call whose GRANT_USED was committed and whose process died before its INTENT was
consumed and not run: the budget is spent, the call is not in the journal of its saga.
"""

from __future__ import annotations

import datetime
import decimal
import random
import time
import uuid
import weakref
from collections.abc import Callable, Container, Mapping
from typing import TYPE_CHECKING, Any

from sagacity._history import payload_of
from sagacity._ids import require_id, require_name
from sagacity._unicode import principal_key
from sagacity.approval._grant_chain import (
    GRANT_PREFIX,
    StandingGrant,
    checked_terms,
    covered_amount,
    grant_signed_bytes,
    read_grant,
    rfc3339,
)
from sagacity.errors import (
    AppendConflictError,
    ApprovalInputError,
    ApprovalNotFoundError,
    ConfigurationError,
    JournalError,
    SagaStateError,
    SelfApprovalError,
    SerializationError,
)
from sagacity.journal import JournalEntry, JsonValue, Phase, SideEffectJournal, sha256_hex
from sagacity.journal._canonical import copy_json

if TYPE_CHECKING:
    from sagacity.approval._policy import ApprovalPolicy

__all__ = ["StandingGrant", "StandingGrants", "grants_of"]

_CONSUME_RETRIES = 64
"""How often a call re-reads a grant after another writer appended to its chain first."""

_CONSUME_PAUSE = 0.010
"""The longest random pause (seconds) before a call that lost a race reads the grant again:
two processes that keep colliding fall out of step, and a slow one is not starved by a
fast one that reads and appends within its window every time."""

_REVOKE_RETRIES = 64
"""How often a revocation re-reads a grant after a call consumed it first, before it is
appended whatever the chain's last seq."""


def _json_amount(tool_name: str, max_amount: decimal.Decimal) -> int | float:
    """A Decimal maximum as the JSON number that holds it exactly; refused when none does."""
    if not max_amount.is_finite():  # NaN, sNaN, Infinity: compared, some of them raise
        raise ApprovalInputError(
            f"tool {tool_name!r}: max_amount must be a number of at least 0, not {max_amount}"
        )
    if max_amount == max_amount.to_integral_value():
        return int(max_amount)
    number = float(max_amount)
    if decimal.Decimal(repr(number)) != max_amount:
        # A float would round it, perhaps up: the grant would cover more than was given.
        raise ApprovalInputError(
            f"tool {tool_name!r}: max_amount {max_amount} has more digits than a JSON number "
            f"holds exactly (it would be {number!r}); give it rounded down"
        )
    return number


def _json_match(tool_name: str, match: Mapping[str, Any] | None) -> JsonValue:
    """The constraints as JSON (checked by `checked_terms` next)."""
    if match is None:
        return {}
    if not isinstance(match, Mapping):
        raise ApprovalInputError(
            f"tool {tool_name!r}: match must map argument names to constraints, not "
            f"{type(match).__name__}"
        )
    try:
        return copy_json(dict(match))
    except SerializationError as error:
        raise ApprovalInputError(
            f"tool {tool_name!r}: the grant's match is not JSON: {error}"
        ) from None


class StandingGrants:
    """Granting, revoking, listing and consuming standing approvals over one journal.

    Args:
        journal: Where grant chains are journaled.
        policy: How grants are signed, and which signatures count.
        clock: The current time, timezone-aware.
        approvers: How many approvers each tool wrapped here declares, by name: a call of
            a tool that needs more than one is never covered (one grantor is one approver).
        justified: The tools wrapped here whose approvals must give a justification: a
            grant without a reason does not cover their calls.
    """

    def __init__(
        self,
        journal: SideEffectJournal,
        policy: ApprovalPolicy,
        clock: Callable[[], datetime.datetime],
        *,
        approvers: Mapping[str, int] | None = None,
        justified: Container[str] = frozenset(),
    ) -> None:
        self.journal = journal
        self.policy = policy
        self.now = clock
        self.approvers: Mapping[str, int] = approvers if approvers is not None else {}
        self.justified = justified
        self._settled: dict[str, str] = {}
        """Grants that can never cover another call here (revoked, expired, exhausted,
        unverifiable, or for another tool), by id, with their tool: skipped unread."""

    # -- grant and revoke -----------------------------------------------------------------

    def grant(
        self,
        tool_name: str,
        *,
        grantor: str,
        expires_at: datetime.datetime,
        max_calls: int,
        match: Mapping[str, Mapping[str, Any]] | None = None,
        max_amount: int | float | decimal.Decimal | None = None,
        amount_field: str | None = None,
        started_by: str | None = None,
        reason: str | None = None,
        via: str | None = None,
    ) -> StandingGrant:
        """Journal GRANTED in a new chain and return the grant (see `Sagacity.grant`).

        Raises:
            SelfApprovalError: The grantor is the principal whose sagas it covers.
            ApprovalInputError: The terms are malformed, or the expiry is past.
            ConfigurationError: Approvals must be signed and this process cannot sign.
        """
        require_name(grantor, "grantor")
        require_id(tool_name, "tool name")
        if started_by is not None:
            try:
                require_name(started_by, "started_by")
            except ValueError as error:
                raise ApprovalInputError(f"tool {tool_name!r}: {error}") from None
            if principal_key(started_by) == principal_key(grantor):
                raise SelfApprovalError(
                    f"tool {tool_name!r}: {grantor!r} cannot grant a standing approval for "
                    "sagas they start themselves; another principal must grant it"
                )
        if not isinstance(expires_at, datetime.datetime) or expires_at.tzinfo is None:
            raise ApprovalInputError(
                f"tool {tool_name!r}: a grant's expires_at must be a timezone-aware datetime"
            )
        if expires_at <= self.now():
            raise ApprovalInputError(
                f"tool {tool_name!r}: the grant would expire at {expires_at.isoformat()}, "
                "which is past; give a later expiry"
            )
        try:
            expiry = rfc3339(expires_at)
        except ApprovalInputError as error:
            raise ApprovalInputError(f"tool {tool_name!r}: expires_at {error}") from None
        if isinstance(max_amount, decimal.Decimal):
            max_amount = _json_amount(tool_name, max_amount)
        terms: dict[str, JsonValue] = {
            "tool_name": tool_name,
            "match": _json_match(tool_name, match),
            "max_calls": max_calls,
            "max_amount": max_amount,
            "amount_field": amount_field,
            "expires_at": expiry,
            "started_by": started_by,
        }
        try:
            checked_terms(terms)
        except ApprovalInputError as error:
            raise ApprovalInputError(f"tool {tool_name!r}: the grant is refused: {error}") from None
        if reason is not None and not isinstance(reason, str):
            raise ApprovalInputError(f"tool {tool_name!r}: a grant's reason must be text")
        grant_id = uuid.uuid4().hex
        payload: dict[str, JsonValue] = {
            "grant_id": grant_id,
            "grantor": grantor,
            "terms": terms,
            "reason": reason,
            "via": via or "python",
        }
        payload.update(self._signature(grant_id, terms, grantor, reason))
        self.journal.append(
            GRANT_PREFIX + grant_id,
            Phase.GRANTED,
            tool_name=tool_name,
            payload=payload,
            expected_seq=0,
        )
        return self.get(grant_id)

    def _signature(
        self, grant_id: str, terms: Mapping[str, JsonValue], grantor: str, reason: str | None
    ) -> dict[str, JsonValue]:
        key = self.policy.signing_key
        if key is None:
            if self.policy.require_signed:
                raise ConfigurationError(
                    f"tool {terms['tool_name']!r}: approvals must be signed "
                    "(require_signed_approvals), but this Sagacity has no "
                    "approval_signing_key; the grant was not journaled"
                )
            return {}
        return {
            "signature": key.sign(grant_signed_bytes(grant_id, terms, grantor, reason)),
            "key_id": key.key_id,
        }

    def revoke(
        self,
        grant_id: str,
        *,
        revoked_by: str,
        reason: str | None = None,
        via: str | None = None,
    ) -> StandingGrant:
        """Journal REVOKED: no call consumes the grant after it (see `Sagacity.revoke`).

        Raises:
            ApprovalNotFoundError: No grant has that id.
            SagaStateError: It was revoked already.
        """
        require_name(revoked_by, "revoked_by")
        saga_id = self._saga_id(grant_id)
        payload: dict[str, JsonValue] = {
            "revoked_by": revoked_by,
            "reason": reason,
            "via": via or "python",
        }
        for attempt in range(_REVOKE_RETRIES + 1):
            entries = self._chain(grant_id)
            # Whatever the chain holds, a revocation only takes coverage away: it is
            # journaled even on a chain that no longer verifies.
            for entry in entries:
                if entry.phase is Phase.REVOKED:
                    raise SagaStateError(
                        f"grant {grant_id!r} was revoked at {entry.recorded_at} by "
                        f"{payload_of(entry).get('revoked_by')!r}; it covers nothing already"
                    )
            try:
                # On the last seq read, so that of two revocations at once one is refused;
                # after losing every race to consumers, appended anyway: it must land.
                self.journal.append(
                    saga_id,
                    Phase.REVOKED,
                    tool_name=entries[0].tool_name,
                    payload=payload,
                    expected_seq=entries[-1].seq if attempt < _REVOKE_RETRIES else None,
                )
            except AppendConflictError:
                continue  # a call consumed it, or another revocation came first
            break
        return self.get(grant_id)

    # -- show -----------------------------------------------------------------------------

    def get(self, grant_id: str) -> StandingGrant:
        """Return one grant as its chain records it.

        Raises:
            ApprovalNotFoundError: No grant has that id.
        """
        grant = read_grant(self._chain(grant_id), self.policy, self.now())
        assert grant is not None  # the chain has its GRANTED entry
        return grant

    def _chain(self, grant_id: str) -> list[JournalEntry]:
        """The entries of a grant's chain.

        Raises:
            ApprovalNotFoundError: No chain has that id, or it is an application's saga
                called `grant-…` (its first entry is not GRANTED): a revocation journaled
                there would be appended to the saga.
        """
        entries = self.journal.entries(self._saga_id(grant_id))
        if not entries:
            raise ApprovalNotFoundError(f"no standing grant {grant_id!r}; list them with grants")
        if entries[0].phase is not Phase.GRANTED:
            raise ApprovalNotFoundError(
                f"no standing grant {grant_id!r}: saga {GRANT_PREFIX + grant_id!r} is a saga, "
                "not a grant's chain; list the grants with grants"
            )
        return entries

    def every(self, tool_name: str | None = None) -> list[StandingGrant]:
        """Every grant (of one tool, when named), newest first."""
        found = []
        now = self.now()
        for saga_id in self._chains():
            entries = self.journal.entries(saga_id)
            if entries and entries[0].phase is not Phase.GRANTED:
                continue  # an application's saga called grant-…, not a grant
            grant = read_grant(entries, self.policy, now)
            if grant is not None and (tool_name is None or grant.tool_name == tool_name):
                found.append(grant)
        found.sort(key=lambda g: (g.granted_at, g.grant_id), reverse=True)
        return found

    def _chains(self) -> list[str]:
        """The saga ids of every grant's chain (ids sort by code point on every backend)."""
        found: list[str] = []
        after = GRANT_PREFIX
        while True:
            page = self.journal.list_sagas(after=after, limit=200)
            for saga_id in page:
                if not saga_id.startswith(GRANT_PREFIX):
                    return found
                found.append(saga_id)
            if len(page) < 200:
                return found
            after = page[-1]

    @staticmethod
    def _saga_id(grant_id: str) -> str:
        if not isinstance(grant_id, str) or not grant_id:
            raise ApprovalNotFoundError(f"no standing grant {grant_id!r}")
        return GRANT_PREFIX + require_id(grant_id, "grant id")

    # -- consume --------------------------------------------------------------------------

    def cover(
        self,
        tool_name: str,
        input: Mapping[str, JsonValue],
        *,
        saga_id: str,
        call_id: str,
        started_by: str | None,
    ) -> dict[str, JsonValue] | None:
        """Consume a grant that covers this call; return what its INTENT journals, or None.

        The GRANT_USED is committed before this returns: the caller journals the INTENT
        next. None (no grant covers the call: none for the tool, none whose constraints
        and remaining budget fit, none verifiable, or the tool needs more approvers than
        one grantor) means the call asks a human.
        """
        if self.approvers.get(tool_name, 1) > 1:
            return None  # a grant is one principal's approval: it cannot stand for two
        for saga_id_of_grant in self._chains():
            grant_id = saga_id_of_grant[len(GRANT_PREFIX) :]
            settled = self._settled.get(grant_id)
            if settled is not None:
                continue
            covered = self._consume(
                saga_id_of_grant,
                tool_name,
                input,
                saga_id=saga_id,
                call_id=call_id,
                started_by=started_by,
            )
            if covered is not None:
                return covered
        return None

    def _consume(
        self,
        chain: str,
        tool_name: str,
        input: Mapping[str, JsonValue],
        *,
        saga_id: str,
        call_id: str,
        started_by: str | None,
    ) -> dict[str, JsonValue] | None:
        for attempt in range(_CONSUME_RETRIES):
            if attempt:
                time.sleep(random.uniform(0, _CONSUME_PAUSE))
            entries = self.journal.entries(chain)
            if entries and entries[0].phase is not Phase.GRANTED:
                # An application's saga called grant-…: never a grant, so never read again.
                self._settled[chain[len(GRANT_PREFIX) :]] = ""
                return None
            grant = read_grant(entries, self.policy, self.now())
            if grant is None:
                return None
            if grant.state != "active" or grant.tool_name != tool_name:
                if grant.state != "unverifiable":  # an unverifiable one is logged each time
                    self._settled[grant.grant_id] = grant.tool_name
                return None
            if tool_name in self.justified and not (grant.reason or "").strip():
                return None  # its approvals must say why; a grant that does not covers none
            amount = covered_amount(grant, input, started_by)
            if amount is False:
                return None
            use = grant.used_calls + 1
            record: dict[str, JsonValue] = {
                "saga_id": saga_id,
                "call_id": call_id,
                "input_sha256": sha256_hex(dict(input)),
                "amount": amount,
                "use": use,
            }
            try:
                used = self.journal.append(
                    chain,
                    Phase.GRANT_USED,
                    tool_name=tool_name,
                    call_id=call_id,
                    payload=record,
                    expected_seq=entries[-1].seq,
                )
            except AppendConflictError:
                continue  # another call or a revocation came first: read the chain again
            return {
                "grant_id": grant.grant_id,
                "grantor": grant.grantor,
                "grant_seq": used.seq,
                "grant_hash": used.hash,
                "use": use,
                "amount": amount,
            }
        raise JournalError(
            f"saga {saga_id!r}: call {call_id!r} of tool {tool_name!r} lost "
            f"{_CONSUME_RETRIES} races for grant {chain[len(GRANT_PREFIX) :]!r}; it was not "
            "run, call it again"
        )


_BY_LIFECYCLE: weakref.WeakKeyDictionary[object, StandingGrants] = weakref.WeakKeyDictionary()


def grants_of(approval: Any) -> StandingGrants:
    """The standing grants of an `ApprovalLifecycle`: its journal, policy and clock."""
    grants = _BY_LIFECYCLE.get(approval)
    if grants is None:
        # The lifecycle's own collections: tools wrapped later are seen as they are declared.
        grants = StandingGrants(
            approval.journal,
            approval.policy,
            approval.now,
            approvers=approval.declared_approvers,
            justified=approval.justification_required,
        )
        _BY_LIFECYCLE[approval] = grants
    return grants
