"""The main flow of the API over PostgreSQL: list, approve (four eyes), resume, reject."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity
from sagacity.server import create_app
from tests._postgres import postgres_url_for
from tests.server._bank import ALICE, BOB, OLGA, VIEWER, Bank, pending_one, start_wire, token_auth

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_sagacity(request: pytest.FixtureRequest, bank: Bank) -> Iterator[Sagacity]:
    """A Sagacity on a fresh PostgreSQL schema with the bank's tools wrapped."""
    for url in postgres_url_for(request):
        instance = Sagacity.from_url(url)
        instance.wrap(bank)
        yield instance
        instance.close()


@pytest.fixture
def pg_client(pg_sagacity: Sagacity) -> Iterator[TestClient]:
    with TestClient(create_app(pg_sagacity, token_auth(), ui=False)) as client:
        yield client


def test_approve_resume_and_reject(
    pg_client: TestClient, pg_sagacity: Sagacity, bank: Bank
) -> None:
    """Over Postgres the whole flow holds, as on SQLite.

    Four eyes refuses the starter, a stale hash is 409, another approver's approval runs
    the wire once, a rejection compensates, and the listing and export reflect it all.
    """
    start_wire(pg_sagacity, bank, "pg-1", amount="5", started_by="alice")
    start_wire(pg_sagacity, bank, "pg-2", amount="6")
    listed = pg_client.get(
        "/sagacity/sagas", params={"status": "AWAITING_APPROVAL"}, headers=VIEWER
    )
    assert [s["saga_id"] for s in listed.json()["sagas"]] == ["pg-1", "pg-2"]

    first = pending_one(pg_client, "pg-1")
    url = f"/sagacity/approvals/{first['request_id']}/approve"
    assert (
        pg_client.post(url, json={"sha256": first["input_sha256"]}, headers=ALICE).status_code
        == 403
    )
    assert pg_client.post(url, json={"sha256": "f" * 64}, headers=BOB).status_code == 409
    assert (
        pg_client.post(url, json={"sha256": first["input_sha256"]}, headers=BOB).status_code == 200
    )
    resumed = pg_client.post("/sagacity/sagas/pg-1/resume", headers=OLGA)
    assert resumed.json()["outcome"] == "COMPLETED"

    second = pending_one(pg_client, "pg-2")
    rejected = pg_client.post(
        f"/sagacity/approvals/{second['request_id']}/reject", json={"reason": "no"}, headers=BOB
    )
    assert rejected.json()["outcome"] == "COMPENSATED"

    assert bank.log == [
        "reserve sku-pg-1",
        "reserve sku-pg-2",
        "wire 5 to acct-1",
        "release res-sku-pg-2",
    ]
    approvers = [
        e.payload.get("approver")
        for e in pg_sagacity.journal.entries("pg-1")
        if e.phase is Phase.APPROVED and isinstance(e.payload, dict)
    ]
    assert approvers == ["bob"]
    statuses = {
        s["saga_id"]: s["status"]
        for s in pg_client.get("/sagacity/sagas", headers=VIEWER).json()["sagas"]
    }
    assert statuses == {"pg-1": "COMPLETED", "pg-2": "COMPENSATED"}
    assert pg_client.get("/sagacity/sagas/pg-1/verify", headers=VIEWER).json()["ok"] is True
    export = pg_client.get("/sagacity/export", headers=VIEWER)
    assert export.text.count("\n") == len(pg_sagacity.journal.entries("pg-1")) + len(
        pg_sagacity.journal.entries("pg-2")
    )
