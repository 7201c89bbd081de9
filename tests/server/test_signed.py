"""Signed approvals end to end: the server signs, resume counts only verifying signatures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity
from sagacity.approval import signed_bytes
from sagacity.audit._keys import PrivateKey, generate_key
from sagacity.server import create_app
from tests.server._bank import ALICE, OLGA, Bank, pending_one, start_wire, token_auth


@pytest.fixture
def key() -> PrivateKey:
    """The server's approval key."""
    return generate_key()


@pytest.fixture
def signed(db_url: str, bank: Bank, key: PrivateKey) -> Iterator[Sagacity]:
    """A Sagacity that signs its approvals and counts only signed ones."""
    instance = Sagacity.from_url(db_url, approval_signing_key=key, require_signed_approvals=True)
    instance.wrap(bank)
    yield instance
    instance.close()


@pytest.fixture
def signed_client(signed: Sagacity) -> Iterator[TestClient]:
    with TestClient(create_app(signed, token_auth(), ui=False)) as client:
        yield client


def test_api_approval_is_signed_and_runs(
    signed_client: TestClient, signed: Sagacity, bank: Bank, key: PrivateKey
) -> None:
    """APPROVED carries a signature over (saga, request, hash, approver, call) that verifies."""
    start_wire(signed, bank, "sig-1")
    request = pending_one(signed_client, "sig-1")
    response = signed_client.post(
        f"/sagacity/approvals/{request['request_id']}/approve",
        json={"sha256": request["input_sha256"]},
        headers=ALICE,
    )
    assert response.status_code == 200, response.text
    payload = response.json()["entry"]["payload"]
    assert payload["key_id"] == key.key_id
    data = signed_bytes(
        "sig-1",
        request["request_id"],
        request["input_sha256"],
        "alice",
        call_id=request["call_id"],
        tool_name=request["tool_name"],
        request_seq=request["seq"],
        version=3,
        via="api",
    )
    assert (payload["signature_version"], payload["via"]) == (3, "api")
    assert key.public.verify(data, payload["signature"])
    assert response.json()["request"]["approvals"][0]["key_id"] == key.key_id
    assert signed_client.post("/sagacity/sagas/sig-1/resume", headers=OLGA).status_code == 200
    assert bank.log == ["reserve sku-sig-1", "wire 100 to acct-1"]


def test_a_forged_row_approves_nothing(
    signed_client: TestClient, signed: Sagacity, bank: Bank
) -> None:
    """A database writer's hashed APPROVED row, unsigned or wrongly signed, approves nothing.

    The row is chained correctly (appended through the journal), yet resume is refused
    with 403 and the wire never runs.
    """
    start_wire(signed, bank, "sig-2")
    request = signed.pending("sig-2")[0]
    intruder = generate_key()
    for extra in (
        {},
        {"signature": "00" * 64, "key_id": "0" * 16},
        {
            "signature": intruder.sign(
                signed_bytes(
                    "sig-2",
                    request.request_id,
                    request.input_sha256,
                    "mallory",
                    call_id=request.call_id,
                    tool_name=request.tool_name,
                    request_seq=request.seq,
                )
            ),
            "key_id": intruder.key_id,
        },
    ):
        signed.journal.append(
            "sig-2",
            Phase.APPROVED,
            tool_name=request.tool_name,
            call_id=request.call_id,
            ref_seq=request.seq,
            payload={
                "request_id": request.request_id,
                "approver": "mallory",
                "input_sha256": request.input_sha256,
                **extra,
            },
        )
        shown = pending_one(signed_client, "sig-2")
        assert shown["state"] == "waiting"
        assert shown["approvals"] == []
        response = signed_client.post("/sagacity/sagas/sig-2/resume", headers=OLGA)
        assert response.status_code == 403, response.text
    assert bank.log == ["reserve sku-sig-2"]


def test_verify_names_a_forged_row(signed_client: TestClient, signed: Sagacity, bank: Bank) -> None:
    """The server's verify, under a policy requiring signatures, names an unsigned APPROVED.

    The chain's hashes are intact (the row was appended through the journal), so only the
    signature check can tell: the route reports the saga and the forged row's seq.
    """
    start_wire(signed, bank, "sig-3")
    request = signed.pending("sig-3")[0]
    forged = signed.journal.append(
        "sig-3",
        Phase.APPROVED,
        tool_name=request.tool_name,
        call_id=request.call_id,
        ref_seq=request.seq,
        payload={
            "request_id": request.request_id,
            "approver": "mallory",
            "input_sha256": request.input_sha256,
        },
    )
    report = signed_client.get("/sagacity/sagas/sig-3/verify", headers=OLGA).json()
    assert report["ok"] is False
    assert [(p["saga_id"], p["seq"]) for p in report["problems"]] == [("sig-3", forged.seq)]
