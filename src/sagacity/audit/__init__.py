"""Evidence: verify the hash chain, export the journal, sign checkpoints of its heads.

And measure it: `approval_fatigue` counts how often gated calls asked a human.
"""

from __future__ import annotations

from sagacity.audit._checkpoint import Checkpoint, make_checkpoint, read_checkpoint
from sagacity.audit._export import export_csv, export_jsonl, read_jsonl
from sagacity.audit._fatigue import ChannelTimes, FatigueReport, approval_fatigue
from sagacity.audit._keys import (
    PrivateKey,
    PublicKey,
    generate_key,
    load_private_key,
    load_public_key,
)
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
    "ChannelTimes",
    "Checkpoint",
    "FatigueReport",
    "PrivateKey",
    "Problem",
    "PublicKey",
    "VerificationReport",
    "approval_fatigue",
    "chain_heads",
    "export_csv",
    "export_jsonl",
    "generate_key",
    "iter_entries",
    "iter_saga_ids",
    "load_private_key",
    "load_public_key",
    "make_checkpoint",
    "read_checkpoint",
    "read_jsonl",
    "verify",
    "verify_entries",
]
