"""The commands that act on a saga: approve, reject, compensate, resolve, resume."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

import orjson

from sagacity._history import SagaHistory
from sagacity._ids import require_name
from sagacity._reconcile import check_evidence
from sagacity._summary import iter_doubts
from sagacity.approval import ApprovalRequest
from sagacity.approval._policy import refuse_self_approval
from sagacity.cli._common import (
    EXIT_DIRTY,
    EXIT_ELSEWHERE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    CliError,
    load_tools,
    match_hash,
    opened,
    printable,
    require_saga,
)
from sagacity.cli._request_text import input_line, request_block, request_views, visible
from sagacity.errors import ApprovalNotFoundError
from sagacity.saga import Sagacity, SagaOutcome, SagaResult

__all__ = ["FINDINGS", "approve", "compensate", "reject", "resolve", "resume"]


def _name(value: str, option: str) -> str:
    """`value`, checked as the core checks a principal's name."""
    try:
        require_name(value, option)
    except ValueError as error:
        raise CliError(str(error)) from None
    return value


def _pending_request(sagacity: Sagacity, saga_id: str, request_id: str | None) -> ApprovalRequest:
    """The request an approval is about, as the journal records it."""
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
    return requests[0]


def approve(args: argparse.Namespace) -> int:
    """`sagacity approve SAGA --approver NAME`: bound to a hash typed or shown and confirmed."""
    approver = _name(args.approver, "--approver")
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        request = _pending_request(sagacity, args.saga, args.request_id)
        if args.sha256 is not None:
            expected = match_hash(
                args.sha256, request.input_sha256, f"saga {args.saga!r}: --sha256"
            )
        else:
            refuse_self_approval(request, approver)  # before asking: it would be refused
            expected = _confirmed(sagacity, request, approver)
        entry = sagacity.approve(
            args.saga,
            approver=approver,
            request_id=request.request_id,
            expected_sha256=expected,
            justification=args.justification,
            via="cli",
        )
    sys.stdout.write(
        f"saga {args.saga!r}: APPROVED at seq {entry.seq} by {approver}\n"
        f"  tool    {visible(request.tool_name)}\n"
        f"  input   {input_line(request.input)}\n"
        f"  sha256  {request.input_sha256}\n"
    )
    if args.justification is not None:
        sys.stdout.write(f"  why     {visible(args.justification)}\n")
    return EXIT_OK


def _confirmed(sagacity: Sagacity, request: ApprovalRequest, approver: str) -> str:
    """Show the whole request on the terminal and ask; return the hash shown if confirmed.

    Without a terminal nobody sees the request: approving it would be blind, so it is
    refused and `--sha256` asked for.
    """
    saga = request.saga_id
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError(
            f"saga {saga!r}: give --sha256 with the whole hash of the input you reviewed "
            f"(sagacity pending --saga {saga} shows it); without --sha256, approve shows the "
            "request and asks you to confirm, which needs a terminal. Nothing was approved",
            EXIT_REFUSED,
        )
    (view,) = request_views(sagacity, [request])
    sys.stdout.write("\n".join(request_block(view, sagacity.now())) + "\n\n")
    sys.stdout.write(f"Approve this exact input as {approver}? Type yes to approve: ")
    sys.stdout.flush()
    answer = sys.stdin.readline()
    if answer.strip().lower() != "yes":
        raise CliError(f"saga {saga!r}: not approved; nothing was journaled", EXIT_REFUSED)
    return request.input_sha256


def _outcome(result: SagaResult, args: argparse.Namespace, *, rejected: bool = False) -> int:
    """Print how the saga stands and what to do next; return the exit code that says it.

    0: done (COMPENSATED, COMPLETED, or waiting for approval); `EXIT_ELSEWHERE`: the
    undo waits for a process that has the tools; `EXIT_DIRTY`: a compensation failed or
    something is in doubt.
    """
    line = f"saga {result.saga_id!r}: {result.outcome.value}"
    report = result.compensation
    if report is not None:
        parts = [
            f"{label} {', '.join(ref.tool_name for ref in refs)}"
            for label, refs in (
                ("compensated", report.compensated),
                ("failed", report.failed),
                ("in doubt", report.in_doubt),
                ("not run here", report.waiting),
            )
            if refs
        ]
        if parts:
            line += " (" + "; ".join(parts) + ")"
    lines = [line]
    again = " ".join(
        ["sagacity", "compensate", shlex.quote(result.saga_id)]
        + [f"--tools {shlex.quote(spec)}" for spec in args.tools or ()]
    )
    code = EXIT_OK
    if report is not None and report.waiting:
        first = report.waiting[0]
        lines.append(
            ("rejected; " if rejected else "not compensated here; ")
            + "the undo runs where the tools are: no compensation for tool "
            f"{first.tool_name!r} (call {first.call_id!r}) is registered in this process, "
            f"so the walk stopped before it and journaled nothing for {len(report.waiting)} "
            f"call(s). Run 'sagacity compensate {shlex.quote(result.saga_id)} --tools "
            "MODULE:OBJECT' naming the object that holds the saga's tools, or "
            f"Sagacity.compensate({result.saga_id!r}) in a worker that wraps them"
        )
        code = EXIT_ELSEWHERE
    elif result.outcome is SagaOutcome.NEEDS_ATTENTION:
        lines.append(
            "still dirty: a call or compensation is in doubt; 'sagacity doubts' lists it, "
            f"'sagacity resolve' settles it, then run '{again}'"
        )
        code = EXIT_DIRTY
    elif result.outcome is SagaOutcome.COMPENSATION_FAILED:
        lines.append(
            "still dirty: a compensation failed (the error is in 'sagacity show "
            f"{shlex.quote(result.saga_id)} --payloads'); fix its cause and run '{again}'"
        )
        code = EXIT_DIRTY
    sys.stdout.write("".join(printable(text) + "\n" for text in lines))
    return code


def reject(args: argparse.Namespace) -> int:
    """`sagacity reject SAGA --approver NAME --reason TEXT`."""
    approver = _name(args.approver, "--approver")
    reason = _name(args.reason, "--reason")
    sources = [load_tools(spec) for spec in args.tools or ()]
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        sagacity.wrap(*sources)
        result = sagacity.reject(
            args.saga, approver=approver, reason=reason, request_id=args.request_id, via="cli"
        )
    return _outcome(result, args, rejected=True)


def compensate(args: argparse.Namespace) -> int:
    """`sagacity compensate SAGA`."""
    sources = [load_tools(spec) for spec in args.tools or ()]
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        sagacity.wrap(*sources)
        result = sagacity.compensate(args.saga)
    return _outcome(result, args)


FINDINGS = {
    "--executed": "the call took effect",
    "--not-executed": "the call did not take effect",
    "--undone": "the call's compensation took effect",
    "--not-undone": "its compensation did not take effect: the next compensate runs it again",
}
"""`sagacity resolve`'s findings: on the call itself, or on its compensation."""


def resolve(args: argparse.Namespace) -> int:
    """`sagacity resolve SAGA CALL_ID FINDING --by NAME`: a call or its compensation."""
    by = _name(args.by, "--by")
    reason = None if args.reason is None else _name(args.reason, "--reason")
    finding: str = args.finding
    result: Any = None
    if args.result is not None:
        if finding != "--executed":
            raise CliError(
                f"--result is for --executed, not {finding}: only a call that ran has a result"
            )
        try:
            result = orjson.loads(args.result)
        except orjson.JSONDecodeError as error:
            raise CliError(
                f"--result is not JSON: {error}; a text result is a JSON string inside the "
                """shell's quotes, such as --result '"res-1"'"""
            ) from None
    on_compensation = finding in ("--undone", "--not-undone")
    evidence = {"evidence": args.evidence, "evidence_sha256": args.evidence_sha256}
    if (args.evidence is None) != (args.evidence_sha256 is None):
        raise CliError(
            "--evidence and --evidence-sha256 go together: the reference and the SHA-256 of "
            "what was read there"
        )
    if args.evidence is not None:
        try:
            check_evidence(args.evidence, args.evidence_sha256, f"saga {args.saga!r}")
        except ValueError as error:
            raise CliError(str(error)) from None
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        _check_doubt(sagacity, args.saga, args.call_id, on_compensation=on_compensation)
        if on_compensation:
            entry = sagacity.resolve_compensation(
                args.saga,
                args.call_id,
                compensated=finding == "--undone",
                by=by,
                reason=reason,
                **evidence,
            )
        else:
            entry = sagacity.resolve(
                args.saga,
                args.call_id,
                executed=finding == "--executed",
                result=result,
                by=by,
                reason=reason,
                **evidence,
            )
    what = {
        "--executed": f"call {args.call_id!r} resolved as executed",
        "--not-executed": f"call {args.call_id!r} resolved as not executed",
        "--undone": f"the compensation of call {args.call_id!r} resolved as undone",
        "--not-undone": f"the compensation of call {args.call_id!r} resolved as not undone",
    }[finding]
    sys.stdout.write(
        printable(
            f"saga {args.saga!r}: {what} by {by} ({entry.phase.value} at seq {entry.seq}); "
            f"run 'sagacity compensate {args.saga}' to finish the saga"
        )
        + "\n"
    )
    return EXIT_OK


def _check_doubt(sagacity: Sagacity, saga_id: str, call_id: str, *, on_compensation: bool) -> None:
    """Refuse, naming what to do, a call the saga lacks or a finding on the wrong thing.

    Read before the lease is taken, for the message only: the core checks again under it.
    """
    history = SagaHistory.of(saga_id, sagacity.journal.entries(saga_id))
    if not any(call.intent.call_id == call_id for call in history.calls.values()):
        raise CliError(
            f"saga {saga_id!r} has no call {call_id!r}; 'sagacity doubts' lists the calls and "
            "compensations in doubt with their call ids",
            EXIT_NOT_FOUND,
        )
    kinds = {d.kind for d in iter_doubts(sagacity.journal, saga_id=saga_id) if d.call_id == call_id}
    if on_compensation and "compensation" not in kinds and "call" in kinds:
        raise CliError(
            f"saga {saga_id!r}: call {call_id!r} itself is in doubt, not its compensation: "
            "give --executed (with --result) or --not-executed"
        )
    if not on_compensation and "call" not in kinds and "compensation" in kinds:
        raise CliError(
            f"saga {saga_id!r}: the compensation of call {call_id!r} is in doubt, not the "
            "call: give --undone (the compensation took effect) or --not-undone (it did not; "
            "the next compensate runs it again)"
        )


def resume(args: argparse.Namespace) -> int:
    """`sagacity resume SAGA --tools module:object`."""
    sources = [load_tools(spec) for spec in args.tools]
    with opened(args) as sagacity:
        require_saga(sagacity, args.saga)
        sagacity.wrap(*sources)
        result = sagacity.resume_saga(args.saga, request_id=args.request_id)
    code = _outcome(result, args)
    if result.value is not None:
        result_json = orjson.dumps(result.value, default=repr).decode()
        sys.stdout.write(printable(f"result: {result_json}") + "\n")
    return code
