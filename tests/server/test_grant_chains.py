"""The REST API and the inbox's Sagas page do not list a standing grant's chain as a saga.

A grant's chain (GRANTED, GRANT_USED…) is shown by id as a GRANT, never OPEN or stalled,
and an operator's resume or compensate of it is a 409 naming the grant.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity, SagaOutcome
from sagacity.approval._grants import StandingGrant
from sagacity.server import create_app
from tests.server._bank import OLGA, VIEWER, Bank, token_auth
from tests.server.test_ui import sign_in


def _grants(sagacity: Sagacity) -> tuple[StandingGrant, StandingGrant]:
    """A grant that covered saga w-1's wire, and one never used."""
    used = sagacity.grant("wire", grantor="carol", max_calls=3, ttl=3600)
    outcome = sagacity.saga("w-1", lambda: sagacity.tool("wire")(amount="5", to="acct-1")).outcome
    assert outcome is SagaOutcome.COMPLETED
    unused = sagacity.grant("wire", grantor="carol", max_calls=3, ttl=3600)
    assert [e.phase for e in sagacity.history(f"grant-{used.grant_id}")] == [
        Phase.GRANTED,
        Phase.GRANT_USED,
    ]
    return used, unused


class TestGrantChainsOverRest:
    def test_the_list_shows_sagas_only(self, client: TestClient, sagacity: Sagacity) -> None:
        """Every status filter, STALLED included, leaves the chains out."""
        _grants(sagacity)
        listed = client.get("/sagacity/sagas", headers=VIEWER)
        assert listed.status_code == 200, listed.text
        assert [(s["saga_id"], s["status"], s["stalled"]) for s in listed.json()["sagas"]] == [
            ("w-1", "COMPLETED", False)
        ]
        for status in ("STALLED", "OPEN"):
            page = client.get("/sagacity/sagas", params={"status": status}, headers=VIEWER)
            assert page.status_code == 200, page.text
            assert page.json() == {"sagas": [], "next_cursor": None}
        assert client.get("/sagacity/doubts", headers=VIEWER).json() == []

    def test_a_chain_by_id_is_a_grant(self, client: TestClient, sagacity: Sagacity) -> None:
        """Its detail has status GRANT and its entries; it verifies."""
        used, _ = _grants(sagacity)
        chain = f"grant-{used.grant_id}"
        detail = client.get(f"/sagacity/sagas/{chain}", headers=VIEWER)
        assert detail.status_code == 200, detail.text
        body = detail.json()
        assert body["summary"]["status"] == "GRANT"
        assert [e["phase"] for e in body["entries"]] == ["GRANTED", "GRANT_USED"]
        verified = client.get(f"/sagacity/sagas/{chain}/verify", headers=VIEWER).json()
        assert verified["ok"] is True

    def test_resume_and_compensate_are_refused(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """409 SagaStateError naming the grant; nothing is appended to its chain."""
        used, unused = _grants(sagacity)
        for grant in (used, unused):
            chain = f"grant-{grant.grant_id}"
            before = sagacity.history(chain)
            for action in ("resume", "compensate"):
                response = client.post(f"/sagacity/sagas/{chain}/{action}", headers=OLGA)
                assert response.status_code == 409, (action, response.text)
                body = response.json()
                assert body["error"] == "SagaStateError"
                assert f"is the chain of standing grant '{grant.grant_id}'" in body["message"]
            assert sagacity.history(chain) == before
        assert [g.state for g in sagacity.grants()] == ["active", "active"]


class TestGrantChainsInTheInbox:
    def test_the_sagas_page_lists_sagas_only(self, sagacity: Sagacity, bank: Bank) -> None:
        """The Sagas page, and its STALLED filter, show no grant chain."""
        used, unused = _grants(sagacity)
        app = create_app(sagacity, token_auth())
        with TestClient(app) as client:
            sign_in(client, "tok-viewer")
            for query in ("", "?status=STALLED"):
                page = client.get(f"/sagacity/ui/sagas{query}")
                assert page.status_code == 200, page.text
                assert used.grant_id not in page.text
                assert unused.grant_id not in page.text
            assert "w-1" in client.get("/sagacity/ui/sagas").text

    def test_a_chains_page_offers_no_compensation(self, sagacity: Sagacity, bank: Bank) -> None:
        """An operator sees the chain as a GRANT, verified, with no Compensate button."""
        used, _ = _grants(sagacity)
        app = create_app(sagacity, token_auth())
        with TestClient(app) as client:
            sign_in(client, "tok-olga")
            page = client.get("/sagacity/ui/saga", params={"id": f"grant-{used.grant_id}"})
            assert page.status_code == 200, page.text
            assert 'id="outcome">GRANT</span>' in page.text
            assert "chain verified: 2 entries" in page.text
            assert 'id="compensate"' not in page.text
            saga = client.get("/sagacity/ui/saga", params={"id": "w-1"})
            assert 'id="outcome">COMPLETED</span>' in saga.text
