"""The approval lifecycle of IRREVERSIBLE calls: requests, their stores, ask, decide, check."""

from __future__ import annotations

from sagacity.approval._lifecycle import ApprovalLifecycle
from sagacity.approval._memory import InMemoryApprovalStore
from sagacity.approval._request import Approval, ApprovalRequest, ApprovalStore
from sagacity.approval._sqlite import SqliteApprovalStore

__all__ = [
    "Approval",
    "ApprovalLifecycle",
    "ApprovalRequest",
    "ApprovalStore",
    "InMemoryApprovalStore",
    "SqliteApprovalStore",
]
