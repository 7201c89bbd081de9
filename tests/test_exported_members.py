"""The public API is exactly what `sagacity.__all__` names, sorted."""

from __future__ import annotations

import sagacity


class TestExportedMembers:
    def test_all_is_sorted_and_complete(self) -> None:
        """`__all__` is sorted, and every name in it exists."""
        assert sagacity.__all__ == sorted(sagacity.__all__)
        for name in sagacity.__all__:
            assert hasattr(sagacity, name), name

    def test_public_names(self) -> None:
        """The names users import are pinned: a change here is an API change."""
        assert set(sagacity.__all__) == {
            "AppendConflictError", "ApprovalAlreadyUsedError", "ApprovalError",
            "ApprovalExpiredError", "ApprovalHashMismatchError", "ApprovalMissingError",
            "ApprovalNotFoundError", "ApprovalRejectedError", "ApprovalRequest", "ApprovalStore",
            "CallRef", "CompensationContext", "CompensationReport", "ConfigurationError",
            "CurrentCall", "FailureKind", "InDoubtError", "InMemoryApprovalStore",
            "InMemoryJournal", "JournalEntry", "JournalError", "NestedSagaError", "NoSagaError",
            "Phase", "ReplayMismatchError", "Reversibility", "SagaNotFoundError", "SagaOutcome",
            "SagaResult", "SagaStateError", "SagaTool", "Sagacity", "SagacityError",
            "SchemaVersionError", "SerializationError", "SideEffectJournal", "SqliteApprovalStore",
            "SqliteJournal", "VerificationReport", "compensable", "compensation", "current_call",
            "to_json", "verify",
            # The approval lifecycle and ids that cannot be stored:
            "Approval", "ApprovalAlreadyGivenError", "ApprovalToolMismatchError",
            "InvalidIdError",
            # One worker per saga:
            "LeaseLostError", "SagaBusyError", "SagaLease",
            # Approval policy: four eyes, signed approvals, edits:
            "ApprovalInputError", "ApprovalSignatureError", "SelfApprovalError",
            # Warnings: works here, fails later elsewhere:
            "SagacityWarning",
            # Operations: a read that creates nothing, signed checkpoints:
            "CheckpointError", "DatabaseNotFoundError",
            # In-doubt calls reconcile themselves:
            "Evidence", "ReconcileContext", "ReconcileSubject", "Reconciled", "Verdict",
            # Closing the loop: decisions and the worker that resumes them:
            "Decision", "DecisionOutcome", "Resumer", "Worker",
            # Reminders and escalation at a request's time points:
            "ApproverGroup", "Escalation", "Escalator", "SweepAction",
            # Standing approvals, as Sagacity.grant, grants and revoke return them:
            "StandingGrant",
        }  # fmt: skip

    def test_compensation_is_the_decorator(self) -> None:
        """`sagacity.compensation` is the decorator, although a subpackage shares its name."""
        assert callable(sagacity.compensation)
        assert sagacity.compensation.__module__ == "sagacity.annotations"
