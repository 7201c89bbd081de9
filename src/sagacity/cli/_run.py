"""Commands that run something: demo, init and serve."""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeGuard

from sagacity._stores import open_stores, redact
from sagacity.cli._common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROBLEM,
    CliError,
    database_url,
    load_object,
    load_tools,
    printable,
)
from sagacity.errors import DatabaseNotFoundError
from sagacity.saga import Sagacity

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
    if not args.sweep_interval >= 0:
        raise CliError(f"--sweep-interval must be 0 or more seconds, not {args.sweep_interval}")
    if args.app is not None:
        return _serve_app(server, args)
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
            sweep_interval=args.sweep_interval or None,
        )
    except DatabaseNotFoundError as error:
        raise CliError(f"{error}; {_CREATE_IT}", EXIT_NOT_FOUND) from None
    return EXIT_OK


def _serve_app(server: ModuleType, args: argparse.Namespace) -> int:
    """`sagacity serve --app MODULE:OBJECT`: what the application configured, served.

    A Sagacity is served by `create_app` with the command's tokens and sweep; an app (the
    one `create_app` made, with its links and Slack route) as it is. The options that
    configure a Sagacity are refused: the application's own configuration decides.
    """
    import uvicorn

    configured = [
        option
        for option, given in (
            ("--database", args.database),
            ("--create", args.create),
            ("--tools", args.tools),
            ("--key", args.approval_key),
            ("--approval-public-key", args.approval_public_key),
            ("--require-signed-approvals", args.require_signed_approvals),
        )
        if given
    ]
    if configured:
        raise CliError(
            f"--app {args.app!r} brings its own configuration: leave out {', '.join(configured)} "
            "(set them where the application builds its Sagacity)"
        )
    target = load_object("--app", args.app, "myapp.approvals:app")
    if not isinstance(target, Sagacity) and _is_plain_function(target):
        target = target()
    if isinstance(target, Sagacity):
        policy = target.approval.policy
        if policy.require_signed and policy.signing_key is None:
            raise CliError(
                f"--app {args.app!r}: its Sagacity requires signed approvals but has no "
                "approval_signing_key, so no approval made in the server would count"
            )
        app = server.create_app(
            target, tokens=args.tokens, sweep_interval=args.sweep_interval or None
        )
    elif callable(target):  # an ASGI app: FastAPI, Starlette, or one wrapping them
        if args.tokens is not None:
            raise CliError(
                f"--app {args.app!r} is an app: it has its tokens already (leave out --tokens)"
            )
        app = target
    else:
        raise CliError(
            f"--app {args.app!r} names {type(target).__name__}, not a Sagacity, an app made "
            "by sagacity.server.create_app, or a function that returns one"
        )
    uvicorn.run(app, host=args.host, port=args.port)
    return EXIT_OK


def _is_plain_function(target: object) -> TypeGuard[Callable[[], object]]:
    """A function to call for the object (not an ASGI app, which is callable too)."""
    return inspect.isfunction(target) and not inspect.signature(target).parameters
