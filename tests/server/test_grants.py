"""The standing-approval routes: approvers grant and revoke as themselves, viewers list."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity, SagaOutcome
from tests.server._bank import ALICE, BOB, OLGA, VIEWER, Bank, start_wire

TERMS: dict[str, Any] = {
    "tool_name": "wire",
    "max_calls": 2,
    "ttl_seconds": 3600,
    "match": {"to": {"one_of": ["acct-1", "acct-2"]}},
    "reason": "payroll",
}


def _grant(client: TestClient, headers: dict[str, str], **terms: Any) -> Any:
    return client.post("/sagacity/grants", json={**TERMS, **terms}, headers=headers)


class TestGrantRoutes:
    def test_grant_cover_list_and_revoke(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """The principal is the grantor; covered wires run; the listing shows what is left."""
        made = _grant(client, BOB, grantor="mallory")
        assert made.status_code == 422  # no field of that name: the principal grants
        made = _grant(client, BOB)
        assert made.status_code == 201, made.text
        grant = made.json()
        assert (grant["grantor"], grant["state"], grant["remaining_calls"]) == ("bob", "active", 2)

        assert start_wire(sagacity, bank, "s1", to="acct-1", started_by="alice").outcome is (
            SagaOutcome.COMPLETED
        )
        assert start_wire(sagacity, bank, "s2", to="acct-9", started_by="alice").outcome is (
            SagaOutcome.AWAITING_APPROVAL
        )
        listed = client.get("/sagacity/grants", headers=VIEWER)
        assert listed.status_code == 200
        (shown,) = listed.json()
        assert (shown["used_calls"], shown["remaining_calls"]) == (1, 1)
        detail = client.get(f"/sagacity/grants/{grant['grant_id']}", headers=VIEWER).json()
        assert detail == shown

        revoked = client.post(
            f"/sagacity/grants/{grant['grant_id']}/revoke", json={"reason": "audit"}, headers=ALICE
        )
        assert revoked.status_code == 200, revoked.text
        assert (revoked.json()["state"], revoked.json()["revoked_by"]) == ("revoked", "alice")
        assert start_wire(sagacity, bank, "s3", to="acct-1", started_by="carol").outcome is (
            SagaOutcome.AWAITING_APPROVAL
        )
        chain = sagacity.history(f"grant-{grant['grant_id']}")
        assert [e.phase for e in chain] == [Phase.GRANTED, Phase.GRANT_USED, Phase.REVOKED]
        assert [e.payload["via"] for e in chain if e.phase is not Phase.GRANT_USED] == [  # type: ignore[index,call-overload]
            "api",
            "api",
        ]
        assert client.get("/sagacity/grants?state=active", headers=VIEWER).json() == []

    def test_roles(self, client: TestClient) -> None:
        """A viewer or an operator cannot grant or revoke; no token is a 401."""
        assert _grant(client, VIEWER).status_code == 403
        assert _grant(client, OLGA).status_code == 403
        assert client.post("/sagacity/grants", json=TERMS).status_code == 401
        grant_id = _grant(client, BOB).json()["grant_id"]
        revoke = client.post(f"/sagacity/grants/{grant_id}/revoke", json={}, headers=VIEWER)
        assert revoke.status_code == 403
        assert client.get("/sagacity/grants").status_code == 401

    def test_refusals_carry_their_status(self, client: TestClient) -> None:
        """Self-grant 403, bad terms 422, unknown 404, revoked twice 409."""
        self_grant = _grant(client, BOB, started_by="bob")
        assert self_grant.status_code == 403
        assert "'bob' cannot grant" in self_grant.text
        bad = _grant(client, BOB, match={"to": {"like": "acct-%"}})
        assert bad.status_code == 422
        assert "'equals', 'one_of'" in bad.text
        no_expiry = _grant(client, BOB, ttl_seconds=None)
        assert no_expiry.status_code == 422
        assert client.get("/sagacity/grants/nope", headers=VIEWER).status_code == 404
        grant_id = _grant(client, BOB).json()["grant_id"]
        first = client.post(f"/sagacity/grants/{grant_id}/revoke", json={}, headers=ALICE)
        assert first.status_code == 200
        again = client.post(f"/sagacity/grants/{grant_id}/revoke", json={}, headers=ALICE)
        assert again.status_code == 409
