"""The read commands: sagas, show, verify, export, doubts. None writes anything.

`pending` is `cli/_pending.py`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import re
import sys
from pathlib import Path
from typing import IO

import orjson

from sagacity._chain_kind import GRANT_STATUS
from sagacity._display import journal_table
from sagacity._history import SagaHistory
from sagacity._lease_view import (
    OPEN_STATUSES,
    STALLED,
    Worker,
    is_stalled,
    leases_of,
    worker_of,
    workers_of,
)
from sagacity._summary import STATUSES as STATUS_SET
from sagacity._summary import SagaSummary, iter_doubts, list_summaries, summary_of
from sagacity._verdicts import findings, verdict_text
from sagacity.audit import ChainHead, export_csv, export_jsonl, read_checkpoint, verify
from sagacity.audit._approvals import NOT_COUNTED, unsigned_approvals
from sagacity.cli._common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_PROBLEM,
    CliError,
    age,
    emit_json,
    emit_table,
    opened,
    printable,
    progress,
    require_saga,
)
from sagacity.cli._request_text import (
    decision_lines,
)
from sagacity.errors import SagaNotFoundError

__all__ = [
    "STATUSES",
    "counted",
    "doubts",
    "export",
    "sagas",
    "show",
    "verify_command",
]

STATUSES = tuple(sorted(STATUS_SET | {STALLED}))
"""Every status `sagacity sagas --status` takes."""

_DURATION = re.compile(r"(\d+)([smhd])")


def parse_since(value: str, now: datetime.datetime) -> str:
    """`--since`: a duration back from now (`90m`, `2h`, `7d`) or an ISO 8601 time."""
    found = _DURATION.fullmatch(value.strip())
    if found is not None:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[found.group(2)]
        when = now - datetime.timedelta(**{unit: int(found.group(1))})
    else:
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise CliError(
                f"--since {value!r}: give a duration (90m, 2h, 7d) or a time (2026-12-01T09:00:00Z)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sagas(args: argparse.Namespace) -> int:
    """`sagacity sagas`."""
    if args.limit is not None and args.limit < 1:
        raise CliError(f"--limit must be at least 1, not {args.limit}")
    wanted = _statuses(args.status)
    with opened(args) as sagacity:
        now = sagacity.now()
        since = parse_since(args.since, now) if args.since else None
        rows: list[tuple[SagaSummary, Worker | None]] = []
        cursor: str | None = None
        # One status the journal knows is filtered while paging; STALLED (it needs the
        # leases) and several statuses are filtered here, a page at a time.
        single = next(iter(wanted)) if len(wanted) == 1 and STALLED not in wanted else None
        while True:
            want = (
                1000 if args.limit is None or single is None else min(1000, args.limit - len(rows))
            )
            page = list_summaries(
                sagacity.journal, status=single, since=since, limit=want, cursor=cursor
            )
            workers = workers_of(sagacity.journal, page.summaries, now)
            for summary in page.summaries:
                worker = workers.get(summary.saga_id)
                if not wanted or _status_of(summary, worker) & wanted:
                    rows.append((summary, worker))
            cursor = page.next_cursor
            if args.limit is not None and len(rows) >= args.limit:
                del rows[args.limit :]
                break
            if cursor is None:
                break
    if args.json:
        for summary, worker in rows:
            document = summary.to_json()
            document["worker"] = None if worker is None else worker.to_json()
            document["stalled"] = STALLED in _status_of(summary, worker)
            emit_json(document)
        return EXIT_OK
    emit_table(
        ("saga", "status", "entries", "last activity", "pending", "in doubt", "worker"),
        [
            (
                s.saga_id,
                _status_text(s, worker),
                str(s.entries),
                "" if s.last_at is None else f"{s.last_at} ({age(s.last_at, now)} ago)",
                str(s.pending),
                str(s.in_doubt),
                "" if worker is None else worker.describe(),
            )
            for s, worker in rows
        ],
        empty="no sagas match" if wanted or since or args.limit else "the journal holds no sagas",
    )
    return EXIT_OK


def _statuses(option: str | None) -> frozenset[str]:
    """`--status A,B`: the statuses asked for, upper-cased; empty for all."""
    if not option:
        return frozenset()
    names = frozenset(name.strip().upper() for name in option.split(",") if name.strip())
    unknown = sorted(names - STATUS_SET - {STALLED})
    if unknown or not names:
        named = ",".join(unknown) if len(names) > 1 else option
        raise CliError(
            f"--status {named!r} is not one of {', '.join(STATUSES)} (give one, or several "
            "separated by commas)"
        )
    return names


def _status_of(summary: SagaSummary, worker: Worker | None) -> set[str]:
    """The statuses a saga matches: its own, and STALLED for an OPEN one nobody works on."""
    return {summary.status, STALLED} if is_stalled(summary, worker) else {summary.status}


def _status_text(summary: SagaSummary, worker: Worker | None) -> str:
    if summary.problem is not None:
        return f"{summary.status} ({summary.problem})"
    if summary.status == GRANT_STATUS:
        return f"{GRANT_STATUS} (a standing grant's chain, not a saga: see sagacity grants)"
    if STALLED in _status_of(summary, worker):
        return f"{summary.status} ({STALLED}: no live worker)"
    return summary.status


def show(args: argparse.Namespace) -> int:
    """`sagacity show SAGA`: exit 1, with a warning, if its chain does not verify."""
    with opened(args) as sagacity:
        entries = sagacity.journal.entries(args.saga)
        unsigned = unsigned_approvals(sagacity.approval.policy, args.saga, entries)
        if not entries:
            raise SagaNotFoundError(f"saga {args.saga!r} has no journal entries")
        summary = summary_of(args.saga, entries)
        now = sagacity.now()
        worker = workers_of(sagacity.journal, [summary], now).get(args.saga)
        report = verify(
            sagacity.journal,
            args.saga,
            approval_public_keys=sagacity.approval.policy.public_keys.values(),
        )
    # An unsigned approval is marked on its row already; what is left is an edited chain.
    problems = [p for p in report.problems if p.seq not in unsigned]
    history = SagaHistory.of(args.saga, entries)
    if args.json:
        emit_json(
            {
                "saga_id": args.saga,
                "status": summary.status,
                "stalled": STALLED in _status_of(summary, worker),
                "worker": None if worker is None else worker.to_json(),
                "entries": [entry.to_json() for entry in history.entries],
                "not_counted": [{"seq": seq, "reason": why} for seq, why in unsigned.items()],
                "verdicts": findings(history.entries),
                "problems": [{"seq": p.seq, "reason": p.reason} for p in problems],
            }
        )
        return EXIT_PROBLEM if problems else EXIT_OK
    heading = (
        f"saga {args.saga}: {_status_text(summary, worker)}, {counted(summary.entries, 'entry')}, "
        f"{summary.first_at} to {summary.last_at}"
    )
    sys.stdout.write(printable(heading) + "\n")
    if worker is not None:
        sys.stdout.write(printable(f"worker: {worker.describe()}") + "\n")
    for problem in problems:
        sys.stdout.write(printable(f"TAMPERED at seq {problem.seq}: {problem.reason}") + "\n")
    if history.ended is not None:
        error = (
            history.ended.payload.get("error") if isinstance(history.ended.payload, dict) else None
        )
        if isinstance(error, dict):
            ended_by = f"ended by {error.get('type')}: {error.get('message')}"
            sys.stdout.write(printable(ended_by) + "\n")
    lines = journal_table(history.entries)
    times = ["time", *(entry.recorded_at for entry in history.entries)]
    width = max(len(t) for t in times)
    marks = ["", *(_not_counted(unsigned, entry.seq) for entry in history.entries)]
    for stamp, line, mark in zip(times, lines, marks, strict=True):
        sys.stdout.write(printable(f"{stamp.ljust(width)}  {line}{mark}") + "\n")
    settled = findings(history.entries)
    if settled:
        sys.stdout.write("verdicts and findings:\n")
        for found in settled:
            about = f"{found['subject']} {found['call_id']}"
            sys.stdout.write(printable(f"  {about}: {verdict_text(found)}") + "\n")
    decided = decision_lines(history.entries, unsigned)
    if decided:
        sys.stdout.write("decisions:\n")
        for line in decided:
            sys.stdout.write(printable(f"  {line}") + "\n")
    if args.payloads:
        for entry in history.entries:
            payload = orjson.dumps(entry.payload).decode()
            mark = _not_counted(unsigned, entry.seq)
            sys.stdout.write(printable(f"{entry.seq}: {payload}{mark}") + "\n")
    if problems:
        sys.stdout.flush()
        first = problems[0]
        sys.stderr.write(
            printable(
                f"sagacity show: warning: saga {args.saga!r} was changed after it was "
                f"journaled (seq {first.seq}: {first.reason}); what is shown from there on "
                f"cannot be trusted: 'sagacity verify --saga {args.saga}' checks it"
            )
            + "\n"
        )
        return EXIT_PROBLEM
    return EXIT_OK


def counted(number: int, word: str) -> str:
    """`1 entry`, `2 entries`, `1 saga`, `3 sagas`."""
    if number == 1:
        return f"1 {word}"
    return f"{number} {word[:-1]}ies" if word.endswith("y") else f"{number} {word}s"


def _not_counted(unsigned: dict[int, str], seq: int) -> str:
    """`  unsigned: not counted (why)` for an approval that does not count; else empty."""
    return f"  {NOT_COUNTED} ({unsigned[seq]})" if seq in unsigned else ""


def verify_command(args: argparse.Namespace) -> int:
    """`sagacity verify`."""
    heads: list[ChainHead] = []
    checkpoint = None
    if args.checkpoint is not None:
        if args.public_key is None:
            raise CliError("--checkpoint needs --public-key FILE, the key that signed it")
        from sagacity.audit._keys import load_public_key

        key = load_public_key(args.public_key)
        try:
            text = Path(args.checkpoint).read_bytes()
        except OSError as error:
            raise CliError(
                f"cannot read the checkpoint {args.checkpoint}: {error.strerror}", EXIT_NOT_FOUND
            ) from None
        checkpoint = read_checkpoint(text, key)
        heads = checkpoint.heads
    elif args.public_key is not None:
        raise CliError("--public-key is for --checkpoint FILE")
    with opened(args) as sagacity:
        recorded = any(head.saga_id == args.saga for head in heads)
        if args.saga is not None and not recorded:
            require_saga(sagacity, args.saga)
        with progress("verifying", sagacity, args.saga) as advance:
            report = verify(
                sagacity.journal,
                args.saga,
                heads=heads,
                progress=advance,
                approval_public_keys=sagacity.approval.policy.public_keys.values(),
            )
    nothing = report.entries == 0 and not report.problems
    if args.json:
        emit_json(
            {
                "ok": report.ok and not nothing,
                "sagas": report.sagas,
                "entries": report.entries,
                "checkpoint": None if checkpoint is None else checkpoint.created_at,
                "problems": [dataclasses.asdict(p) for p in report.problems],
                "store_problems": report.store_problems,
            }
        )
    else:
        for problem in report.problems:
            line = f"saga {problem.saga_id!r} seq {problem.seq}: {problem.reason}"
            sys.stdout.write(printable(line) + "\n")  # a reason quotes the edited row
        for store_problem in report.store_problems:
            sys.stdout.write(printable(f"journal table: {store_problem}") + "\n")
        against = "" if checkpoint is None else f" against checkpoint {checkpoint.created_at}"
        if nothing:
            verdict = "nothing to verify: the journal holds no entries"
        elif report.ok:
            verdict = "OK"
        else:
            verdict = f"{len(report.problems) + len(report.store_problems)} broken"
        totals = f"{counted(report.sagas, 'saga')}, {counted(report.entries, 'entry')}"
        sys.stdout.write(f"{totals}{against}: {verdict}\n")
    return EXIT_OK if report.ok and not nothing else EXIT_PROBLEM


def export(args: argparse.Namespace) -> int:
    """`sagacity export`."""
    fmt = "jsonl" if args.json else args.format
    write = export_csv if fmt == "csv" else export_jsonl
    with opened(args) as sagacity:
        if args.saga is not None:
            require_saga(sagacity, args.saga)
        if not args.output:
            write(sagacity.journal, sys.stdout, args.saga)
            return EXIT_OK
        bar = progress("exporting", sagacity, args.saga)
        target = Path(args.output)
        # Written beside the target and moved over it once complete: a failed export
        # never leaves a half file where a good one was.
        partial = target.with_name(target.name + ".partial")
        try:
            out: IO[str] = open(partial, "w", encoding="utf-8", newline="")  # noqa: SIM115
        except OSError as error:
            raise CliError(f"cannot write {args.output}: {error.strerror}", EXIT_OUTPUT) from None
        try:
            with out, bar as advance:
                count = write(sagacity.journal, out, args.saga, progress=advance)
            partial.replace(target)
        except OSError as error:
            partial.unlink(missing_ok=True)
            raise CliError(f"cannot write {args.output}: {error.strerror}", EXIT_OUTPUT) from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    sys.stderr.write(f"exported {counted(count, 'entry')} to {args.output}\n")
    return EXIT_OK


def doubts(args: argparse.Namespace) -> int:
    """`sagacity doubts`: calls and compensations in doubt, across sagas."""
    with opened(args) as sagacity:
        now = sagacity.now()
        found = list(iter_doubts(sagacity.journal))
        open_ids = sorted({d.saga_id for d in found if d.saga_status in OPEN_STATUSES})
        leases = leases_of(sagacity.journal, open_ids)
    # A doubt's own time is no saga's last activity: a saga let go without a lease row
    # is said to have no live worker, without a time.
    workers = {saga_id: worker_of(leases.get(saga_id), now, None) for saga_id in open_ids}
    if args.json:
        for doubt in found:
            document = doubt.to_json()
            worker = workers.get(doubt.saga_id)
            document["worker"] = None if worker is None else worker.to_json()
            emit_json(document)
        return EXIT_OK
    emit_table(
        (
            "saga",
            "seq",
            "call id",
            "tool",
            "in doubt",
            "since",
            "saga status",
            "worker",
            "why",
            "reconciler",
        ),
        [
            (
                d.saga_id,
                str(d.seq),
                d.call_id,
                d.tool_name,
                d.kind,
                f"{d.recorded_at} ({age(d.recorded_at, now)} ago)",
                d.saga_status,
                "" if d.saga_id not in workers else workers[d.saga_id].describe(),
                d.reason,
                verdict_text(d.reconciled),
            )
            for d in found
        ],
        empty="no call or compensation is in doubt",
    )
    return EXIT_OK
