"""Compensations: what they are given, how they are registered, the walk that runs them."""

from __future__ import annotations

from sagacity.compensation._context import CallRef, CompensationContext, CompensationReport
from sagacity.compensation._registry import Compensation, CompensationRegistry
from sagacity.compensation._runner import CompensationRunner

__all__ = [
    "CallRef",
    "Compensation",
    "CompensationContext",
    "CompensationRegistry",
    "CompensationReport",
    "CompensationRunner",
]
