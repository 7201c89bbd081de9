"""The `sagacity` command: demo, verify, export, and a look at sagas and approvals.

`--database` takes a URL (`sqlite:///path.db`, `postgresql://…`, or a plain file path for
SQLite); it defaults to `SAGACITY_DATABASE_URL`, else `sqlite:///sagacity.db`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from sagacity._display import journal_table, table
from sagacity._stores import default_url
from sagacity.audit import export_csv, export_jsonl, verify
from sagacity.errors import SagacityError
from sagacity.saga import Sagacity

__all__ = ["main"]


def _url(value: str | None) -> str:
    if value is None:
        return default_url()
    return value if "://" in value else f"sqlite:///{value}"


def _open(args: argparse.Namespace) -> Sagacity:
    return Sagacity.from_url(_url(args.database))


def _cmd_demo(args: argparse.Namespace) -> int:
    from sagacity._demo import run_demo

    return 0 if run_demo(Path(args.database or "sagacity-demo.db")) else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    sagacity = _open(args)
    try:
        report = verify(sagacity.journal, args.saga)
    finally:
        sagacity.close()
    for problem in report.problems:
        print(f"saga {problem.saga_id!r} seq {problem.seq}: {problem.reason}")
    print(
        f"{report.sagas} sagas, {report.entries} entries: "
        + ("OK" if report.ok else f"{len(report.problems)} broken")
    )
    return 0 if report.ok else 1


def _cmd_export(args: argparse.Namespace) -> int:
    sagacity = _open(args)
    write = export_csv if args.format == "csv" else export_jsonl
    try:
        if args.output:
            with open(args.output, "w", encoding="utf-8", newline="") as out:
                count = write(sagacity.journal, out, args.saga)
            print(f"exported {count} entries to {args.output}", file=sys.stderr)
        else:
            write(sagacity.journal, sys.stdout, args.saga)
    finally:
        sagacity.close()
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    sagacity = _open(args)
    try:
        entries = sagacity.journal.entries(args.saga)
    finally:
        sagacity.close()
    if not entries:
        print(f"saga {args.saga!r} has no journal entries", file=sys.stderr)
        return 1
    for line in journal_table(entries):
        print(line)
    if args.payloads:
        for entry in entries:
            print(f"{entry.seq}: {orjson.dumps(entry.payload).decode()}")
    return 0


def _cmd_sagas(args: argparse.Namespace) -> int:
    sagacity = _open(args)
    rows = []
    try:
        after = None
        while True:
            page = sagacity.journal.list_sagas(after=after, limit=500)
            for saga_id in page:
                state = _state(sagacity, saga_id)
                if args.outcome in (None, state):
                    rows.append((saga_id, state))
            if len(page) < 500:
                break
            after = page[-1]
    finally:
        sagacity.close()
    for line in table(("saga", "state"), rows):
        print(line)
    return 0


def _state(sagacity: Sagacity, saga_id: str) -> str:
    """The outcome of the saga's last ENDED entry; else AWAITING_APPROVAL or OPEN."""
    history = sagacity.approval.history(saga_id)
    if history.outcome is not None:
        return history.outcome
    return "AWAITING_APPROVAL" if history.open_requests() else "OPEN"


def _cmd_pending(args: argparse.Namespace) -> int:
    sagacity = _open(args)
    try:
        requests = sagacity.pending(args.saga)
    finally:
        sagacity.close()
    for request in requests:
        state = request.state
        if request.approvals:
            state += " by " + ", ".join(
                f"{a.approver} at {a.approved_at}" for a in request.approvals
            )
        print(
            f"{request.saga_id}  request {request.request_id}  {request.tool_name}  {state}  "
            f"sha256 {request.input_sha256}  {orjson.dumps(request.input).decode()}"
        )
        if request.problem is not None:
            print(f"    not approvable: {request.problem}")
    return 0


def _cmd_approve(args: argparse.Namespace) -> int:
    sagacity = _open(args)
    try:
        entry = sagacity.approve(
            args.saga,
            approver=args.approver,
            request_id=args.request_id,
            expected_sha256=args.sha256,
        )
    finally:
        sagacity.close()
    print(f"saga {args.saga!r}: APPROVED at seq {entry.seq} by {args.approver}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sagacity", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--database", help="database URL or SQLite file (see `sagacity -h`)")
        return sub

    command("demo", "run the order and wire-transfer demo on a fresh SQLite file")
    verify_cmd = command("verify", "recompute every hash and link; exit 1 on any problem")
    verify_cmd.add_argument("--saga", help="verify one saga only")
    export_cmd = command("export", "write the journal as JSON Lines (verifiable) or CSV")
    export_cmd.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    export_cmd.add_argument("--saga", help="export one saga only")
    export_cmd.add_argument("--output", "-o", help="file to write (default: standard output)")
    show_cmd = command("show", "print a saga's journal as a table")
    show_cmd.add_argument("saga")
    show_cmd.add_argument("--payloads", action="store_true", help="print each entry's payload")
    sagas_cmd = command("sagas", "list saga ids with how each stands")
    sagas_cmd.add_argument(
        "--outcome",
        help="only sagas in this state: COMPLETED, COMPENSATED, COMPENSATION_FAILED, "
        "NEEDS_ATTENTION, AWAITING_APPROVAL or OPEN",
    )
    pending_cmd = command("pending", "list approval requests waiting for a human")
    pending_cmd.add_argument("--saga", help="only this saga's requests")
    approve_cmd = command("approve", "approve a pending request; the approver is recorded")
    approve_cmd.add_argument("saga")
    approve_cmd.add_argument("--approver", required=True, help="who approves")
    approve_cmd.add_argument("--request-id", help="which request, if the saga has several")
    approve_cmd.add_argument("--sha256", help="the input hash you reviewed; refused if it changed")
    return parser


_COMMANDS = {
    "demo": _cmd_demo,
    "verify": _cmd_verify,
    "export": _cmd_export,
    "show": _cmd_show,
    "sagas": _cmd_sagas,
    "pending": _cmd_pending,
    "approve": _cmd_approve,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except SagacityError as error:
        print(f"sagacity {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
