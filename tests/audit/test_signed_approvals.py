"""`verify` with approval keys: an APPROVED entry no trusted key signed is named by saga and seq."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from sagacity import Phase, Reversibility, Sagacity, compensable
from sagacity.audit import export_jsonl, generate_key, read_jsonl, verify, verify_entries
from sagacity.audit._keys import PrivateKey


class Treasury:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: str) -> str:
        """Wire money."""
        return f"wired {amount}"


@pytest.fixture(scope="module")
def key() -> PrivateKey:
    return generate_key()


@pytest.fixture
def signed(store_url: str, key: PrivateKey) -> Iterator[Sagacity]:
    """A Sagacity that signs its approvals, on each backend."""
    instance = Sagacity.from_url(store_url, approval_signing_key=key, require_signed_approvals=True)
    instance.wrap(Treasury())
    yield instance
    instance.close()


def waiting(sagacity: Sagacity, saga_id: str) -> None:
    wire = sagacity.tool("wire")
    sagacity.saga(saga_id, lambda: wire(amount="10"), started_by="alice")


def forge(sagacity: Sagacity, saga_id: str, approver: str, **signature: str) -> int:
    """A correctly chained APPROVED appended by someone with write access; its seq."""
    (request,) = sagacity.pending(saga_id)
    entry = sagacity.journal.append(
        saga_id,
        Phase.APPROVED,
        tool_name=request.tool_name,
        call_id=request.call_id,
        ref_seq=request.seq,
        payload={
            "request_id": request.request_id,
            "approver": approver,
            "input_sha256": request.input_sha256,
            **signature,
        },
    )
    return entry.seq


class TestVerifyWithApprovalKeys:
    def test_a_signed_approval_verifies(self, signed: Sagacity, key: PrivateKey) -> None:
        """A journal whose approvals were all signed with a trusted key is OK."""
        waiting(signed, "s-1")
        signed.approve("s-1", approver="bob")
        signed.resume_saga("s-1")
        report = verify(signed.journal, approval_public_keys=[key.public])
        assert (report.ok, report.entries) == (True, 5)

    def test_a_forged_approval_is_named_by_saga_and_seq(
        self, signed: Sagacity, key: PrivateKey
    ) -> None:
        """Unsigned, signed by an unknown key, or a real signature copied: each a problem."""
        waiting(signed, "s-2")
        unsigned = forge(signed, "s-2", "bob")
        intruder = generate_key()
        unknown = forge(
            signed, "s-2", "carol", signature=intruder.sign(b"x"), key_id=intruder.key_id
        )
        real = signed.approve("s-2", approver="dave").payload
        assert isinstance(real, dict)
        copied = forge(signed, "s-2", "erin", signature=real["signature"], key_id=key.key_id)
        assert verify(signed.journal).ok  # the chain alone cannot tell
        report = verify(signed.journal, approval_public_keys=[key.public])
        assert not report.ok
        assert [(p.saga_id, p.seq, p.reason) for p in report.problems] == [
            (
                "s-2",
                unsigned,
                "unsigned approval: the APPROVED entry naming approver 'bob' does not count: "
                "it carries no signature",
            ),
            (
                "s-2",
                unknown,
                "unsigned approval: the APPROVED entry naming approver 'carol' does not count: "
                f"it is signed with key {intruder.key_id!r}, which is not one of the trusted "
                "keys",
            ),
            (
                "s-2",
                copied,
                "unsigned approval: the APPROVED entry naming approver 'erin' does not count: "
                f"its signature does not verify with key {key.key_id!r}",
            ),
        ]
        # One saga: the same problems whether the whole journal or the saga is verified.
        assert verify(signed.journal, "s-2", approval_public_keys=[key.public]) == report

    def test_an_export_is_checked_the_same_way(self, signed: Sagacity, key: PrivateKey) -> None:
        """verify_entries over a JSON Lines export names the same forged approval."""
        waiting(signed, "s-3")
        seq = forge(signed, "s-3", "bob")
        out = io.StringIO()
        export_jsonl(signed.journal, out)
        entries = list(read_jsonl(io.StringIO(out.getvalue())))
        assert verify_entries(entries).ok
        (problem,) = verify_entries(entries, approval_public_keys=[key.public]).problems
        assert (problem.saga_id, problem.seq) == ("s-3", seq)
        assert problem.reason.endswith("it carries no signature")
