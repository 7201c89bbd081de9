"""What every command shares: opening the database, exit codes, output, hash arguments."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson

from sagacity._display import table
from sagacity._stores import default_url, open_stores
from sagacity._unicode import escape_for_display
from sagacity.errors import SagaNotFoundError
from sagacity.saga import Sagacity

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_DATABASE",
    "EXIT_DIRTY",
    "EXIT_ELSEWHERE",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_PROBLEM",
    "EXIT_REFUSED",
    "CliError",
    "age",
    "database_url",
    "emit_json",
    "emit_table",
    "load_object",
    "load_tools",
    "match_hash",
    "opened",
    "printable",
    "progress",
]

EXIT_OK = 0
EXIT_PROBLEM = 1
"""`verify` found a problem."""
EXIT_NOT_FOUND = 1
"""No such database, saga or request; nothing to verify."""
EXIT_REFUSED = 2
"""Bad arguments, or sagacity refused the action (an approval check, a saga's state)."""
EXIT_DATABASE = 3
"""The database cannot be reached or read."""
EXIT_OUTPUT = 4
"""An output file or directory cannot be written."""
EXIT_DIRTY = 5
"""`compensate`, `reject` or `resume` ran, and the saga is still dirty: it ended
COMPENSATION_FAILED, or NEEDS_ATTENTION with a call or compensation in doubt."""
EXIT_ELSEWHERE = 6
"""`compensate`, `reject` or `resume` left compensations to a process that has the tools:
none is registered in this one (`--tools`), and nothing was journaled for them."""
EXIT_INTERRUPTED = 130
"""Ctrl-C."""
EXIT_BROKEN_PIPE = 141
"""Standard output was closed early (`sagacity export | head`); nothing is printed."""


class CliError(Exception):
    """An ordinary mistake: printed as one line, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


def database_url(value: str | None) -> str:
    """The URL `--database` names: a URL, a plain SQLite path, or the default."""
    if value is None:
        return default_url()
    return value if "://" in value else f"sqlite:///{value}"


def signed_approvals(args: argparse.Namespace) -> dict[str, Any]:
    """The signed-approval options of `Sagacity(...)`: the command's, else the environment's.

    Every command reads them, so each counts the approvals a worker counts. Only
    `approve` signs (with `--key`); the others trust the signing key's public half.

    Raises:
        CliError: Signatures are required and `approve` has no key to sign with: its
            approval would not count, so nothing is opened or written.
    """
    from sagacity.audit._settings import APPROVAL_KEY_VARIABLE, approval_settings, require_from

    signs = hasattr(args, "approval_key")
    required = getattr(args, "require_signed_approvals", False) or require_from(os.environ)
    key = getattr(args, "approval_key", None) or os.environ.get(APPROVAL_KEY_VARIABLE)
    if signs and required and not key:
        raise CliError(
            "approvals must be signed here (--require-signed-approvals or "
            "SAGACITY_REQUIRE_SIGNED_APPROVALS), but no key signs this one: give --key FILE "
            f"or set {APPROVAL_KEY_VARIABLE}. Nothing was approved"
        )
    return approval_settings(
        signing_key=getattr(args, "approval_key", None),
        public_keys=getattr(args, "approval_public_key", None),
        require=required,
        sign=signs,
    )


@contextlib.contextmanager
def opened(args: argparse.Namespace, **options: Any) -> Iterator[Sagacity]:
    """Open the database `--database` names, creating nothing; close it afterwards.

    The Sagacity counts approvals as the command's signed-approval options (or the
    environment) say: see `signed_approvals`.
    """
    options = {**signed_approvals(args), **options}
    journal, approvals = open_stores(database_url(args.database), create=False)
    try:
        sagacity = Sagacity(journal, approvals, **options)
    except BaseException:
        journal.close()
        approvals.close()
        raise
    try:
        yield sagacity
    finally:
        sagacity.close()


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    r"""`text` with control characters shown as escapes (`\x1b`), never sent to a terminal.

    Ids are checked before they are stored, but a database edited by hand can hold
    anything: a newline that forges a row, an escape sequence that clears the screen.
    """
    shown = _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode(), text)
    return escape_for_display(shown, keep_newlines=False)  # bidi and zero-width: `\u202e`


def require_saga(sagacity: Sagacity, saga_id: str) -> None:
    """`SagaNotFoundError` unless the journal holds entries of `saga_id`."""
    if not sagacity.journal.entries(saga_id):
        raise SagaNotFoundError(f"saga {saga_id!r} has no journal entries")


def emit_json(document: object) -> None:
    """Print one JSON document on one line."""
    sys.stdout.write(orjson.dumps(document, default=str).decode() + "\n")


def emit_table(header: Sequence[str], rows: Iterable[Sequence[str]], *, empty: str) -> None:
    """Print a table: drawn by rich on a terminal, plain aligned text otherwise.

    With no rows, print `empty` instead, so that a human sees that nothing was found.
    """
    rows = [[printable(cell) for cell in row] for row in rows]
    if not rows:
        sys.stdout.write(empty + "\n")
        return
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        drawn = Table(*header, box=None, header_style="bold", pad_edge=False)
        for row in rows:
            drawn.add_row(*(Text(cell) for cell in row))  # Text: never read as markup
        Console().print(drawn)
        return
    for line in table(header, rows):
        sys.stdout.write(line + "\n")


@contextlib.contextmanager
def progress(description: str, sagacity: Sagacity, saga_id: str | None) -> Iterator[Any]:
    """A rich progress bar over the sagas, on stderr when it is a terminal; else nothing.

    The sagas are counted first, which costs one pass over the saga ids: worth it only
    for someone watching.
    """
    if saga_id is not None or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    from sagacity.audit import iter_saga_ids

    total = sum(1 for _ in iter_saga_ids(sagacity.journal))
    if total < 100:
        yield None
        return
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda count: bar.advance(task, count)


def age(value: datetime.datetime | str | None, now: datetime.datetime) -> str:
    """How long ago a time was, as `3d 4h`, `12m 5s`; empty when unknown."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value)
    seconds = int((now - value).total_seconds())
    if seconds < 0:
        return "in " + age(now, value) if value > now else ""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{seconds}s"


def match_hash(given: str | None, actual: str, what: str) -> str | None:
    """Check a hash typed by a human: any case, all 64 digits; return it as stored.

    Raises:
        CliError: The hash is not 64 hex digits (a prefix is refused), or differs from
            `actual`; the message shows where the two differ.
    """
    if given is None:
        return None
    typed = given.strip().lower()
    at = next((i for i, (a, b) in enumerate(zip(typed, actual, strict=False)) if a != b), None)
    if len(typed) != 64 or any(c not in "0123456789abcdef" for c in typed):
        if at is not None:
            where = f"it differs from the request's {actual} at digit {at + 1}"
        elif len(typed) < 64:
            where = f"it is the first {len(typed)} digits of the request's {actual}"
        else:
            where = f"the request's is {actual}"
        raise CliError(
            f"{what}: give the whole SHA-256, 64 hex digits, not {given!r} ({where}); a "
            "prefix is not enough: the approval is bound to the exact hash"
        )
    if at is not None:
        raise CliError(
            f"{what}: the hash you gave differs from the request's at digit {at + 1}:\n"
            f"  given   {typed}\n  request {actual}\n  {' ' * (8 + at)}^"
        )
    return typed


def load_object(option: str, spec: str, example: str) -> object:
    """The object `option MODULE:OBJECT` names (`example` shows the form).

    The working directory is searched first, as `python -m` does: the application's own
    modules are found where the command is run from, without setting PYTHONPATH.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"{option} {spec!r}: give module:object, such as {example}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise CliError(
            f"{option} {spec!r}: cannot import {module_name!r}: {error}; it is looked for in "
            f"the working directory ({os.getcwd()}) and on PYTHONPATH: run the command from "
            "the application's folder, or set PYTHONPATH to it"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"{option} {spec!r}: {module_name!r} has no {attribute!r}") from None
    return target


def load_tools(spec: str) -> object:
    """The object `--tools MODULE:OBJECT` names; a class is made with no arguments."""
    target = load_object("--tools", spec, "myapp.tools:OrderTools")
    if isinstance(target, type):
        try:
            target = target()
        except TypeError as error:
            raise CliError(
                f"--tools {spec!r}: cannot make an instance of {target.__name__} without "
                f"arguments ({error}); point --tools at an instance instead"
            ) from None
    return target
