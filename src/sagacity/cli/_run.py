"""Commands that run something: demo and serve."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from sagacity.cli._common import EXIT_OK, EXIT_PROBLEM, CliError, database_url

__all__ = ["demo", "serve"]


def demo(args: argparse.Namespace) -> int:
    """`sagacity demo`."""
    from sagacity._demo import run_demo

    database = args.database or "sagacity-demo.db"
    if "://" in database:
        if not database.startswith("sqlite:///"):
            raise CliError(f"the demo runs on a SQLite file, not {database!r}")
        database = database[len("sqlite:///") :]
    return EXIT_OK if run_demo(Path(database), force=args.force) else EXIT_PROBLEM


def serve(args: argparse.Namespace) -> int:
    """`sagacity serve`: the approval server (extra `server`)."""
    try:
        # Imported by name: the server subpackage is optional, and absent without its extra.
        server = importlib.import_module("sagacity.server")
    except ImportError as error:
        raise CliError(
            f"sagacity serve needs the 'server' extra: pip install 'sagacity[server]' ({error})"
        ) from None
    if args.tokens is not None and not Path(args.tokens).is_file():
        raise CliError(f"--tokens {args.tokens}: no such file")
    server.serve(
        database=database_url(args.database),
        host=args.host,
        port=args.port,
        tokens=args.tokens,
        approval_key=args.approval_key,
        approval_public_keys=args.approval_public_key,
        require_signed_approvals=args.require_signed_approvals,
    )
    return EXIT_OK
