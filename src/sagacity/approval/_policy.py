"""Who may approve, and which journaled approvals count: four eyes, N approvers, signatures.

The policy lives in the journal and in this check, not in a front end: the principal
who started a saga is recorded in its chain (`started_by`), each AWAITING_APPROVAL
records how many different approvers it needs (`approvers_required`), and each APPROVED
may carry an Ed25519 signature over exactly what it approves. Whatever writes an
APPROVED entry (the server, the CLI, Python, or someone with database access), only the
approvals this module counts let a call run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sagacity._history import SagaHistory, payload_of
from sagacity._ids import require_name
from sagacity._unicode import principal_key
from sagacity.annotations import MAX_APPROVERS
from sagacity.approval._escalation import ApproverGroup, approver_groups
from sagacity.approval._request import Approval, ApprovalRequest
from sagacity.errors import (
    ApprovalError,
    ConfigurationError,
    SagaStateError,
    SelfApprovalError,
)
from sagacity.journal import JournalEntry, JsonValue
from sagacity.journal._canonical import canonical_bytes

if TYPE_CHECKING:
    from sagacity.audit._keys import PrivateKey, PublicKey

__all__ = [
    "ApprovalHook",
    "ApprovalPolicy",
    "Counted",
    "approvers_required_of",
    "count_approvals",
    "notify",
    "recorded_starter",
    "refuse_self_approval",
    "signed_bytes",
    "starter_for",
]


ApprovalHook = Callable[[ApprovalRequest], None]
"""Told of each new approval request, after its AWAITING_APPROVAL is committed."""

logger = logging.getLogger("sagacity")


def notify(
    hook: ApprovalHook | None, request: ApprovalRequest, *, what: str = "on_approval_request"
) -> None:
    """Tell `hook` (`what`, in the log) of a request; what it raises is logged, never raised."""
    if hook is None:
        return
    try:
        hook(request)
    except Exception:
        # The request is journaled and stored: a failing notifier must not fail the call
        # (nor undo what was recorded). Retrying is the notifier's own business.
        logger.exception(
            "saga %r: the %s hook raised for request %s (tool %r); the request stands",
            request.saga_id,
            what,
            request.request_id,
            request.tool_name,
        )


def signed_bytes(
    saga_id: str,
    request_id: str,
    input_sha256: str,
    approver: str,
    *,
    call_id: str,
    tool_name: str,
    request_seq: int,
    justification: str | None = None,
    version: int = 1,
    via: str | None = None,
) -> bytes:
    """The exact bytes an approval's signature covers (RFC 8785 canonical JSON, UTF-8).

    Version 1 (an APPROVED payload without `signature_version`) covers the fields below.
    Version 2 (`signature_version: 2`, written for every approval that carries a
    justification) covers them, `justification` (null when none) and `"version": 2`, so
    an edited justification no longer verifies while old journals still do. Version 3
    (written for every approval that records its channel) covers version 2's fields and
    `via`, with `"version": 3`: an approval cannot be moved to another channel.

    The request's call, tool and the seq of its AWAITING_APPROVAL are covered too: a
    signature copied onto a request forged later for another call (under the same request
    id, input and approver) does not verify.
    """
    signed: dict[str, JsonValue] = {
        "saga_id": saga_id,
        "request_id": request_id,
        "input_sha256": input_sha256,
        "approver": approver,
        "call_id": call_id,
        "tool_name": tool_name,
        "request_seq": request_seq,
    }
    if version != 1:
        signed["justification"] = justification
        signed["version"] = version
    if version >= 3:
        signed["via"] = via
    return canonical_bytes(signed)


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """How approvals are signed here, and which signatures the check accepts.

    Args:
        signing_key: Signs every APPROVED this process journals; None: unsigned.
        public_keys: The keys whose signatures are accepted, by `key_id`. The signing
            key's own public key is accepted too.
        require_signed: Count only APPROVED entries whose signature verifies with one of
            `public_keys`.
        groups: The approver groups an expired request may escalate to, by name.
    """

    signing_key: PrivateKey | None = None
    public_keys: dict[str, PublicKey] = dataclasses.field(default_factory=dict)
    require_signed: bool = False
    groups: dict[str, ApproverGroup] = dataclasses.field(default_factory=dict)

    @classmethod
    def build(
        cls,
        signing_key: PrivateKey | None,
        public_keys: Iterable[PublicKey],
        require_signed: bool,
        groups: Iterable[ApproverGroup] = (),
    ) -> ApprovalPolicy:
        """Check the settings of `Sagacity(...)` and build the policy.

        Raises:
            ConfigurationError: Signatures are required and no key could verify one, a
                key is not a `sagacity.audit` key, or the approver groups are not
                `ApproverGroup`s with distinct names.
        """
        try:
            keys = list(public_keys)
        except TypeError:
            raise ConfigurationError(
                "approval_public_keys must be a list of sagacity.audit PublicKeys, not "
                f"{type(public_keys).__name__}: write approval_public_keys=[key]"
            ) from None
        if signing_key is not None:
            if not hasattr(signing_key, "sign") or not hasattr(signing_key, "public"):
                raise ConfigurationError(
                    f"approval_signing_key must be a sagacity.audit PrivateKey "
                    f"(load_private_key or generate_key), not {type(signing_key).__name__}"
                )
            keys.append(signing_key.public)
        for key in keys:
            if not hasattr(key, "verify") or not hasattr(key, "key_id"):
                raise ConfigurationError(
                    f"approval_public_keys must hold sagacity.audit PublicKeys "
                    f"(load_public_key), not {type(key).__name__}"
                )
        if not isinstance(require_signed, bool):
            raise ConfigurationError(
                f"require_signed_approvals must be True or False, not {require_signed!r}"
            )
        if require_signed and not keys:
            raise ConfigurationError(
                "require_signed_approvals=True needs approval_public_keys (or an "
                "approval_signing_key) to verify approvals with; with no key no approval "
                "could ever count"
            )
        return cls(
            signing_key=signing_key,
            public_keys={key.key_id: key for key in keys},
            groups=approver_groups(groups),
            require_signed=require_signed,
        )

    def signature(
        self,
        saga_id: str,
        request: ApprovalRequest,
        approver: str,
        justification: str | None = None,
        via: str | None = None,
    ) -> dict[str, JsonValue]:
        """The `signature` and `key_id` fields of an APPROVED payload; empty when unsigned.

        Raises:
            ConfigurationError: Signatures are required and this process cannot sign:
                its approval would never count.
        """
        if self.signing_key is None:
            if self.require_signed:
                raise ConfigurationError(
                    f"saga {saga_id!r}: approvals must be signed (require_signed_approvals), "
                    "but this Sagacity has no approval_signing_key; nothing was journaled"
                )
            return {}
        version = 3 if via is not None else 1 if justification is None else 2
        data = signed_bytes(
            saga_id,
            request.request_id,
            request.input_sha256,
            approver,
            call_id=request.call_id,
            tool_name=request.tool_name,
            request_seq=request.seq,
            justification=justification,
            version=version,
            via=via,
        )
        signed: dict[str, JsonValue] = {
            "signature": self.signing_key.sign(data),
            "key_id": self.signing_key.key_id,
        }
        if version != 1:
            signed["signature_version"] = version
        return signed

    def signature_problem(self, saga_id: str, entry: JournalEntry) -> str | None:
        """Why the APPROVED `entry`'s signature is refused; None when it is fine or not needed."""
        if not self.require_signed:
            return None
        payload = payload_of(entry)
        signature, key_id = payload.get("signature"), payload.get("key_id")
        if not isinstance(signature, str) or not signature:
            return "it carries no signature"
        if not isinstance(key_id, str) or key_id not in self.public_keys:
            return f"it is signed with key {key_id!r}, which is not one of the trusted keys"
        approver, request_id, sha = (
            payload.get("approver"),
            payload.get("request_id"),
            payload.get("input_sha256"),
        )
        if not (isinstance(approver, str) and isinstance(request_id, str) and isinstance(sha, str)):
            return "it does not name its approver, request and hash"
        if entry.call_id is None or entry.tool_name is None or entry.ref_seq is None:
            return "it does not name the call, tool and request entry it approves"
        version = payload.get("signature_version", 1)
        justification, via = payload.get("justification"), payload.get("via")
        if version not in (1, 2, 3) or isinstance(version, bool):
            return f"its signature_version {version!r} is not one this sagacity knows"
        if version == 1 and "justification" in payload:
            return "its justification is not covered by its signature (signature_version 1)"
        if version in (1, 2) and "via" in payload:
            return f"its via is not covered by its signature (signature_version {version})"
        if justification is not None and not isinstance(justification, str):
            return "its justification is not text"
        if via is not None and not isinstance(via, str):
            return "its via is not text"
        try:
            data = signed_bytes(
                saga_id,
                request_id,
                sha,
                approver,
                call_id=entry.call_id,
                tool_name=entry.tool_name,
                request_seq=entry.ref_seq,
                justification=justification,
                version=int(version),
                via=via,
            )
        except Exception:  # an unencodable value: no signature can cover it
            return "its fields cannot be encoded"
        if not self.public_keys[key_id].verify(data, signature):
            return f"its signature does not verify with key {key_id!r}"
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class Counted:
    """The APPROVED entries of one request, sorted: which count, and why others do not."""

    valid: tuple[Approval, ...]
    """One approval per principal that counts, oldest first."""
    last_valid: JournalEntry | None
    """The newest APPROVED entry that counts."""
    unsigned: tuple[tuple[JournalEntry, str], ...]
    """Entries refused for their signature, with why."""
    other_hash: tuple[JournalEntry, ...]
    """Entries that approved another hash."""
    no_hash: tuple[JournalEntry, ...]
    """Entries that recorded no hash: no approval."""
    barred: tuple[JournalEntry, ...]
    """Entries by the saga's starter or the input's editor: four eyes."""

    def describe(self, required: int) -> str:
        """`1 of 2 approvals (by 'bob')`: the progress, for messages."""
        by = ", ".join(repr(a.approver) for a in self.valid)
        return f"{len(self.valid)} of {required} approvals" + (f" (by {by})" if by else "")


def count_approvals(
    request: ApprovalRequest,
    entries: Iterable[JournalEntry],
    policy: ApprovalPolicy,
) -> Counted:
    """Sort the APPROVED `entries` naming `request` into those that count and the rest.

    An entry counts when it records the request's hash, is not by the saga's starter or
    the input's editor, carries a signature that verifies where signatures are required,
    and is the first counting one of its approver.
    """
    barred_by = {principal_key(n) for n in (request.started_by, request.edited_by) if n}
    valid: list[Approval] = []
    seen: set[str] = set()
    last_valid: JournalEntry | None = None
    unsigned: list[tuple[JournalEntry, str]] = []
    other_hash: list[JournalEntry] = []
    no_hash: list[JournalEntry] = []
    barred: list[JournalEntry] = []
    for entry in entries:
        payload = payload_of(entry)
        approver = payload.get("approver")
        sha = payload.get("input_sha256")
        if not isinstance(sha, str):
            no_hash.append(entry)
            continue
        if sha != request.input_sha256:
            other_hash.append(entry)
            continue
        if not isinstance(approver, str) or principal_key(approver) in barred_by:
            barred.append(entry)
            continue
        problem = policy.signature_problem(request.saga_id, entry)
        if problem is not None:
            unsigned.append((entry, problem))
            continue
        if principal_key(approver) in seen:
            continue  # the same principal twice counts once
        seen.add(principal_key(approver))
        key_id, justification = payload.get("key_id"), payload.get("justification")
        via = payload.get("via")
        valid.append(
            Approval(
                approver=approver,
                approved_at=entry.recorded_at,
                seq=entry.seq,
                key_id=key_id if isinstance(key_id, str) else None,
                justification=justification if isinstance(justification, str) else None,
                via=via if isinstance(via, str) else None,
            )
        )
        last_valid = entry
    return Counted(
        valid=tuple(valid),
        last_valid=last_valid,
        unsigned=tuple(unsigned),
        other_hash=tuple(other_hash),
        no_hash=tuple(no_hash),
        barred=tuple(barred),
    )


def approvers_required_of(payload: dict[str, Any]) -> int | None:
    """The `approvers_required` an AWAITING_APPROVAL payload records.

    1 when absent (entries written before the setting existed); None when it is not a
    whole number from 1 to `MAX_APPROVERS`, which the check refuses.
    """
    value = payload.get("approvers_required", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= MAX_APPROVERS else None


def recorded_starter(history: SagaHistory) -> str | None:
    """The principal the saga's journal records as its starter: the first `started_by`."""
    for entry in history.entries:
        started_by = payload_of(entry).get("started_by")
        if isinstance(started_by, str):
            return started_by
    return None


def starter_for(history: SagaHistory, started_by: str | None) -> str | None:
    """The starter a run of the saga works under: the journal's, else `started_by`.

    Raises:
        SagaStateError: The journal records another starter: who started a saga does
            not change, whoever opens it later.
        ValueError: `started_by` names nobody (blank, or not a string).
    """
    if started_by is not None:
        require_name(started_by, "started_by")
    recorded = recorded_starter(history)
    if started_by is not None and recorded is not None and started_by != recorded:
        raise SagaStateError(
            f"saga {history.saga_id!r} was started by {recorded!r}, as its journal records; "
            f"it cannot be opened as started by {started_by!r}. Open it with "
            "started_by=None (or the same principal), or start a new saga"
        )
    return recorded or started_by


def refuse_self_approval(request: ApprovalRequest, approver: str) -> None:
    """Four eyes: the saga's starter and the input's editor do not approve it."""
    # Compared as principal_key does: a lookalike spelling is the same principal.
    if request.started_by and principal_key(approver) == principal_key(request.started_by):
        raise SelfApprovalError(
            f"saga {request.saga_id!r}: {approver!r} started the saga, so they cannot approve "
            f"its request {request.request_id} for tool {request.tool_name!r}; another "
            "principal must approve it"
        )
    if request.edited_by and principal_key(approver) == principal_key(request.edited_by):
        raise SelfApprovalError(
            f"saga {request.saga_id!r}: {approver!r} edited the input of request "
            f"{request.request_id} for tool {request.tool_name!r}, so they cannot approve "
            "it; another principal must approve it"
        )
    escalation = request.escalation
    if escalation is not None and principal_key(approver) not in {
        principal_key(m) for m in escalation.members
    }:
        raise ApprovalError(
            f"saga {request.saga_id!r}: request {request.request_id} for tool "
            f"{request.tool_name!r} escalated to group {escalation.group!r} at seq "
            f"{escalation.seq}; {approver!r} is not a member of it, so only "
            f"{', '.join(map(repr, escalation.members))} may approve it now"
        )
