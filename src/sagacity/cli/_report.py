"""`sagacity report fatigue`: how often the journal's gated calls asked a human, how fast.

See docs/approval.md ("Measuring approval fatigue") and docs/cli.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from sagacity.audit import FatigueReport, approval_fatigue
from sagacity.cli._common import EXIT_OK, emit_json, emit_table, opened, require_saga
from sagacity.cli._request_text import visible

__all__ = ["COMMANDS", "add_report_command", "fatigue_text"]

Command = Callable[..., argparse.ArgumentParser]
"""The CLI's `command(name, help, json=, signed=)` that adds a subcommand."""

REPORTS = ("fatigue",)
"""The reports `sagacity report` prints."""


def add_report_command(command: Command) -> None:
    """Add `report` to the parser."""
    report = command(
        "report",
        "measure the journal: 'fatigue', how many gated calls asked a human, how fast",
        json=True,
    )
    report.add_argument("report", choices=REPORTS, help="which report")
    report.add_argument("--saga", help="one saga only")


def report(args: argparse.Namespace) -> int:
    """`sagacity report fatigue [--saga SAGA] [--json]`."""
    with opened(args) as sagacity:
        if args.saga is not None:
            require_saga(sagacity, args.saga)
            measured = approval_fatigue(sagacity.journal.entries(args.saga))
        else:
            measured = approval_fatigue(sagacity.journal)
    if args.json:
        emit_json(measured.to_json())
        return EXIT_OK
    sys.stdout.write(fatigue_text(measured))
    emit_table(
        ["channel", "decisions", "median", "p90"],
        (
            [visible(c.via), str(c.decisions), _seconds(c.median_seconds), _seconds(c.p90_seconds)]
            for c in measured.channels
        ),
        empty="no human decided yet",
    )
    return EXIT_OK


def fatigue_text(measured: FatigueReport) -> str:
    """The report's counts, before its table of times by channel."""
    outcomes = ", ".join(f"{count} {name}" for name, count in measured.outcomes.items())
    return (
        f"gated calls        {measured.gated_calls} in {measured.sagas} saga(s)\n"
        f"asked a human      {measured.asked} ({measured.share(measured.asked):g}%), "
        f"in {measured.requests} request(s)\n"
        f"covered by rules   {measured.covered_by_rule} "
        f"({measured.share(measured.covered_by_rule):g}%)\n"
        f"covered by grants  {measured.covered_by_grant} "
        f"({measured.share(measured.covered_by_grant):g}%)\n"
        f"requests           {outcomes}; {measured.escalated} escalated\n"
        "time to decision, by channel:\n"
    )


def _seconds(value: float) -> str:
    """`42s`, `3m 20s`, `2h 5m`: a duration a human reads at a glance."""
    whole = round(value)
    if whole < 60:
        return f"{value:.1f}s" if value < 10 else f"{whole}s"
    minutes, seconds = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {seconds}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m"


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"report": report}
"""The handlers of the commands this module adds."""
