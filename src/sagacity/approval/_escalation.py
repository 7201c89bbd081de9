"""Reminders and escalation: what a tool declares, and what the journal says happened.

A tool may declare `compensable(remind_before=..., escalate_to=...)`. Its requests then
journal, in their AWAITING_APPROVAL entry, when a reminder is due (`remind_at`) and the
group they escalate to (`escalate_to`). A sweep (`Escalator.sweep`) acts at those
times: REMINDED when a reminder went out, ESCALATED when the request expired undecided
and now waits for the group (its members and a new expiry journaled with it), and at the
final expiry the REJECTED (`source` `expiry`) that denies it, as a request without a
declaration always was. Everything a check needs is read back from those entries: after
an ESCALATED, only approvals journaled later, by the group's members, count.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sagacity._history import SagaHistory, payload_of
from sagacity._ids import require_name
from sagacity._unicode import principal_key
from sagacity.annotations import Reversibility
from sagacity.errors import ConfigurationError
from sagacity.journal import JournalEntry, Phase

__all__ = [
    "GROUP_NAME",
    "ApproverGroup",
    "Escalation",
    "ToolEscalation",
    "approver_groups",
    "check_escalation",
    "counts_after_escalation",
    "escalation_in",
    "gate_escalation",
    "reminded_for",
    "tool_escalation",
]

GROUP_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
"""What an approver group's name may be: it is journaled, shown and put in URLs."""

MAX_MEMBERS = 1000
"""The most principals a group may name: more is a mistake, not a policy."""

MAX_GROUP_TTL = datetime.timedelta(days=3660)
"""The longest a group may take (about ten years): its expiry must stay a date the sweep
can compute and journal, whatever the clock says."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ApproverGroup:
    """A second group of approvers that an expired request escalates to.

    Raises:
        ConfigurationError: The name is not a lowercase word of up to 32 letters, digits,
            `-` or `_`; `members` is not a list of principal names, or is empty; or the
            time to live is not a positive number of seconds up to `MAX_GROUP_TTL`.
    """

    name: str
    """The group's name, as tools name it in `compensable(escalate_to=)`."""
    members: tuple[str, ...]
    """The principals whose approvals count once a request escalated to the group."""
    ttl: datetime.timedelta
    """How long an escalated request waits for the group before it is denied."""

    def __init__(
        self, *, name: str, members: Iterable[str], ttl: float | datetime.timedelta
    ) -> None:
        if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
            raise ConfigurationError(
                f"approver group {name!r}: its name must be a lowercase letter then up to 31 "
                "lowercase letters, digits, '-' or '_'"
            )
        if isinstance(members, str | bytes):
            raise ConfigurationError(
                f"approver group {name!r}: members must be a list of principals, not the "
                f"string {members!r}"
            )
        try:
            # Read once: a generator checked, then copied, would copy nothing.
            given = list(members)
        except TypeError:
            raise ConfigurationError(
                f"approver group {name!r}: members must be a list of principals, not "
                f"{type(members).__name__}"
            ) from None
        for member in given:
            try:
                require_name(member, f"approver group {name!r}: member")
            except ValueError as error:
                raise ConfigurationError(str(error)) from None
        # One principal named twice ('Carol' and 'carol' are one, as approvals count
        # them) is one member: the first spelling is kept.
        by_key: dict[str, str] = {}
        for member in given:
            by_key.setdefault(principal_key(member), member)
        named = tuple(by_key.values())
        if not named or len(named) > MAX_MEMBERS:
            raise ConfigurationError(
                f"approver group {name!r}: members: it needs 1 to {MAX_MEMBERS} members, "
                f"not {len(named)}"
            )
        lasts = _positive(ttl, f"approver group {name!r}: ttl")
        if lasts > MAX_GROUP_TTL:
            raise ConfigurationError(
                f"approver group {name!r}: ttl must be at most {MAX_GROUP_TTL.days} days, "
                f"not {lasts}"
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "members", named)
        object.__setattr__(self, "ttl", lasts)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Escalation:
    """A request's escalation to a second group, as its ESCALATED entry records it."""

    group: str
    """The group the request waits for now."""
    members: tuple[str, ...]
    """Its members when it escalated: only their approvals count."""
    seq: int
    """The seq of the ESCALATED entry: approvals journaled before it no longer count."""
    escalated_at: datetime.datetime
    """When it escalated (UTC), by the clock of the Sagacity that escalated it."""
    expires_at: datetime.datetime | None
    """When the group's time runs out and the request is denied (UTC)."""
    remind_at: datetime.datetime | None
    """When the group is reminded (UTC); None for no reminder."""

    def to_json(self) -> dict[str, Any]:
        """The escalation as JSON, for the REST API and the webhook."""
        return {
            "group": self.group,
            "members": list(self.members),
            "seq": self.seq,
            "escalated_at": self.escalated_at.isoformat(),
            "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
            "remind_at": None if self.remind_at is None else self.remind_at.isoformat(),
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolEscalation:
    """What one wrapped tool declared for its requests' expiry."""

    remind_before: datetime.timedelta | None
    """How long before each expiry a reminder goes out; None for none."""
    escalate_to: ApproverGroup | None
    """The group an expired request escalates to; None: it is denied."""
    ttl: datetime.timedelta | None = None
    """How long its requests live before they expire, when not `approval_ttl`: a workflow
    gate's timeout."""

    def remind_at(self, expires_at: datetime.datetime | None) -> datetime.datetime | None:
        """When a request expiring at `expires_at` is reminded; None for never."""
        if self.remind_before is None or expires_at is None:
            return None
        return expires_at - self.remind_before


def check_escalation(
    remind_before: object, escalate_to: object, reversibility: Reversibility, name: str, where: str
) -> None:
    """Refuse a declaration that cannot be read, before any configuration is known.

    Raises:
        ConfigurationError: `remind_before` is not a positive, finite duration;
            `escalate_to` is not a group name; or either is declared on a tool that is not
            IRREVERSIBLE (it never waits for approval).
    """
    if remind_before is None and escalate_to is None:
        return
    if reversibility is not Reversibility.IRREVERSIBLE:
        raise ConfigurationError(
            f"{where}: tool {name!r} declares remind_before or escalate_to but is "
            f"{reversibility.name}; only IRREVERSIBLE calls wait for approval, so declare it "
            "IRREVERSIBLE or drop them"
        )
    if remind_before is not None:
        _positive(remind_before, f"{where}: tool {name!r}: remind_before")
    if escalate_to is not None and (
        not isinstance(escalate_to, str) or not GROUP_NAME.fullmatch(escalate_to)
    ):
        raise ConfigurationError(
            f"{where}: tool {name!r}: escalate_to must name an approver group (a lowercase "
            f"letter then up to 31 lowercase letters, digits, '-' or '_'), not {escalate_to!r}"
        )


def approver_groups(
    groups: Iterable[ApproverGroup] | Mapping[str, ApproverGroup],
) -> dict[str, ApproverGroup]:
    """The configured groups by name.

    Raises:
        ConfigurationError: Something other than an `ApproverGroup`, or two with one name.
    """
    found: dict[str, ApproverGroup] = {}
    for group in groups.values() if isinstance(groups, Mapping) else groups:
        if not isinstance(group, ApproverGroup):
            raise ConfigurationError(
                f"approver_groups holds {group!r}; give ApproverGroup(name=, members=, ttl=)"
            )
        if group.name in found:
            raise ConfigurationError(f"approver_groups names group {group.name!r} twice")
        found[group.name] = group
    return found


def tool_escalation(
    name: str,
    remind_before: datetime.timedelta | float | None,
    escalate_to: str | None,
    *,
    ttl: datetime.timedelta | None,
    groups: Mapping[str, ApproverGroup],
    ttl_name: str = "approval_ttl",
    approvers: int = 1,
) -> ToolEscalation | None:
    """What tool `name` declared, checked against this Sagacity's TTL and groups.

    Raises:
        ConfigurationError: Requests do not expire (`approval_ttl` is None), the reminder
            would come before the request is made, the group is not configured, or it
            has fewer members than the tool's `approvers` (an escalated request could
            never be approved).
    """
    if remind_before is None and escalate_to is None:
        return None
    where = f"tool {name!r}"
    if ttl is None or ttl <= datetime.timedelta(0):
        raise ConfigurationError(
            f"{where} declares remind_before or escalate_to, but requests never expire here; "
            "give Sagacity an approval_ttl"
        )
    before = None if remind_before is None else _positive(remind_before, f"{where}: remind_before")
    if before is not None and before >= ttl:
        raise ConfigurationError(
            f"{where}: remind_before={before} is not shorter than {ttl_name}={ttl}: the "
            "reminder would go out before the request is made"
        )
    group = None
    if escalate_to is not None:
        group = groups.get(escalate_to)
        if group is None:
            known = ", ".join(sorted(groups)) or "none"
            raise ConfigurationError(
                f"{where}: escalate_to={escalate_to!r} names no approver group of this "
                f"Sagacity (configured: {known}); give Sagacity(approver_groups=[...])"
            )
        if len(group.members) < approvers:
            raise ConfigurationError(
                f"{where}: escalate_to={escalate_to!r} names a group of {len(group.members)} "
                f"member(s), but the tool needs approvers={approvers} different approvers: "
                "an escalated request could never be approved; add members to the group or "
                "lower approvers"
            )
    return ToolEscalation(remind_before=before, escalate_to=group)


def gate_escalation(
    name: str,
    remind_before: object,
    escalate_to: object,
    *,
    timeout_seconds: float,
    groups: Mapping[str, ApproverGroup],
    where: str,
    approvers: int = 1,
) -> ToolEscalation | None:
    """What a workflow gate declared (`gate(remind_before=, escalate_to=)`), checked.

    The gate's timeout is its requests' time to live: the reminder comes before it, and
    the escalation at it.

    Raises:
        ConfigurationError: A value cannot be read, the gate has no timeout, or the
            group is not configured or has fewer members than the stage's `approvers`.
    """
    if remind_before is None and escalate_to is None:
        return None
    check_escalation(remind_before, escalate_to, Reversibility.IRREVERSIBLE, name, where)
    if not timeout_seconds:
        raise ConfigurationError(
            f"{where}: gate {name!r} declares remind_before or escalate_to but no "
            "timeout_seconds: a gate that never times out is never reminded nor escalated"
        )
    ttl = datetime.timedelta(seconds=timeout_seconds)
    try:
        found = tool_escalation(
            name,
            remind_before,  # type: ignore[arg-type]  # checked above
            escalate_to,  # type: ignore[arg-type]
            ttl=ttl,
            groups=groups,
            ttl_name="timeout_seconds",
            approvers=approvers,
        )
    except ConfigurationError as error:
        raise ConfigurationError(f"{where}: {error}") from None
    return None if found is None else dataclasses.replace(found, ttl=ttl)


def escalation_in(
    history: SagaHistory,
    awaiting: JournalEntry,
    groups: Mapping[str, ApproverGroup] | None = None,
) -> Escalation | None:
    """The request's escalation, read from its ESCALATED entry; None when it has none.

    An entry that cannot be read, or names another group than the request's
    `escalate_to`, escalates to nobody: no approval counts after it. Where this process
    configures the group (`groups`), only the members it names there too count: a row
    appended with one more member adds nobody.
    """
    found = next(
        (
            e
            for e in reversed(history.entries)
            if e.phase is Phase.ESCALATED and e.ref_seq == awaiting.seq
        ),
        None,
    )
    if found is None:
        return None
    said = payload_of(found)
    members = said.get("members")
    group = said.get("group")
    readable = (
        isinstance(members, list)
        and all(isinstance(m, str) for m in members)
        and isinstance(group, str)
        and group == payload_of(awaiting).get("escalate_to")
    )
    named: tuple[str, ...] = tuple(members) if readable and isinstance(members, list) else ()
    configured = None if groups is None or not isinstance(group, str) else groups.get(group)
    if configured is not None:
        allowed = {principal_key(m) for m in configured.members}
        named = tuple(m for m in named if principal_key(m) in allowed)
    return Escalation(
        group=group if isinstance(group, str) else "",
        members=named,
        seq=found.seq,
        escalated_at=_time(said.get("escalated_at"))
        or _time(found.recorded_at)
        or datetime.datetime.min.replace(tzinfo=datetime.UTC),
        expires_at=_time(said.get("expires_at")),
        remind_at=_time(said.get("remind_at")),
    )


def reminded_for(
    history: SagaHistory, awaiting: JournalEntry, expires_at: datetime.datetime | None
) -> JournalEntry | None:
    """The REMINDED entry that warned of the request's expiry at `expires_at`, if any."""
    for entry in history.entries:
        if (
            entry.phase is Phase.REMINDED
            and entry.ref_seq == awaiting.seq
            and _time(payload_of(entry).get("expires_at")) == expires_at
        ):
            return entry
    return None


def counts_after_escalation(escalation: Escalation | None, entry: JournalEntry) -> bool:
    """Whether an APPROVED entry may count under the request's escalation (if it has one)."""
    if escalation is None:
        return True
    approver = payload_of(entry).get("approver")
    members = {principal_key(m) for m in escalation.members}
    return (
        entry.seq > escalation.seq
        and isinstance(approver, str)
        and principal_key(approver) in members
    )


def _positive(value: object, what: str) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(f"{what} must be a timedelta or seconds, not {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(f"{what} must be a positive, finite duration, not {value!r}")
    try:
        return datetime.timedelta(seconds=seconds)
    except OverflowError:
        raise ConfigurationError(f"{what} is too long: {value!r}") from None


def _time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)
