"""What a saga's tools and scope need of the `Sagacity` that runs them.

A Protocol, so that the hot path (`tools`, `_call`, `_scope`) does not import the facade
that imports it.
"""

from __future__ import annotations

from typing import Protocol

from sagacity._classify import ExceptionClassifier, FailureKind
from sagacity.approval import ApprovalLifecycle, ApprovalRequest, ApprovalStore
from sagacity.journal import SideEffectJournal

__all__ = ["SagaOwner"]


class SagaOwner(Protocol):
    """The stores and policies of the `Sagacity` a saga runs under."""

    journal: SideEffectJournal
    approvals: ApprovalStore
    approval: ApprovalLifecycle
    allow_irreversible_outside_saga: bool

    def classify(self, error: BaseException) -> FailureKind:
        """Return how `error`, raised by a tool, is journaled."""
        ...

    def add_classifier(self, classifier: ExceptionClassifier) -> None:
        """Teach the hot path a framework's exceptions."""
        ...

    def pending(self, saga_id: str | None = None) -> list[ApprovalRequest]:
        """Return the approval requests waiting, as the journal records them."""
        ...
