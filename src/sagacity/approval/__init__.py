"""The approval lifecycle of IRREVERSIBLE calls: requests, their stores, ask, decide, check."""

from __future__ import annotations

from sagacity.approval._edit import edit_request
from sagacity.approval._lifecycle import ApprovalHook, ApprovalLifecycle
from sagacity.approval._memory import InMemoryApprovalStore
from sagacity.approval._policy import ApprovalPolicy, recorded_starter, signed_bytes
from sagacity.approval._request import Approval, ApprovalRequest, ApprovalStore
from sagacity.approval._resume import ResumableCall
from sagacity.approval._sqlite import SqliteApprovalStore

__all__ = [
    "Approval",
    "ApprovalHook",
    "ApprovalLifecycle",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalStore",
    "InMemoryApprovalStore",
    "ResumableCall",
    "SqliteApprovalStore",
    "edit_request",
    "recorded_starter",
    "signed_bytes",
]
