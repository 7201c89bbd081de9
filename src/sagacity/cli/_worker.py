"""`sagacity worker`: run the application's resumers, and check a worker's health."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from sagacity.cli._common import EXIT_OK, EXIT_PROBLEM, CliError, load_object, printable
from sagacity.saga import Sagacity
from sagacity.worker import Worker
from sagacity.worker._health import check_health

__all__ = ["add_worker_command", "worker"]

_APP_HELP = (
    "where the worker is: MODULE:OBJECT naming a sagacity.Worker, a function that returns "
    "one (called with no arguments), or a Sagacity (its plain sagas resume by running the "
    "approved call; see docs/worker.md)"
)


def add_worker_command(commands: Any) -> None:
    """Add `sagacity worker` to the parser's subcommands."""
    sub = commands.add_parser(
        "worker",
        help="resume each decided saga with the application's resumers",
        description="resume each decided saga with the application's resumers, until "
        "SIGTERM; or check a running worker's health",
    )
    mode = sub.add_mutually_exclusive_group(required=True)
    mode.add_argument("--app", metavar="MODULE:OBJECT", help=_APP_HELP)
    mode.add_argument(
        "--check-health",
        metavar="FILE",
        help="exit 0 if the worker writing FILE is running and beat recently, else 1",
    )
    sub.add_argument(
        "--max-age",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --check-health: the oldest heartbeat that counts as alive (default 10)",
    )
    sub.add_argument(
        "--health-file",
        metavar="FILE",
        help="write the worker's health as JSON to FILE every second",
    )
    sub.add_argument(
        "--poll",
        type=float,
        metavar="SECONDS",
        help="seconds between looks at the journal (default 0.2 on SQLite, 5 under LISTEN)",
    )
    sub.add_argument(
        "--no-listen",
        action="store_true",
        help="on PostgreSQL, poll instead of LISTEN/NOTIFY (behind PgBouncer in transaction mode)",
    )
    sub.add_argument(
        "--once",
        action="store_true",
        help="act on the decisions waiting now, then exit",
    )


def worker(args: argparse.Namespace) -> int:
    """`sagacity worker --app MODULE:OBJECT` or `sagacity worker --check-health FILE`."""
    if args.check_health is not None:
        problem = check_health(args.check_health, max_age=args.max_age)
        if problem is not None:
            sys.stderr.write(printable(f"sagacity worker: {problem}") + "\n")
            return EXIT_PROBLEM
        sys.stdout.write(printable(f"{args.check_health}: the worker is running") + "\n")
        return EXIT_OK
    running = _load_worker(args)
    _log_to_stderr()
    if args.once:
        acted = running.run_once()
        sys.stdout.write(f"acted on {acted} decision(s)\n")
        return EXIT_OK
    sys.stdout.write(f"sagacity worker {os.getpid()}: watching for decisions\n")
    sys.stdout.flush()
    running.run()
    sys.stdout.write(f"sagacity worker {os.getpid()}: stopped\n")
    return EXIT_OK


def _load_worker(args: argparse.Namespace) -> Worker:
    target = load_object("--app", args.app, "myapp.worker:worker")
    if isinstance(target, Sagacity):
        target = Worker(target)
    elif not isinstance(target, Worker) and callable(target):
        target = target()
    if isinstance(target, Sagacity):
        target = Worker(target)
    if not isinstance(target, Worker):
        raise CliError(
            f"--app {args.app!r} names {type(target).__name__}, not a sagacity.Worker, a "
            "function that returns one, or a Sagacity"
        )
    if args.health_file is not None:
        target.health_file = os.fspath(args.health_file)
    if args.poll is not None:
        if args.poll <= 0:
            raise CliError(f"--poll must be positive, not {args.poll}")
        target.poll_interval = args.poll
    if args.no_listen:
        target.listen = False
    return target


def _log_to_stderr() -> None:
    """The worker's own lines (each resume, each failure) on stderr, at INFO."""
    logger = logging.getLogger("sagacity.worker")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
