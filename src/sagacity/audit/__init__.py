"""Evidence: verify the hash chain, export the journal."""

from __future__ import annotations

from sagacity.audit._export import export_csv, export_jsonl, read_jsonl
from sagacity.audit._verify import (
    Problem,
    VerificationReport,
    iter_entries,
    verify,
    verify_entries,
)

__all__ = [
    "Problem",
    "VerificationReport",
    "export_csv",
    "export_jsonl",
    "iter_entries",
    "read_jsonl",
    "verify",
    "verify_entries",
]
