"""The sagacity command: look at sagas, act on them, and keep evidence of the journal.

Every command takes --database: a URL (sqlite:///path.db, postgresql://user@host/db) or
a plain path to a SQLite file; without it, SAGACITY_DATABASE_URL, else sqlite:///sagacity.db.
No command but demo, init and `serve --create` creates a database: a missing one is an
error.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Iterator, Sequence

from sagacity.cli import _act, _evidence, _grants, _pending, _read, _report, _run, _worker
from sagacity.cli._common import (
    EXIT_BROKEN_PIPE,
    EXIT_DATABASE,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_PROBLEM,
    EXIT_REFUSED,
    CliError,
)
from sagacity.errors import (
    ApprovalNotFoundError,
    CheckpointError,
    DatabaseNotFoundError,
    JournalError,
    SagacityError,
    SagaNotFoundError,
)

__all__ = ["main"]

_DATABASE_HELP = (
    "the database: sqlite:///relative.db, sqlite:////absolute.db, a plain SQLite file path, "
    "or postgresql://user@host:5432/db; default: SAGACITY_DATABASE_URL, else "
    "sqlite:///sagacity.db"
)


def _version() -> str:
    from sagacity import __version__

    return f"sagacity {__version__}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sagacity",
        description=(__doc__ or "").splitlines()[0],
        epilog="exit status: 0 ok, 1 a problem found or nothing found, 2 bad usage or "
        "refused, 3 the database cannot be read, 4 an output cannot be written, 5 the saga "
        "is still dirty (compensation failed or in doubt), 6 its undo was left to a process "
        "with the tools, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, help_text: str, *, json: bool = False, signed: bool = False
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--database", metavar="URL", help=_DATABASE_HELP)
        if json:
            sub.add_argument(
                "--json", action="store_true", help="print JSON (see docs/cli.md for its shape)"
            )
        if signed:
            _signed_approval_options(sub)
        return sub

    demo = command("demo", "run the order and wire-transfer demo on a demo SQLite file")
    demo.add_argument(
        "--force",
        action="store_true",
        help="replace the file even if it is not a demo journal",
    )

    sagas = command(
        "sagas", "list sagas: status, entries, last activity, pending, in doubt", json=True
    )
    sagas.add_argument(
        "--status",
        "--outcome",  # its earlier name, kept for scripts that use it
        dest="status",
        help="only sagas with this status: " + ", ".join(_read.STATUSES),
    )
    sagas.add_argument("--since", help="only sagas active since: 90m, 2h, 7d, or an ISO time")
    sagas.add_argument("--limit", type=int, help="at most this many sagas")

    show = command(
        "show", "print a saga's journal with times and its outcome", json=True, signed=True
    )
    show.add_argument("saga")
    show.add_argument("--payloads", action="store_true", help="print each entry's payload")

    verify = command(
        "verify", "recompute every hash and link; exit 1 on any problem", json=True, signed=True
    )
    verify.add_argument("--saga", help="verify one saga only")
    verify.add_argument("--checkpoint", metavar="FILE", help="a signed checkpoint to check against")
    verify.add_argument("--public-key", metavar="FILE", help="the PEM key that signed it")

    export = command("export", "write the journal as JSON Lines (verifiable) or CSV", json=True)
    export.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    export.add_argument("--saga", help="export one saga only")
    export.add_argument("--output", "-o", help="file to write (default: standard output)")

    pending = command(
        "pending", "list approval requests waiting for a human", json=True, signed=True
    )
    pending.add_argument("--saga", help="only this saga's requests")

    doubts = command("doubts", "list calls and compensations in doubt, across sagas", json=True)
    del doubts

    approve = command("approve", "approve a pending request; the approver is recorded", signed=True)
    approve.add_argument(
        "--key",
        dest="approval_key",
        metavar="FILE",
        help="the Ed25519 private key (PEM) that signs the approval; default: "
        "SAGACITY_APPROVAL_KEY",
    )
    approve.add_argument("saga")
    approve.add_argument("--approver", required=True, help="who approves (not empty)")
    approve.add_argument("--request-id", help="which request, if the saga has several")
    approve.add_argument(
        "--sha256", help="the whole input hash you reviewed (any case); refused if it changed"
    )
    approve.add_argument(
        "--justification",
        help="why you approve, journaled with the approval (and signed); required by tools "
        "that declare justification_required",
    )

    reject = command("reject", "reject a pending request and compensate the saga", signed=True)
    reject.add_argument("saga")
    reject.add_argument("--approver", required=True, help="who rejects (not empty)")
    reject.add_argument("--reason", required=True, help="why, recorded in the journal")
    reject.add_argument("--request-id", help="which request, if the saga has several")
    _tools_option(reject, required=False)

    compensate = command("compensate", "run a saga's compensations (again)", signed=True)
    compensate.add_argument("saga")
    _tools_option(compensate, required=False)

    resolve = command(
        "resolve", "record whether an in-doubt call, or its compensation, ran", signed=True
    )
    resolve.add_argument("saga")
    resolve.add_argument("call_id", metavar="CALL_ID")
    finding = resolve.add_mutually_exclusive_group(required=True)
    for flag, meaning in _act.FINDINGS.items():
        finding.add_argument(flag, action="store_const", const=flag, dest="finding", help=meaning)
    resolve.add_argument(
        "--result", metavar="JSON", help="what the call returned, as JSON (with --executed)"
    )
    resolve.add_argument("--by", required=True, help="who found out (not empty)")
    resolve.add_argument(
        "--reason", help="how they found out (the provider's dashboard, a ticket), journaled"
    )
    resolve.add_argument(
        "--evidence",
        metavar="REF",
        help="what the finding rests on (the provider's charge id, a ticket), journaled; "
        "with --evidence-sha256",
    )
    resolve.add_argument(
        "--evidence-sha256",
        metavar="HEX",
        help="the SHA-256 of what was read (64 hex digits, as sha256sum prints it)",
    )

    resume = command(
        "resume", "run an approved call with its journaled input and end the saga", signed=True
    )
    resume.add_argument("saga")
    _tools_option(resume, required=True)
    resume.add_argument("--request-id", help="which request, if the saga has several")

    keygen = commands.add_parser(
        "keygen",
        help="make an Ed25519 key pair for signed checkpoints",
        description="make an Ed25519 key pair for signed checkpoints (never overwrites)",
    )
    keygen.add_argument("--out", metavar="DIR", default=".", help="where to write the two files")

    checkpoint = command("checkpoint", "sign every saga's head; keep it outside the database")
    checkpoint.add_argument("--key", metavar="FILE", required=True, help="the private key PEM")
    checkpoint.add_argument("--out", metavar="DIR", help="write it there (default: print it)")
    checkpoint.add_argument(
        "--previous",
        metavar="FILE",
        help="the last checkpoint, which the journal must still hold (default: the newest "
        "checkpoint in --out DIR)",
    )
    checkpoint.add_argument(
        "--previous-public-key",
        metavar="FILE",
        help="the PEM key that signed --previous, if not the --key (after a key change)",
    )

    init = command("init", "create the database's sagacity tables (a first deployment)")
    del init

    serve = command("serve", "run the approval server (extra 'server')", signed=True)
    serve.add_argument(
        "--create",
        action="store_true",
        help="create the database's tables if they are missing (default: refuse a database "
        "that does not exist)",
    )
    _tools_option(serve, required=False)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument("--tokens", metavar="FILE", help="the API tokens file")
    serve.add_argument(
        "--key",
        dest="approval_key",
        metavar="FILE",
        help="the Ed25519 private key (PEM) that signs the approvals made in the server; "
        "default: SAGACITY_APPROVAL_KEY",
    )
    serve.add_argument(
        "--app",
        metavar="MODULE:OBJECT",
        help="serve what the application configured in code: a Sagacity (its notifiers, "
        "approver groups and keys; --tokens still applies), or the app create_app() made "
        "(e-mail links, Slack), or a function that returns either; the other database and "
        "key options are then refused",
    )
    serve.add_argument(
        "--sweep-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between sweeps of due reminders, escalations and denials (default 30; "
        "0: none here, a worker sweeps)",
    )
    _grants.add_grant_commands(command)
    _report.add_report_command(command)
    _worker.add_worker_command(commands)
    return parser


def _signed_approval_options(sub: argparse.ArgumentParser) -> None:
    """The options of a deployment that requires signed approvals (docs/approval.md)."""
    sub.add_argument(
        "--approval-public-key",
        metavar="FILE",
        action="append",
        help="a PEM public key whose approval signatures count (repeatable); default: the "
        "files SAGACITY_APPROVAL_PUBLIC_KEYS lists",
    )
    sub.add_argument(
        "--require-signed-approvals",
        action="store_true",
        default=False,
        help="count only approvals signed with one of those keys; default: "
        "SAGACITY_REQUIRE_SIGNED_APPROVALS",
    )


def _tools_option(sub: argparse.ArgumentParser, *, required: bool) -> None:
    sub.add_argument(
        "--tools",
        metavar="MODULE:OBJECT",
        action="append",
        required=required,
        help="where the tools and their compensations are: a class (made with no "
        "arguments), an instance or a function with the decorators (repeatable)",
    )


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "approve": _act.approve,
    "checkpoint": _evidence.checkpoint,
    "compensate": _act.compensate,
    "demo": _run.demo,
    "doubts": _read.doubts,
    "export": _read.export,
    "init": _run.init,
    "keygen": _evidence.keygen,
    "pending": _pending.pending,
    "reject": _act.reject,
    "resolve": _act.resolve,
    "resume": _act.resume,
    "sagas": _read.sagas,
    "serve": _run.serve,
    "show": _read.show,
    "verify": _read.verify_command,
    "worker": _worker.worker,
    **_grants.COMMANDS,
    **_report.COMMANDS,
}


_CORE_AMBIGUITY = "; name one with request_id"
"""How the core ends the refusal of a saga with several pending requests and no id."""


def _exit_code(error: SagacityError) -> int:
    if isinstance(error, DatabaseNotFoundError | SagaNotFoundError | ApprovalNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(error, CheckpointError):  # the evidence does not hold: a problem found
        return EXIT_PROBLEM
    if isinstance(error, JournalError) and error.status_code == 503:
        return EXIT_DATABASE
    return EXIT_REFUSED


def _quiet_pool_logs() -> None:
    """Keep the connection pool's retries off stderr: the command reports the reason."""
    for name in ("psycopg", "psycopg.pool"):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


class _WarningLine(logging.Handler):
    """sagacity's warnings (a call in doubt, a failed compensation) as lines on stderr."""

    def __init__(self, command: str) -> None:
        super().__init__(logging.WARNING)
        self.command = command

    def emit(self, record: logging.LogRecord) -> None:
        # A refused approval is the command's own error, which it reports once.
        if not hasattr(record, "refused_approval"):
            _say(self.command, f"warning: {record.getMessage()}")


@contextlib.contextmanager
def _warnings_shown(command: str) -> Iterator[None]:
    """Print sagacity's warnings while the command runs; leave the logger as it was."""
    logger = logging.getLogger("sagacity")
    handler, propagate = _WarningLine(command), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # the command's own lines; no second copy from the root
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    _quiet_pool_logs()
    name = args.command
    try:
        with _warnings_shown(name):
            code = _COMMANDS[name](args)
        sys.stdout.flush()
    except CliError as error:
        _say(name, str(error))
        return error.code
    except SagacityError as error:
        message = str(error)
        if isinstance(error, ApprovalNotFoundError) and message.endswith(_CORE_AMBIGUITY):
            # The core names its keyword argument; here it is an option, and not naming
            # one of several requests is a usage mistake.
            _say(name, message.removesuffix(_CORE_AMBIGUITY) + "; name one with --request-id")
            return EXIT_REFUSED
        _say(name, message)
        return _exit_code(error)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _say(name, "interrupted; what was committed before stays in the journal")
        return EXIT_INTERRUPTED
    return code


def _say(command: str, message: str) -> None:
    try:
        sys.stderr.write(f"sagacity {command}: {message}\n")
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # stderr is gone too: nothing left to tell
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush is quiet."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
