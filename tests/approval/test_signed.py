"""Signed approvals: an APPROVED row counts only if a trusted key signed exactly it.

The worker that runs the call holds only public keys; the approving side holds the
private key. An attacker with write access to the database can append a correctly
hashed APPROVED row through the journal's own API; under `require_signed_approvals` it
approves nothing.
"""

from __future__ import annotations

import dataclasses

import pytest
import rfc8785

from sagacity import (
    ApprovalAlreadyUsedError,
    ApprovalMissingError,
    ApprovalSignatureError,
    ConfigurationError,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
)
from sagacity.approval import ApprovalRequest, InMemoryApprovalStore, signed_bytes
from sagacity.audit._keys import PrivateKey, generate_key
from sagacity.journal import InMemoryJournal
from tests.approval._policy import (
    SAGA,
    WIRE,
    OpenSagacity,
    Treasury,
    inject_approval,
    tools_of,
    waiting_saga,
)


def signed_bytes_of(request: ApprovalRequest, approver: str) -> bytes:
    """What `approver`'s signature of `request` covers."""
    return signed_bytes(
        request.saga_id,
        request.request_id,
        request.input_sha256,
        approver,
        call_id=request.call_id,
        tool_name=request.tool_name,
        request_seq=request.seq,
    )


@pytest.fixture(scope="module")
def key() -> PrivateKey:
    """The approval service's signing key."""
    return generate_key()


def worker_and_approver(open_sagacity: OpenSagacity, key: PrivateKey) -> tuple[Sagacity, Sagacity]:
    """A worker that verifies (public key only) and an approval service that signs."""
    worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
    approver = open_sagacity(approval_signing_key=key, require_signed_approvals=True)
    return worker, approver


class TestSignedApprovals:
    def test_a_signed_approval_runs_and_verifies_independently(
        self, open_sagacity: OpenSagacity, key: PrivateKey
    ) -> None:
        """The APPROVED payload carries a hex Ed25519 signature over the documented bytes.

        Version 3: the fields of version 1, the justification (none here) and the channel.
        """
        worker, approver = worker_and_approver(open_sagacity, key)
        waiting = waiting_saga(worker)
        entry = approver.approve(SAGA, approver="bob")
        payload = entry.payload
        assert payload["key_id"] == key.key_id
        request = waiting.request
        signed = rfc8785.dumps(
            {
                "saga_id": SAGA,
                "request_id": request.request_id,
                "input_sha256": request.input_sha256,
                "approver": "bob",
                "call_id": request.call_id,
                "tool_name": request.tool_name,
                "request_seq": request.seq,
                "justification": None,
                "version": 3,
                "via": "python",
            }
        )
        assert payload["signature_version"] == 3
        assert signed == signed_bytes(
            SAGA,
            request.request_id,
            request.input_sha256,
            "bob",
            call_id=request.call_id,
            tool_name=request.tool_name,
            request_seq=request.seq,
            version=3,
            via="python",
        )
        key.public.key.verify(bytes.fromhex(payload["signature"]), signed)  # raises if wrong
        (shown,) = worker.pending(SAGA)
        assert [(a.approver, a.key_id) for a in shown.approvals] == [("bob", key.key_id)]
        result = worker.resume_saga(SAGA)
        assert (result.outcome, waiting.treasury.calls["wire"]) == (SagaOutcome.COMPLETED, 1)

    def test_an_inserted_unsigned_row_approves_nothing(
        self, open_sagacity: OpenSagacity, key: PrivateKey
    ) -> None:
        """A correctly hashed APPROVED with no signature is refused; a signed one then runs."""
        worker, approver = worker_and_approver(open_sagacity, key)
        waiting = waiting_saga(worker)
        inject_approval(worker, waiting.request, "bob")
        with pytest.raises(ApprovalSignatureError, match="carries no signature") as refused:
            worker.resume_saga(SAGA)
        assert refused.value.status_code == 403
        assert waiting.treasury.calls["wire"] == 0
        assert [r.state for r in worker.pending(SAGA)] == ["waiting"]
        # The forged 'bob' does not count, so the real bob may still approve.
        approver.approve(SAGA, approver="bob")
        assert worker.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        assert waiting.treasury.calls["wire"] == 1

    def test_a_forged_signature_is_refused(
        self, open_sagacity: OpenSagacity, key: PrivateKey
    ) -> None:
        """A signature by another key, filed under the trusted key's id, does not verify."""
        worker, _ = worker_and_approver(open_sagacity, key)
        waiting = waiting_saga(worker)
        forger = generate_key()
        request = waiting.request
        forged = forger.sign(signed_bytes_of(request, "bob"))
        inject_approval(worker, request, "bob", signature=forged, key_id=key.key_id)
        with pytest.raises(ApprovalSignatureError, match="does not verify"):
            worker.resume_saga(SAGA)
        assert waiting.treasury.calls["wire"] == 0

    def test_a_signature_copied_to_another_approver_is_refused(
        self, open_sagacity: OpenSagacity, key: PrivateKey
    ) -> None:
        """Bob's real signature pasted into a row naming 'carol' does not make carol approve."""
        worker, approver = worker_and_approver(open_sagacity, key)
        waiting = waiting_saga(worker, wire="big_wire")
        real = approver.approve(SAGA, approver="bob").payload
        inject_approval(
            worker, waiting.request, "carol", signature=real["signature"], key_id=real["key_id"]
        )
        with pytest.raises(ApprovalSignatureError, match="1 of 2 approvals"):
            worker.resume_saga(SAGA)
        assert waiting.treasury.calls["big_wire"] == 0

    def test_a_signature_replayed_onto_a_later_call_is_refused(self, key: PrivateKey) -> None:
        """Bob's signature copied onto a request forged for a later call runs nothing.

        The forger has database access and no key: when the agent wires the same amount
        again, they journal a request for that call under the first request's id, with its
        input and hash, store it, and paste bob's signed APPROVED under it.
        """
        journal, store = InMemoryJournal(), InMemoryApprovalStore()
        worker = Sagacity(
            journal, store, approval_public_keys=[key.public], require_signed_approvals=True
        )
        approver = Sagacity(journal, store, approval_signing_key=key)
        wired: list[str] = []

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(amount: str) -> str:
            wired.append(amount)
            return f"w{len(wired)}"

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def notify(text: str) -> str:
            return "sent"

        tools = worker.wrap(wire, notify)
        approver.wrap(wire, notify)

        def work() -> object:
            for call, argument in ((tools[0], "10"), (tools[1], "paid"), (tools[0], "10")):
                out = call(argument)
                if str(out).startswith("[AWAITING"):
                    return out  # paused: waits for a human
            return "done"

        (first,) = worker.saga(SAGA, work).pending
        signed = approver.approve(SAGA, approver="bob")
        assert worker.resume_saga(SAGA, work).outcome is SagaOutcome.AWAITING_APPROVAL
        assert wired == ["10"]
        forged = journal.append(
            SAGA,
            Phase.AWAITING_APPROVAL,
            tool_name="wire",
            call_id="wire#2",
            payload={
                "request_id": first.request_id,
                "input": first.input,
                "input_sha256": first.input_sha256,
                "reason": first.reason,
                "expires_at": None,
            },
        )
        store.save(dataclasses.replace(first, seq=forged.seq, call_id="wire#2"))
        journal.append(
            SAGA,
            Phase.APPROVED,
            tool_name="wire",
            call_id="wire#2",
            ref_seq=forged.seq,
            payload=signed.payload,
        )
        (asked,) = [r for r in worker.pending(SAGA) if r.tool_name == "notify"]
        approver.approve(SAGA, approver="bob", request_id=asked.request_id)
        with pytest.raises(ApprovalSignatureError, match="does not verify"):
            worker.resume_saga(SAGA, work)
        assert wired == ["10"]

    def test_an_unknown_key_is_refused(self, open_sagacity: OpenSagacity, key: PrivateKey) -> None:
        """An approval signed by a key the worker does not trust counts for nothing."""
        worker, _ = worker_and_approver(open_sagacity, key)
        stranger = open_sagacity(approval_signing_key=generate_key())
        waiting = waiting_saga(worker)
        stranger.approve(SAGA, approver="bob")
        with pytest.raises(ApprovalSignatureError, match="not one of the trusted keys"):
            worker.resume_saga(SAGA)
        assert waiting.treasury.calls["wire"] == 0

    def test_an_approver_without_the_key_cannot_approve(
        self, open_sagacity: OpenSagacity, key: PrivateKey
    ) -> None:
        """Where signatures are required, approving with no signing key journals nothing."""
        worker, _ = worker_and_approver(open_sagacity, key)
        waiting_saga(worker)
        before = worker.history(SAGA)
        with pytest.raises(ConfigurationError, match="no approval_signing_key"):
            worker.approve(SAGA, approver="bob")
        assert worker.history(SAGA) == before

    def test_unsigned_approvals_count_when_not_required(self, sagacity: Sagacity) -> None:
        """Without `require_signed_approvals` an APPROVED carries no signature and counts."""
        waiting = waiting_saga(sagacity)
        entry = sagacity.approve(SAGA, approver="bob")
        assert "signature" not in entry.payload
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        assert waiting.treasury.calls["wire"] == 1

    def test_an_appended_not_started_gives_no_signed_approval_back(
        self, open_sagacity: OpenSagacity, key: PrivateKey
    ) -> None:
        """A FAILED `not_started` appended after the approved call ran does not rerun it.

        Unsigned, it could be appended by anyone with database access, who can also put
        the consumed request back in the store; under signed approvals the approval
        stays used.
        """
        worker, approver = worker_and_approver(open_sagacity, key)
        treasury = Treasury()
        tools = tools_of(worker, treasury)

        def work() -> None:
            tools["wire"](**WIRE)
            tools["big_wire"]("5000.00", "ACME")  # still waits: the saga stays open

        asked = worker.saga(SAGA, work, started_by="alice")
        assert asked.outcome is SagaOutcome.AWAITING_APPROVAL
        (wire,) = [r for r in asked.pending if r.tool_name == "wire"]
        approver.approve(SAGA, approver="bob", request_id=wire.request_id)
        with pytest.raises(ApprovalMissingError, match="big_wire"):
            worker.resume_saga(SAGA, work)  # the wire ran; big_wire still waits
        assert treasury.calls["wire"] == 1
        (intent,) = [e for e in worker.history(SAGA) if e.phase is Phase.INTENT]
        worker.journal.append(
            SAGA,
            Phase.FAILED,
            tool_name="wire",
            call_id=intent.call_id,
            ref_seq=intent.seq,
            payload={"kind": "not_started", "error": {"type": "CancelledError", "message": ""}},
        )
        worker.approval.store.save(wire)  # the store, working state, is theirs to edit too
        with pytest.raises(ApprovalAlreadyUsedError, match="not started"):
            worker.resume_saga(SAGA, work)
        assert treasury.calls["wire"] == 1


class TestSigningSettings:
    def test_requiring_signatures_with_no_key_is_refused(self) -> None:
        """No key to verify with means no approval could count: refused at construction."""
        with pytest.raises(ConfigurationError, match="require_signed_approvals=True needs"):
            Sagacity.from_url("memory://", require_signed_approvals=True)

    def test_a_key_that_is_not_a_key_is_refused(self) -> None:
        """A PEM path or bytes passed for a key is refused with what to use instead."""
        with pytest.raises(ConfigurationError, match="load_private_key"):
            Sagacity.from_url("memory://", approval_signing_key="key.pem")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match=r"approval_public_keys=\[key\]"):
            Sagacity.from_url("memory://", approval_public_keys=generate_key().public)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="load_public_key"):
            Sagacity.from_url("memory://", approval_public_keys=[b"pem"])  # type: ignore[list-item]

    def test_the_signing_key_verifies_its_own_approvals(self, key: PrivateKey) -> None:
        """One process that signs and requires signatures needs no separate public key."""
        sagacity = Sagacity.from_url(
            "memory://", approval_signing_key=key, require_signed_approvals=True
        )
        waiting = waiting_saga(sagacity)
        sagacity.approve(SAGA, approver="bob")
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        approved = [e for e in sagacity.history(SAGA) if e.phase is Phase.APPROVED]
        assert [e.payload["key_id"] for e in approved] == [key.key_id]
        assert waiting.treasury.calls["wire"] == 1
