"""How a doubt was settled, or why it was not, read from the journal alone.

A reconciler's verdict is a RECONCILED entry; a human's finding is the EXECUTED, FAILED
`not_run`, COMPENSATED or COMPENSATION_FAILED `not_run` that carries `resolved_by`. Both
may carry evidence (a reference and a SHA-256). The CLI (`sagacity show`, `sagacity
doubts`), the server's JSON API and the inbox show them through these functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sagacity._history import SagaHistory, payload_of
from sagacity.journal import JournalEntry, Phase

__all__ = ["Finding", "findings", "last_verdict", "verdict_json", "verdict_text"]

_SETTLING = (Phase.EXECUTED, Phase.FAILED, Phase.COMPENSATED, Phase.COMPENSATION_FAILED)

Finding = dict[str, Any]
"""One verdict or finding as JSON: `seq`, `call_id`, `tool_name`, `subject`, `verdict`,
`decided_by`, `evidence` (or None), and `failure`, `error`, `reason`, `ignored` when set."""


def verdict_json(entry: JournalEntry) -> Finding:
    """A RECONCILED entry, or a human's finding, as a `Finding`."""
    payload = payload_of(entry)
    if entry.phase is Phase.RECONCILED:
        found: Finding = {
            "seq": entry.seq,
            "call_id": entry.call_id,
            "tool_name": entry.tool_name,
            "subject": payload.get("subject"),
            "verdict": payload.get("verdict"),
            "decided_by": payload.get("decided_by"),
            "evidence": payload.get("evidence"),
        }
        for key in ("failure", "error", "reason", "ignored"):
            if key in payload:
                found[key] = payload[key]
        return found
    subject = "compensation" if entry.phase.name.startswith("COMPENSAT") else "call"
    landed = entry.phase in (Phase.EXECUTED, Phase.COMPENSATED)
    found = {
        "seq": entry.seq,
        "call_id": entry.call_id,
        "tool_name": entry.tool_name,
        "subject": subject,
        "verdict": "landed" if landed else "did_not_land",
        "decided_by": payload.get("resolved_by"),
        "evidence": payload.get("evidence"),
    }
    if "reason" in payload:
        found["reason"] = payload["reason"]
    return found


def findings(entries: Iterable[JournalEntry]) -> list[Finding]:
    """Every verdict and human finding in a saga's entries, in journal order.

    An outcome written on a reconciler's verdict (it carries `verdict_seq`) is not listed
    again: its RECONCILED entry is.
    """
    return [verdict_json(entry) for entry in entries if _is_finding(entry)]


def _is_finding(entry: JournalEntry) -> bool:
    if entry.phase is Phase.RECONCILED:
        return True
    payload = payload_of(entry)
    return entry.phase in _SETTLING and "resolved_by" in payload and "verdict_seq" not in payload


def last_verdict(history: SagaHistory, call_id: str, subject: str) -> Finding | None:
    """The latest RECONCILED on the call (or its compensation), if a reconciler answered."""
    for entry in reversed(history.entries):
        if (
            entry.phase is Phase.RECONCILED
            and entry.call_id == call_id
            and payload_of(entry).get("subject") == subject
        ):
            return verdict_json(entry)
    return None


def verdict_text(found: Finding | None) -> str:
    """One line for a person: who decided what, on what evidence; for None, that none did."""
    if found is None:
        return "no reconciler has answered"
    verdict = str(found.get("verdict", "")).replace("_", " ")
    text = f"{verdict} by {found.get('decided_by')} (seq {found.get('seq')})"
    evidence = found.get("evidence")
    if isinstance(evidence, dict):
        text += f", evidence {evidence.get('reference')} sha256 {evidence.get('sha256')}"
    if "failure" in found:
        error = found.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        text += f": the reconciler {str(found['failure']).replace('_', ' ')}: {message}"
    elif "reason" in found:
        text += f": {found['reason']}"
    if "ignored" in found:
        text += f"; IGNORED: {found['ignored']}"
    return text
