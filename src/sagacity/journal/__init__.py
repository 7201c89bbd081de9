"""The side-effect journal: entries, the hash chain, and the backends that store them."""

from __future__ import annotations

from sagacity.journal._canonical import JsonValue, canonical_bytes, sha256_hex
from sagacity.journal._convert import to_json
from sagacity.journal._entry import GENESIS_HASH, JournalEntry, Phase
from sagacity.journal._lease import SagaLease
from sagacity.journal._memory import InMemoryJournal
from sagacity.journal._protocol import SideEffectJournal
from sagacity.journal._sqlite import SqliteJournal

__all__ = [
    "GENESIS_HASH",
    "InMemoryJournal",
    "JournalEntry",
    "JsonValue",
    "Phase",
    "SagaLease",
    "SideEffectJournal",
    "SqliteJournal",
    "canonical_bytes",
    "sha256_hex",
    "to_json",
]
