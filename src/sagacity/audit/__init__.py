"""Evidence: verify the hash chain, export the journal."""

from __future__ import annotations

from sagacity.audit._export import export_csv, export_jsonl, read_jsonl
from sagacity.audit._verify import (
    ChainHead,
    Problem,
    VerificationReport,
    chain_heads,
    iter_entries,
    iter_saga_ids,
    verify,
    verify_entries,
)

__all__ = [
    "ChainHead",
    "Problem",
    "VerificationReport",
    "chain_heads",
    "export_csv",
    "export_jsonl",
    "iter_entries",
    "iter_saga_ids",
    "read_jsonl",
    "verify",
    "verify_entries",
]
