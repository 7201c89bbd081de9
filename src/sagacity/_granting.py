"""Standing approvals on the facade: grant, revoke and list them (`approval/_grants.py`).

A mixin, so that the facade in `saga.py` stays thin.
"""

from __future__ import annotations

import datetime
import decimal
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalLifecycle
from sagacity.approval._grants import StandingGrant, grants_of
from sagacity.errors import ApprovalInputError

if TYPE_CHECKING:
    from sagacity.tools import SagaTool

__all__ = ["StandingApprovals"]


class StandingApprovals:
    """`Sagacity.grant`, `revoke` and `grants`."""

    approval: ApprovalLifecycle
    _tools: dict[str, SagaTool]

    def grant(
        self,
        tool_name: str,
        *,
        grantor: str,
        max_calls: int,
        expires_at: datetime.datetime | None = None,
        ttl: float | datetime.timedelta | None = None,
        match: Mapping[str, Mapping[str, Any]] | None = None,
        max_amount: int | float | decimal.Decimal | None = None,
        amount_field: str | None = None,
        started_by: str | None = None,
        reason: str | None = None,
        via: str | None = None,
    ) -> StandingGrant:
        """Journal a standing approval that covers future calls of one IRREVERSIBLE tool.

        A call of `tool_name` that would ask a human runs unasked while the grant covers
        it: its arguments meet every constraint in `match`, the grant has a call left
        and, with `max_amount`, room for the call's `amount_field`; it has not expired
        nor been revoked; and its saga was not started by the grantor (four eyes). The
        call consumes the grant (a GRANT_USED entry in the grant's chain) before its
        INTENT, which names the grant in `approval_grant`. Any other call asks as usual.

        Args:
            tool_name: The one tool it covers.
            grantor: Who grants it; journaled, and covered by its signature when approvals
                are signed.
            max_calls: How many calls it covers at most.
            expires_at: When it stops covering calls (timezone-aware); or give `ttl`.
            ttl: How long from now it covers calls (seconds or a timedelta).
            match: Argument constraints, by parameter name: `{"equals": value}`,
                `{"one_of": [v1, v2, …]}` (an allow-list) or `{"min": a, "max": b}` (a
                numeric range; either bound may be left out).
            max_amount: The most the covered calls' `amount_field` may add up to.
            amount_field: The parameter that holds a call's amount (a number ≥ 0).
            started_by: Cover only sagas started by this principal (not the grantor).
            reason: Why it is granted, journaled with it.
            via: Where it was granted ("python" when None, "cli", "api", "inbox").

        Returns:
            The grant, with its id and remaining budget.

        Raises:
            SelfApprovalError: `started_by` is the grantor.
            ApprovalInputError: The terms are malformed, or the expiry is missing or past;
                or the tool is wrapped here and a grant could not cover its calls (it is
                not IRREVERSIBLE, needs more than one approver, or needs a justification
                and no reason is given) or has no argument a constraint names.
            ConfigurationError: Approvals must be signed and this Sagacity cannot sign.
        """
        self._check_tool(tool_name, match, amount_field, reason)
        if (expires_at is None) == (ttl is None):
            raise ApprovalInputError(
                f"tool {tool_name!r}: a grant needs an expiry: give expires_at or ttl, one of them"
            )
        if ttl is not None:
            try:
                if isinstance(ttl, int | float) and not isinstance(ttl, bool):
                    ttl = datetime.timedelta(seconds=ttl)
                if not isinstance(ttl, datetime.timedelta):
                    raise ApprovalInputError(
                        f"tool {tool_name!r}: ttl must be seconds or a timedelta, not {ttl!r}"
                    )
                expires_at = self.approval.now() + ttl
            except (OverflowError, ValueError):  # NaN, or past the last datetime
                raise ApprovalInputError(
                    f"tool {tool_name!r}: ttl {ttl!r} is not a length of time a grant can last"
                ) from None
        assert expires_at is not None
        return grants_of(self.approval).grant(
            tool_name,
            grantor=grantor,
            expires_at=expires_at,
            max_calls=max_calls,
            match=match,
            max_amount=max_amount,
            amount_field=amount_field,
            started_by=started_by,
            reason=reason,
            via=via,
        )

    def _check_tool(
        self,
        tool_name: str,
        match: Mapping[str, Any] | None,
        amount_field: str | None,
        reason: str | None,
    ) -> None:
        """Refuse a grant that could never cover a call of a tool wrapped here.

        A process that does not hold the tool (the CLI, a server without `--tools`) cannot
        tell, and journals the grant as given: a call it does not fit asks as before.
        """
        tool = getattr(self, "_tools", {}).get(tool_name)
        if tool is None:
            return
        why = None
        if tool.reversibility is not Reversibility.IRREVERSIBLE or tool.approval_reason:
            why = "its calls never ask for an approval a grant could stand for"
            if tool.approval_reason:
                why = "every call of it asks a human (a workflow gate)"
        elif self.approval.declared_approvers.get(tool_name, 1) > 1:
            why = (
                f"each call needs {self.approval.declared_approvers[tool_name]} different "
                "approvers, and a grant is one grantor's approval"
            )
        elif tool_name in self.approval.justification_required and not (reason or "").strip():
            why = "its approvals must give a justification: give the grant a reason"
        if why is not None:
            raise ApprovalInputError(
                f"tool {tool_name!r} ({tool.reversibility.name}): the grant is refused: {why}"
            )
        parameters = tool.signature.parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return  # any name may be an argument
        known = [p.name for p in parameters if p.name not in tool.excluded]
        named = list(match or {}) + ([amount_field] if amount_field is not None else [])
        for field in named:
            if field not in known:
                raise ApprovalInputError(
                    f"tool {tool_name!r} has no argument {field!r} (it takes "
                    f"{', '.join(known) or 'none'}): a grant constraining it would cover "
                    "no call"
                )

    def revoke(
        self,
        grant_id: str,
        *,
        revoked_by: str,
        reason: str | None = None,
        via: str | None = None,
    ) -> StandingGrant:
        """Journal the revocation of a standing grant: no call it would cover runs unasked after.

        A call that consumed the grant before the REVOKED entry was committed is covered;
        every call that consumes after it is not, in any process (the grant's chain orders
        them).

        Raises:
            ApprovalNotFoundError: No grant has that id.
            SagaStateError: It was revoked already.
        """
        return grants_of(self.approval).revoke(
            grant_id, revoked_by=revoked_by, reason=reason, via=via
        )

    def grants(self, tool_name: str | None = None) -> list[StandingGrant]:
        """Every standing grant (of one tool, when named), newest first.

        Each is read from its chain: its `state` (`active`, `expired`, `revoked`,
        `exhausted`, or `unverifiable`, which covers nothing), `used_calls`, `used_amount`,
        `remaining_calls` and `remaining_amount`.
        """
        return grants_of(self.approval).every(tool_name)

    def get_grant(self, grant_id: str) -> StandingGrant:
        """One standing grant, as its chain records it.

        Raises:
            ApprovalNotFoundError: No grant has that id.
        """
        return grants_of(self.approval).get(grant_id)
