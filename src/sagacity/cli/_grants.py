"""The standing-approval commands: grant, revoke, grants (docs/approval.md)."""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections.abc import Callable
from typing import Any

import orjson

from sagacity._ids import require_name
from sagacity.approval._grants import StandingGrant
from sagacity.cli._common import EXIT_OK, CliError, emit_json, emit_table, opened
from sagacity.cli._request_text import visible

__all__ = ["COMMANDS", "add_grant_commands"]

Command = Callable[..., argparse.ArgumentParser]
"""The CLI's `command(name, help, json=, signed=)` that adds a subcommand."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_grant_commands(command: Command) -> None:
    """Add `grant`, `revoke` and `grants` to the parser."""
    grant = command(
        "grant",
        "grant a standing approval: future calls of one tool within limits run unasked",
        signed=True,
    )
    grant.add_argument("tool", help="the one tool it covers")
    grant.add_argument("--grantor", required=True, help="who grants it (not empty)")
    grant.add_argument(
        "--max-calls", type=int, required=True, help="how many calls it covers at most"
    )
    expiry = grant.add_mutually_exclusive_group(required=True)
    expiry.add_argument("--expires", metavar="TIME", help="when it ends: an ISO time with zone")
    expiry.add_argument("--ttl", metavar="DURATION", help="how long it lasts: 90m, 8h, 7d")
    grant.add_argument(
        "--equals",
        metavar="FIELD=JSON",
        action="append",
        default=[],
        help="the argument must be exactly this (JSON, or else a string); repeatable",
    )
    grant.add_argument(
        "--one-of",
        metavar="FIELD=JSON_LIST",
        action="append",
        default=[],
        help='the argument must be one of these: payee=\'["ACME","Globex"]\'; repeatable',
    )
    grant.add_argument(
        "--min", metavar="FIELD=NUMBER", action="append", default=[], help="lowest allowed"
    )
    grant.add_argument(
        "--max", metavar="FIELD=NUMBER", action="append", default=[], help="highest allowed"
    )
    grant.add_argument("--max-amount", metavar="NUMBER", help="the most the amounts add up to")
    grant.add_argument("--amount-field", metavar="FIELD", help="the argument holding the amount")
    grant.add_argument(
        "--for", dest="started_by", metavar="PRINCIPAL", help="cover only sagas they start"
    )
    grant.add_argument("--reason", help="why, journaled with the grant")
    grant.add_argument(
        "--key",
        dest="approval_key",
        metavar="FILE",
        help="the Ed25519 private key (PEM) that signs the grant; default: SAGACITY_APPROVAL_KEY",
    )

    revoke = command("revoke", "revoke a standing approval: no later call is covered by it")
    revoke.add_argument("grant_id", metavar="GRANT_ID")
    revoke.add_argument("--by", required=True, help="who revokes it (not empty)")
    revoke.add_argument("--reason", help="why, journaled with the revocation")

    grants = command(
        "grants",
        "list standing approvals with their state and remaining budget",
        json=True,
        signed=True,
    )
    grants.add_argument("--tool", help="only this tool's grants")
    grants.add_argument("--active", action="store_true", help="only grants that still cover")


def _name(value: str, option: str) -> str:
    try:
        require_name(value, option)
    except ValueError as error:
        raise CliError(str(error)) from None
    return value


def _split(item: str, option: str) -> tuple[str, str]:
    field, sep, value = item.partition("=")
    if not sep or not field:
        raise CliError(f"{option} {item!r}: write FIELD=VALUE")
    return field, value


def _json(text: str, *, strict: bool, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        if strict:
            raise CliError(f"{what}: {text!r} is not JSON") from None
        return text  # --equals currency=EUR: a plain word is the string it spells


def _number(text: str, what: str) -> int | float:
    value = _json(text, strict=True, what=what)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CliError(f"{what}: {text!r} is not a number")
    return value


def _match(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    match: dict[str, dict[str, Any]] = {}

    def put(field: str, key: str, value: Any, option: str) -> None:
        constraint = match.setdefault(field, {})
        if key in constraint:
            raise CliError(f"{option}: {field!r} is given twice")
        constraint[key] = value  # a mix (--equals and --min on one field) is refused by grant

    for item in args.equals:
        field, text = _split(item, "--equals")
        put(field, "equals", _json(text, strict=False, what=f"--equals {field}"), "--equals")
    for item in args.one_of:
        field, text = _split(item, "--one-of")
        put(field, "one_of", _json(text, strict=True, what=f"--one-of {field}"), "--one-of")
    for option, key, items in (("--min", "min", args.min), ("--max", "max", args.max)):
        for item in items:
            field, text = _split(item, option)
            put(field, key, _number(text, f"{option} {field}"), option)
    return match


def _expiry(args: argparse.Namespace) -> dict[str, Any]:
    if args.expires is not None:
        try:
            moment = datetime.datetime.fromisoformat(args.expires.replace("Z", "+00:00"))
        except ValueError:
            raise CliError(f"--expires {args.expires!r} is not an ISO time") from None
        if moment.tzinfo is None:
            raise CliError(f"--expires {args.expires!r} names no time zone: add Z or +02:00")
        return {"expires_at": moment}
    found = _DURATION.match(args.ttl)
    if found is None:
        raise CliError(f"--ttl {args.ttl!r}: write a number and a unit, as 90m, 8h or 7d")
    return {"ttl": float(found.group(1)) * _UNITS[found.group(2)]}


def grant(args: argparse.Namespace) -> int:
    """`sagacity grant TOOL --grantor NAME --max-calls N --ttl 7d [constraints]`."""
    grantor = _name(args.grantor, "--grantor")
    max_amount = None
    if args.max_amount is not None:
        max_amount = _number(args.max_amount, "--max-amount")
    with opened(args) as sagacity:
        made = sagacity.grant(
            args.tool,
            grantor=grantor,
            max_calls=args.max_calls,
            match=_match(args),
            max_amount=max_amount,
            amount_field=args.amount_field,
            started_by=args.started_by,
            reason=args.reason,
            via="cli",
            **_expiry(args),
        )
    sys.stdout.write(f"grant {made.grant_id}: GRANTED by {visible(grantor)}\n")
    for line in _block(made):
        sys.stdout.write(line + "\n")
    return EXIT_OK


def revoke(args: argparse.Namespace) -> int:
    """`sagacity revoke GRANT_ID --by NAME [--reason TEXT]`."""
    by = _name(args.by, "--by")
    with opened(args) as sagacity:
        made = sagacity.revoke(args.grant_id, revoked_by=by, reason=args.reason, via="cli")
    sys.stdout.write(
        f"grant {made.grant_id}: REVOKED by {visible(by)}; it covered {made.used_calls} call(s)\n"
    )
    return EXIT_OK


def grants(args: argparse.Namespace) -> int:
    """`sagacity grants [--tool T] [--active] [--json]`."""
    with opened(args) as sagacity:
        found = sagacity.grants(args.tool)
    if args.active:
        found = [g for g in found if g.state == "active"]
    if args.json:
        emit_json([g.to_json() for g in found])
        return EXIT_OK
    emit_table(
        ["GRANT", "TOOL", "STATE", "CALLS LEFT", "AMOUNT LEFT", "EXPIRES", "GRANTOR", "COVERS"],
        [
            [
                g.grant_id,
                g.tool_name,
                g.state + (f" ({g.problem})" if g.problem else ""),
                f"{g.remaining_calls} of {g.max_calls}",
                "-" if g.max_amount is None else f"{g.remaining_amount} of {g.max_amount}",
                g.expires_at,
                g.grantor,
                g.describe(),
            ]
            for g in found
        ],
        empty="no standing grants",
    )
    return EXIT_OK


def _block(made: StandingGrant) -> list[str]:
    amount = "-" if made.max_amount is None else f"{made.max_amount} in {made.amount_field}"
    return [
        f"  tool     {visible(made.tool_name)}",
        f"  covers   {visible(made.describe())}",
        f"  calls    {made.max_calls}",
        f"  amount   {visible(amount)}",
        f"  expires  {made.expires_at}",
    ]


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "grant": grant,
    "grants": grants,
    "revoke": revoke,
}
"""The commands this module runs, by name, for the CLI's command table."""
