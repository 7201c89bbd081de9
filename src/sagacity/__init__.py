"""sagacity: saga safety for AI agent tool calls.

Journal every side effect before and after it happens, undo failed sagas with declared
compensations in reverse order, and hold IRREVERSIBLE calls for a named human's
approval of their exact input. One `Sagacity.wrap()` call; delete it to remove sagacity.
"""

from __future__ import annotations

from sagacity._decisions import Decision, DecisionOutcome, Resumer
from sagacity._reconcile import Evidence, ReconcileContext, Reconciled, ReconcileSubject, Verdict
from sagacity._scope import CurrentCall, current_call
from sagacity._sweeping import Escalator, SweepAction
from sagacity.annotations import Reversibility, compensable, compensation
from sagacity.approval import (
    Approval,
    ApprovalRequest,
    ApprovalStore,
    InMemoryApprovalStore,
    SqliteApprovalStore,
)
from sagacity.approval._escalation import ApproverGroup, Escalation
from sagacity.approval._grant_chain import StandingGrant
from sagacity.audit import VerificationReport, verify
from sagacity.compensation import CallRef, CompensationContext, CompensationReport
from sagacity.errors import (
    AppendConflictError,
    ApprovalAlreadyGivenError,
    ApprovalAlreadyUsedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalHashMismatchError,
    ApprovalInputError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ApprovalSignatureError,
    ApprovalToolMismatchError,
    CheckpointError,
    ConfigurationError,
    DatabaseNotFoundError,
    InDoubtError,
    InvalidIdError,
    JournalError,
    LeaseLostError,
    NestedSagaError,
    NoSagaError,
    ReplayMismatchError,
    SagaBusyError,
    SagacityError,
    SagacityWarning,
    SagaNotFoundError,
    SagaStateError,
    SchemaVersionError,
    SelfApprovalError,
    SerializationError,
)
from sagacity.journal import (
    InMemoryJournal,
    JournalEntry,
    Phase,
    SagaLease,
    SideEffectJournal,
    SqliteJournal,
    to_json,
)
from sagacity.saga import Sagacity, SagaOutcome, SagaResult
from sagacity.tools import FailureKind, SagaTool
from sagacity.worker import Worker

__version__ = "0.1.0"

# The subpackage `sagacity.compensation` shares the decorator's name, and importing it
# bound the package attribute to the module: bind the decorator again, last.
from sagacity.annotations import compensation  # noqa: F811

__all__ = [
    "AppendConflictError",
    "Approval",
    "ApprovalAlreadyGivenError",
    "ApprovalAlreadyUsedError",
    "ApprovalError",
    "ApprovalExpiredError",
    "ApprovalHashMismatchError",
    "ApprovalInputError",
    "ApprovalMissingError",
    "ApprovalNotFoundError",
    "ApprovalRejectedError",
    "ApprovalRequest",
    "ApprovalSignatureError",
    "ApprovalStore",
    "ApprovalToolMismatchError",
    "ApproverGroup",
    "CallRef",
    "CheckpointError",
    "CompensationContext",
    "CompensationReport",
    "ConfigurationError",
    "CurrentCall",
    "DatabaseNotFoundError",
    "Decision",
    "DecisionOutcome",
    "Escalation",
    "Escalator",
    "Evidence",
    "FailureKind",
    "InDoubtError",
    "InMemoryApprovalStore",
    "InMemoryJournal",
    "InvalidIdError",
    "JournalEntry",
    "JournalError",
    "LeaseLostError",
    "NestedSagaError",
    "NoSagaError",
    "Phase",
    "ReconcileContext",
    "ReconcileSubject",
    "Reconciled",
    "ReplayMismatchError",
    "Resumer",
    "Reversibility",
    "SagaBusyError",
    "SagaLease",
    "SagaNotFoundError",
    "SagaOutcome",
    "SagaResult",
    "SagaStateError",
    "SagaTool",
    "Sagacity",
    "SagacityError",
    "SagacityWarning",
    "SchemaVersionError",
    "SelfApprovalError",
    "SerializationError",
    "SideEffectJournal",
    "SqliteApprovalStore",
    "SqliteJournal",
    "StandingGrant",
    "SweepAction",
    "Verdict",
    "VerificationReport",
    "Worker",
    "compensable",
    "compensation",
    "current_call",
    "to_json",
    "verify",
]
