"""The commands that act on a saga: approve, reject, compensate, resolve, resume."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import orjson

from sagacity._ids import require_name
from sagacity.cli._common import EXIT_OK, CliError, match_hash, opened, printable, require_saga
from sagacity.errors import ApprovalNotFoundError
from sagacity.saga import Sagacity, SagaResult

__all__ = ["approve", "compensate", "reject", "resolve", "resume"]


def _name(value: str, option: str) -> str:
    """`value`, checked as the core checks a principal's name."""
    try:
        require_name(value, option)
    except ValueError as error:
        raise CliError(str(error)) from None
    return value


def _request_hash(sagacity: Sagacity, saga_id: str, request_id: str | None) -> str:
    """The hash of the request an approval is about, from the journal's view of it."""
    requests = [r for r in sagacity.pending(saga_id) if request_id in (None, r.request_id)]
    if not requests:
        raise ApprovalNotFoundError(
            f"saga {saga_id!r} has no pending approval request"
            + ("" if request_id is None else f" {request_id!r}")
        )
    if len(requests) > 1:
        ids = ", ".join(r.request_id for r in requests)
        raise CliError(
            f"saga {saga_id!r} has {len(requests)} pending requests ({ids}): give --request-id"
        )
    return requests[0].input_sha256


def approve(args: argparse.Namespace) -> int:
    """`sagacity approve SAGA --approver NAME`."""
    approver = _name(args.approver, "--approver")
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        expected = None
        if args.sha256 is not None:
            actual = _request_hash(sagacity, args.saga, args.request_id)
            expected = match_hash(args.sha256, actual, f"saga {args.saga!r}: --sha256")
        entry = sagacity.approve(
            args.saga, approver=approver, request_id=args.request_id, expected_sha256=expected
        )
    sys.stdout.write(f"saga {args.saga!r}: APPROVED at seq {entry.seq} by {approver}\n")
    return EXIT_OK


def _outcome(result: SagaResult) -> None:
    line = f"saga {result.saga_id!r}: {result.outcome.value}"
    report = result.compensation
    if report is not None:
        parts = [
            f"{label} {', '.join(ref.tool_name for ref in refs)}"
            for label, refs in (
                ("compensated", report.compensated),
                ("failed", report.failed),
                ("in doubt", report.in_doubt),
            )
            if refs
        ]
        if parts:
            line += " (" + "; ".join(parts) + ")"
    sys.stdout.write(line + "\n")


def reject(args: argparse.Namespace) -> int:
    """`sagacity reject SAGA --approver NAME --reason TEXT`."""
    approver = _name(args.approver, "--approver")
    reason = _name(args.reason, "--reason")
    sources = [_load_tools(spec) for spec in args.tools or ()]
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        sagacity.wrap(*sources)
        result = sagacity.reject(
            args.saga, approver=approver, reason=reason, request_id=args.request_id
        )
    _outcome(result)
    return EXIT_OK


def compensate(args: argparse.Namespace) -> int:
    """`sagacity compensate SAGA`."""
    sources = [_load_tools(spec) for spec in args.tools or ()]
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        sagacity.wrap(*sources)
        result = sagacity.compensate(args.saga)
    _outcome(result)
    return EXIT_OK


def resolve(args: argparse.Namespace) -> int:
    """`sagacity resolve SAGA CALL_ID --executed|--not-executed --by NAME`."""
    by = _name(args.by, "--by")
    result: Any = None
    if args.result is not None:
        if not args.executed:
            raise CliError("--result is for --executed: a call that did not run has no result")
        try:
            result = orjson.loads(args.result)
        except orjson.JSONDecodeError as error:
            raise CliError(f"--result is not JSON: {error}") from None
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        entry = sagacity.resolve(
            args.saga, args.call_id, executed=args.executed, result=result, by=by
        )
    finding = "executed" if args.executed else "not executed"
    sys.stdout.write(
        f"saga {args.saga!r}: call {args.call_id!r} resolved as {finding} by {by} "
        f"({entry.phase.value} at seq {entry.seq}); run 'sagacity compensate {args.saga}' "
        "to finish the saga\n"
    )
    return EXIT_OK


def _load_tools(spec: str) -> object:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"--tools {spec!r}: give module:object, such as myapp.tools:OrderTools")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise CliError(f"--tools {spec!r}: cannot import {module_name!r}: {error}") from None
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"--tools {spec!r}: {module_name!r} has no {attribute!r}") from None
    if isinstance(target, type):
        try:
            target = target()
        except TypeError as error:
            raise CliError(
                f"--tools {spec!r}: cannot make an instance of {attribute} without arguments "
                f"({error}); point --tools at an instance instead"
            ) from None
    return target


def resume(args: argparse.Namespace) -> int:
    """`sagacity resume SAGA --tools module:object`."""
    sources = [_load_tools(spec) for spec in args.tools]
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        sagacity.wrap(*sources)
        result = sagacity.resume_saga(args.saga, request_id=args.request_id)
    _outcome(result)
    if result.value is not None:
        result_json = orjson.dumps(result.value, default=repr).decode()
        sys.stdout.write(printable(f"result: {result_json}") + "\n")
    return EXIT_OK
