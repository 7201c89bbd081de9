"""Rows edited behind sagacity's back: the API shows it, refuses on it, and loses nothing."""

from __future__ import annotations

import contextlib
import json
import sqlite3

from fastapi.testclient import TestClient

from sagacity import Sagacity
from tests.server._bank import ALICE, OLGA, VIEWER, Bank, pending_one, start_wire


def _db(db_url: str) -> str:
    return db_url[len("sqlite:///") :]


def test_an_edited_stored_request_is_shown_tampered_and_not_approvable(
    client: TestClient, sagacity: Sagacity, bank: Bank, db_url: str
) -> None:
    """An edited stored copy of a request is shown tampered and cannot be approved.

    The API shows the journal's input with state tampered and the problem; approving
    journals nothing and resuming runs nothing.
    """
    start_wire(sagacity, bank, "t-1", amount="10", to="acct-1")
    shown = pending_one(client, "t-1")
    with contextlib.closing(sqlite3.connect(_db(db_url))) as db, db:
        db.execute(
            "UPDATE sagacity_approval_request SET input = ? WHERE request_id = ?",
            (json.dumps({"amount": "10", "to": "mallory"}), shown["request_id"]),
        )
    now = pending_one(client, "t-1")
    assert now["state"] == "tampered"
    assert now["problem"]
    assert now["input"] == {"amount": "10", "to": "acct-1"}  # the journal's, not the store's
    before = len(sagacity.journal.entries("t-1"))
    response = client.post(
        f"/sagacity/approvals/{shown['request_id']}/approve",
        json={"sha256": shown["input_sha256"]},
        headers=ALICE,
    )
    assert response.status_code in (403, 409), response.text
    assert len(sagacity.journal.entries("t-1")) == before
    assert client.post("/sagacity/sagas/t-1/resume", headers=OLGA).status_code in (403, 409)
    assert bank.log == ["reserve sku-t-1"]


def test_an_unreadable_journal_row(client: TestClient, sagacity: Sagacity, db_url: str) -> None:
    """A journal row made unreadable breaks only its own saga's pages.

    The listing still answers (that saga UNREADABLE), the saga's own page is 503 naming
    it, and verify reports the row.
    """
    for saga_id in ("u-1", "u-2"):
        sagacity.saga(saga_id, lambda: sagacity.tool("reserve")(sku="x"))
    with contextlib.closing(sqlite3.connect(_db(db_url))) as db, db:
        db.execute("DROP TRIGGER sagacity_journal_no_update")  # as an intruder would
        db.execute("UPDATE sagacity_journal SET payload = '{not json' WHERE saga_id = 'u-1'")
    listed = client.get("/sagacity/sagas", headers=VIEWER)
    assert listed.status_code == 200
    statuses = {s["saga_id"]: s["status"] for s in listed.json()["sagas"]}
    assert statuses == {"u-1": "UNREADABLE", "u-2": "COMPLETED"}
    detail = client.get("/sagacity/sagas/u-1", headers=VIEWER)
    assert detail.status_code == 503
    assert detail.json()["saga_id"] == "u-1"
    assert "'u-1'" in detail.json()["message"]
    verified = client.get("/sagacity/sagas/u-1/verify", headers=VIEWER).json()
    assert verified["ok"] is False
    assert verified["problems"][0]["saga_id"] == "u-1"


def test_an_unreadable_waiting_saga_leaves_the_others_approvable(
    client: TestClient, sagacity: Sagacity, bank: Bank, db_url: str
) -> None:
    """A waiting saga with an unreadable row is listed tampered; the other one is approved.

    The approvals listing answers 200 with both requests: the broken saga's with a
    `problem` naming it and saying its journal cannot be read, the healthy one as usual,
    and approving the healthy one journals its APPROVED.
    """
    start_wire(sagacity, bank, "w-broken", amount="10", to="acct-1")
    start_wire(sagacity, bank, "w-fine", amount="20", to="acct-2")
    with contextlib.closing(sqlite3.connect(_db(db_url))) as db, db:
        db.execute("DROP TRIGGER sagacity_journal_no_update")  # as an intruder would
        db.execute(
            "UPDATE sagacity_journal SET payload = '{not json' WHERE saga_id = 'w-broken' "
            "AND seq = 1"
        )
    listed = client.get("/sagacity/approvals", headers=VIEWER)
    assert listed.status_code == 200, listed.text
    by_saga = {r["saga_id"]: r for r in listed.json()}
    assert set(by_saga) == {"w-broken", "w-fine"}
    broken, fine = by_saga["w-broken"], by_saga["w-fine"]
    assert broken["state"] == "tampered"
    assert "'w-broken'" in broken["problem"]
    assert "journal cannot be read" in broken["problem"]
    assert fine["state"] == "waiting"
    assert fine["problem"] is None
    approved = client.post(
        f"/sagacity/approvals/{fine['request_id']}/approve",
        json={"sha256": fine["input_sha256"]},
        headers=ALICE,
    )
    assert approved.status_code == 200, approved.text
    assert sagacity.journal.entries("w-fine")[-1].phase.value == "APPROVED"
    assert pending_one(client, "w-fine")["state"] == "approved"
