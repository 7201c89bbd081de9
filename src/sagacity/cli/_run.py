"""Commands that run something: demo, init and serve."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from sagacity._stores import open_stores, redact
from sagacity.cli._common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROBLEM,
    CliError,
    database_url,
    load_tools,
    printable,
)
from sagacity.errors import DatabaseNotFoundError

__all__ = ["demo", "init", "serve"]

_CREATE_IT = (
    "a first deployment creates it with 'sagacity init --database URL' (or 'sagacity serve "
    "--create'); otherwise check the URL for a typo"
)


def demo(args: argparse.Namespace) -> int:
    """`sagacity demo`."""
    from sagacity._demo import run_demo

    database = args.database or "sagacity-demo.db"
    if "://" in database:
        if not database.startswith("sqlite:///"):
            raise CliError(f"the demo runs on a SQLite file, not {database!r}")
        database = database[len("sqlite:///") :]
    return EXIT_OK if run_demo(Path(database), force=args.force) else EXIT_PROBLEM


def init(args: argparse.Namespace) -> int:
    """`sagacity init`: create the journal's and approval store's tables, or find them."""
    url = database_url(args.database)
    if url.startswith("memory:"):
        raise CliError("memory:// is a new, empty journal each time: there is nothing to create")
    try:
        journal, approvals = open_stores(url, create=False)
        found = True
    except DatabaseNotFoundError:
        journal, approvals = open_stores(url, create=True)
        found = False
    journal.close()
    approvals.close()
    what = "already holds a sagacity journal; nothing changed" if found else "created"
    sys.stdout.write(printable(f"{redact(url)}: {what}") + "\n")
    return EXIT_OK


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
    tools = [load_tools(spec) for spec in args.tools or ()]
    try:
        server.serve(
            database=database_url(args.database),
            host=args.host,
            port=args.port,
            tokens=args.tokens,
            approval_key=args.approval_key,
            approval_public_keys=args.approval_public_key,
            require_signed_approvals=args.require_signed_approvals,
            create=args.create,
            tools=tools,
        )
    except DatabaseNotFoundError as error:
        raise CliError(f"{error}; {_CREATE_IT}", EXIT_NOT_FOUND) from None
    return EXIT_OK
