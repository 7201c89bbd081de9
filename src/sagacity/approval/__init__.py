"""Approval requests for IRREVERSIBLE calls, and the stores that keep them pending."""

from __future__ import annotations

from sagacity.approval._memory import InMemoryApprovalStore
from sagacity.approval._request import ApprovalRequest, ApprovalStore
from sagacity.approval._sqlite import SqliteApprovalStore

__all__ = ["ApprovalRequest", "ApprovalStore", "InMemoryApprovalStore", "SqliteApprovalStore"]
