"""The exceptions sagacity raises, one tree under `SagacityError`.

```
SagacityError                      500
├── ConfigurationError             500  a declaration is wrong (found at wrap time)
├── SerializationError             422  a value cannot be made JSON
├── InvalidIdError                 422  a saga or call id cannot be stored or displayed
├── JournalError                   503  the journal could not be read or written
│   ├── SchemaVersionError         503  the database has a newer schema than this code
│   ├── DatabaseNotFoundError      404  no sagacity database there (a read never creates one)
│   ├── AppendConflictError        409  a conditional append found the saga moved on
│   └── LeaseLostError             409  another worker took the saga over: nothing written
├── SagaStateError                 409  the saga is not in a state that allows this
│   ├── NestedSagaError            409  a saga was opened inside another
│   ├── SagaBusyError              409  another worker holds the saga's lease
│   ├── NoSagaError                409  an IRREVERSIBLE tool was called outside a saga
│   ├── InDoubtError               409  a replayed call has an INTENT with no outcome
│   └── ReplayMismatchError        409  a replayed call id ran before with other input
├── SagaNotFoundError              404  no journal entries for that saga
├── CheckpointError                422  a checkpoint file is malformed, edited or forged
└── ApprovalError                  403  an approval check refused; nothing was executed
    ├── ApprovalNotFoundError      404  no such (pending) approval request
    ├── ApprovalMissingError       403  no APPROVED entry for exactly that request
    ├── ApprovalRejectedError      403  the request was rejected
    ├── ApprovalToolMismatchError  403  the call id was approved for another tool
    ├── ApprovalAlreadyGivenError  409  the request is approved already (or by this approver)
    ├── SelfApprovalError          403  the saga's starter (or the input's editor) approved
    ├── ApprovalSignatureError     403  an approval's signature is missing, unknown or wrong
    ├── ApprovalInputError         422  an edited input does not fit the tool's signature
    ├── ApprovalHashMismatchError  403  the input's hash differs from what was approved
    ├── ApprovalExpiredError       403  the request expired
    └── ApprovalAlreadyUsedError   409  the approved call has run already

SagacityWarning (a UserWarning)         works here, but would be lost elsewhere
└── InMemoryCheckpointerWarning         (langchain) a graph paused under InMemorySaver
```

Every error carries `status_code`, the HTTP status the server maps it to. A pending
approval is not an error: it is a saga outcome (`SagaOutcome.AWAITING_APPROVAL`).

Warnings are `SagacityWarning`s (a `UserWarning`): something works here but will fail
later, elsewhere — a LangGraph graph paused for approval under an in-memory
checkpointer cannot be resumed by another process.
"""

from __future__ import annotations

__all__ = [
    "AppendConflictError",
    "ApprovalAlreadyGivenError",
    "ApprovalAlreadyUsedError",
    "ApprovalError",
    "ApprovalExpiredError",
    "ApprovalHashMismatchError",
    "ApprovalInputError",
    "ApprovalMissingError",
    "ApprovalNotFoundError",
    "ApprovalRejectedError",
    "ApprovalSignatureError",
    "ApprovalToolMismatchError",
    "CheckpointError",
    "ConfigurationError",
    "DatabaseNotFoundError",
    "InDoubtError",
    "InvalidIdError",
    "JournalError",
    "LeaseLostError",
    "NestedSagaError",
    "NoSagaError",
    "ReplayMismatchError",
    "SagaBusyError",
    "SagaNotFoundError",
    "SagaStateError",
    "SagacityError",
    "SagacityWarning",
    "SchemaVersionError",
    "SelfApprovalError",
    "SerializationError",
]


class SagacityError(Exception):
    """The root of every error sagacity raises."""

    status_code: int = 500


class SagacityWarning(UserWarning):
    """The root of every warning sagacity gives: this works now, but will fail later."""


class ConfigurationError(SagacityError):
    """A tool or compensation declaration is wrong; raised by `Sagacity.wrap`."""


class SerializationError(SagacityError):
    """A value cannot be converted to JSON; raised before anything runs."""

    status_code = 422


class InvalidIdError(SagacityError, ValueError):
    """A saga or call id is empty, blank, or cannot be stored or shown; nothing ran.

    Control characters and lone surrogates are refused: an id is printed in listings and
    error messages, and stored as UTF-8.
    """

    status_code = 422


class JournalError(SagacityError):
    """The journal could not be read or written."""

    status_code = 503


class CheckpointError(SagacityError):
    """A signed checkpoint is malformed, was edited after signing, or is not the key's."""

    status_code = 422


class DatabaseNotFoundError(JournalError):
    """No sagacity database at that URL; opening it to read creates nothing."""

    status_code = 404


class SchemaVersionError(JournalError):
    """The database was written by a newer sagacity than this one."""


class AppendConflictError(JournalError):
    """A conditional append found another last seq than expected; nothing was written.

    Raised by `SideEffectJournal.append(..., expected_seq=n)` when the saga's last seq
    is not `n`: another writer appended since the caller read the journal. Read the
    saga's journal again and decide anew.
    """

    status_code = 409

    def __init__(self, saga_id: str, expected_seq: int, found_seq: int) -> None:
        super().__init__(
            f"saga {saga_id!r}: the append expected seq {expected_seq} as the saga's last "
            f"entry, but found seq {found_seq}: another writer appended first and nothing "
            "was written; read the saga's journal again before deciding what to append"
        )
        self.saga_id = saga_id
        """The saga appended to."""
        self.expected_seq = expected_seq
        """The last seq the append required."""
        self.found_seq = found_seq
        """The saga's last seq when the append was refused (0: no entries)."""

    def __reduce__(self) -> tuple[type[AppendConflictError], tuple[str, int, int]]:
        # Rebuilt from its fields, not from the message, when it crosses a process.
        return type(self), (self.saga_id, self.expected_seq, self.found_seq)


class LeaseLostError(JournalError):
    """A worker whose lease on a saga was taken over tried to append; nothing was written.

    The lease expired (the worker stalled past it) and another worker took the saga
    over: this worker must stop, and leave the saga to the new holder.
    """

    status_code = 409


class SagaStateError(SagacityError):
    """The saga is not in a state that allows the operation."""

    status_code = 409


class NestedSagaError(SagaStateError):
    """A saga was opened while another is active in the same context."""


class SagaBusyError(SagaStateError):
    """Another worker holds the saga's lease: it is running, resuming or compensating it."""


class NoSagaError(SagaStateError):
    """An IRREVERSIBLE tool was called outside any saga."""


class InDoubtError(SagaStateError):
    """A replayed call has an INTENT with no outcome: it may or may not have run."""


class ReplayMismatchError(SagaStateError):
    """A call id that already ran was called again with different input."""


class SagaNotFoundError(SagacityError):
    """The journal has no entries for the saga."""

    status_code = 404


class ApprovalError(SagacityError):
    """An approval check refused. Nothing was executed; the saga can still be approved."""

    status_code = 403


class ApprovalNotFoundError(ApprovalError):
    """There is no such approval request, or none pending for the saga."""

    status_code = 404


class ApprovalMissingError(ApprovalError):
    """The journal holds no valid APPROVED entry for exactly this request."""


class ApprovalRejectedError(ApprovalError):
    """The request was rejected."""


class ApprovalToolMismatchError(ApprovalError):
    """A call id that was asked or approved for one tool was called by another tool."""


class ApprovalAlreadyGivenError(ApprovalError):
    """The request is approved already, or this approver approved it already.

    An approver approves a request once; a request that needs N approvers takes N
    different ones.
    """

    status_code = 409


class SelfApprovalError(ApprovalError):
    """The principal who started the saga (or edited the input) tried to approve it.

    Four eyes: whoever asked for an IRREVERSIBLE call, or wrote its input, is not the one
    who lets it run. Nothing was journaled.
    """


class ApprovalSignatureError(ApprovalError):
    """An APPROVED entry lacks a signature, names an unknown key, or does not verify.

    Raised by the check when `Sagacity(require_signed_approvals=True)`: an approval a
    database writer inserted without the signing key approves nothing.
    """


class ApprovalInputError(ApprovalError):
    """An edited input does not fit the tool's signature; nothing was journaled."""

    status_code = 422


class ApprovalHashMismatchError(ApprovalError):
    """The input about to run does not hash to what was requested and approved."""


class ApprovalExpiredError(ApprovalError):
    """The approval request expired before it was used."""


class ApprovalAlreadyUsedError(ApprovalError):
    """The approved call has already run; an approval is used once."""

    status_code = 409
