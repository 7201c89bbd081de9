"""The JSON API over a real SQLite journal: sagas, approvals, decisions, operations."""

from __future__ import annotations

import hashlib

import rfc8785
from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity, SagaOutcome
from tests.server._bank import ALICE, BOB, OLGA, VIEWER, Bank, pending_one, start_wire


def _phases(sagacity: Sagacity, saga_id: str) -> list[str]:
    return [e.phase.name for e in sagacity.journal.entries(saga_id)]


class TestSagas:
    def test_list_shows_status_counts_and_times(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """A waiting saga is AWAITING_APPROVAL with one pending; a finished one COMPLETED."""
        start_wire(sagacity, bank, "s-wait")
        sagacity.saga("s-done", lambda: sagacity.tool("reserve")(sku="x"))
        response = client.get("/sagacity/sagas", headers=VIEWER)
        assert response.status_code == 200
        body = response.json()
        assert body["next_cursor"] is None
        by_id = {s["saga_id"]: s for s in body["sagas"]}
        assert list(by_id) == ["s-done", "s-wait"]
        assert by_id["s-wait"]["status"] == "AWAITING_APPROVAL"
        assert by_id["s-wait"]["pending"] == 1
        assert by_id["s-wait"]["entries"] == len(sagacity.journal.entries("s-wait"))
        assert by_id["s-done"]["status"] == "COMPLETED"
        assert by_id["s-done"]["pending"] == 0
        assert by_id["s-done"]["first_at"] <= by_id["s-done"]["last_at"]

    def test_cursor_pages_through_every_saga_once(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """Paging with limit=2 over 5 sagas yields each id once, in order, then no cursor."""
        for n in range(5):
            sagacity.saga(f"p-{n}", lambda: sagacity.tool("reserve")(sku="x"))
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
            body = client.get("/sagacity/sagas", params=params, headers=VIEWER).json()
            seen += [s["saga_id"] for s in body["sagas"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert seen == [f"p-{n}" for n in range(5)]

    def test_status_filter(self, client: TestClient, sagacity: Sagacity, bank: Bank) -> None:
        """status=AWAITING_APPROVAL lists only the waiting saga."""
        start_wire(sagacity, bank, "f-wait")
        sagacity.saga("f-done", lambda: sagacity.tool("reserve")(sku="x"))
        body = client.get(
            "/sagacity/sagas", params={"status": "AWAITING_APPROVAL"}, headers=VIEWER
        ).json()
        assert [s["saga_id"] for s in body["sagas"]] == ["f-wait"]

    def test_since_takes_rfc3339_only(self, client: TestClient, sagacity: Sagacity) -> None:
        """since= is an RFC 3339 time (any offset); a bare number or date is 422."""
        sagacity.saga("t-1", lambda: sagacity.tool("reserve")(sku="x"))
        for value, found in (("2000-01-01T00:00:00Z", ["t-1"]), ("2999-01-01T01:00:00+01:00", [])):
            body = client.get("/sagacity/sagas", params={"since": value}, headers=VIEWER).json()
            assert [s["saga_id"] for s in body["sagas"]] == found
        for bad in ("-44798", "2026-12-01", "2026-13-01T00:00:00Z", "yesterday"):
            response = client.get("/sagacity/sagas", params={"since": bad}, headers=VIEWER)
            assert response.status_code == 422, bad
            assert "RFC 3339" in response.json()["message"]

    def test_detail_and_verify(self, client: TestClient, sagacity: Sagacity, bank: Bank) -> None:
        """The detail holds every journal entry with its hash; verify says ok."""
        start_wire(sagacity, bank, "d-1")
        detail = client.get("/sagacity/sagas/d-1", headers=VIEWER).json()
        assert [e["phase"] for e in detail["entries"]] == _phases(sagacity, "d-1")
        assert detail["entries"][-1]["hash"] == sagacity.journal.entries("d-1")[-1].hash
        assert len(detail["pending"]) == 1
        verified = client.get("/sagacity/sagas/d-1/verify", headers=VIEWER).json()
        assert verified["ok"] is True
        assert verified["entries"] == len(detail["entries"])

    def test_unknown_saga_is_404_naming_it(self, client: TestClient) -> None:
        """An unknown saga id is 404 with the JSON error body naming the saga."""
        for path in ("/sagacity/sagas/nope", "/sagacity/sagas/nope/verify"):
            response = client.get(path, headers=VIEWER)
            assert response.status_code == 404
            body = response.json()
            assert body["error"] == "SagaNotFoundError"
            assert body["saga_id"] == "nope"
            assert "'nope'" in body["message"]

    def test_unprintable_saga_id_is_422(self, client: TestClient) -> None:
        """A saga id holding a control character is refused with 422, not passed to SQL."""
        response = client.get("/sagacity/sagas/a%00b", headers=VIEWER)
        assert response.status_code == 422
        body = response.json()
        assert body["error"] == "ValidationError"
        assert body["saga_id"] == "a\x00b"
        assert body["detail"][0]["loc"] == ["path", "saga_id"]


class TestApprove:
    def test_approve_then_resume_runs_the_wire_once(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Approve with the shown hash → APPROVED by the principal; resume runs the tool."""
        start_wire(sagacity, bank, "a-1", amount="250")
        request = pending_one(client, "a-1")
        assert request["input"] == {"amount": "250", "to": "acct-1"}
        expected = hashlib.sha256(rfc8785.dumps(request["input"])).hexdigest()
        assert request["input_sha256"] == expected
        response = client.post(
            f"/sagacity/approvals/{request['request_id']}/approve",
            json={"sha256": request["input_sha256"]},
            headers=ALICE,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["ready"] is True
        assert body["entry"]["phase"] == "APPROVED"
        assert body["entry"]["payload"]["approver"] == "alice"
        resumed = client.post("/sagacity/sagas/a-1/resume", headers=OLGA)
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["outcome"] == "COMPLETED"
        assert bank.log == ["reserve sku-a-1", "wire 250 to acct-1"]

    def test_body_approver_is_ignored(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """An "approver" in the body is not journaled: the principal is."""
        start_wire(sagacity, bank, "a-2")
        request = pending_one(client, "a-2")
        response = client.post(
            f"/sagacity/approvals/{request['request_id']}/approve",
            json={"sha256": request["input_sha256"], "approver": "the-ceo"},
            headers=BOB,
        )
        assert response.status_code == 200
        approved = [e for e in sagacity.journal.entries("a-2") if e.phase is Phase.APPROVED]
        assert len(approved) == 1
        assert isinstance(approved[0].payload, dict)
        assert approved[0].payload["approver"] == "bob"
        assert "the-ceo" not in str(approved[0].payload)

    def test_stale_hash_is_409_and_journals_nothing(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """A hash that is not the request's → 409 naming the request; no APPROVED written."""
        start_wire(sagacity, bank, "a-3")
        request = pending_one(client, "a-3")
        before = _phases(sagacity, "a-3")
        response = client.post(
            f"/sagacity/approvals/{request['request_id']}/approve",
            json={"sha256": "0" * 64},
            headers=ALICE,
        )
        assert response.status_code == 409
        body = response.json()
        assert body["error"] == "ApprovalHashMismatchError"
        assert body["request_id"] == request["request_id"]
        assert _phases(sagacity, "a-3") == before

    def test_missing_or_malformed_hash_is_422(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """The sha256 is required and must be 64 lowercase hex digits."""
        start_wire(sagacity, bank, "a-4")
        request_id = pending_one(client, "a-4")["request_id"]
        for body in ({}, {"sha256": "xyz"}, {"sha256": "A" * 64}):
            response = client.post(
                f"/sagacity/approvals/{request_id}/approve", json=body, headers=ALICE
            )
            assert response.status_code == 422, body
            assert response.json()["error"] == "ValidationError"

    def test_unknown_request_is_404(self, client: TestClient) -> None:
        """Approving a request id nobody asked for → 404 naming it."""
        response = client.post(
            "/sagacity/approvals/no-such/approve", json={"sha256": "a" * 64}, headers=ALICE
        )
        assert response.status_code == 404
        assert response.json()["request_id"] == "no-such"

    def test_second_approval_by_same_principal_is_409(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Approving twice as one principal is a conflict, and writes one APPROVED only."""
        start_wire(sagacity, bank, "a-5")
        request = pending_one(client, "a-5")
        url = f"/sagacity/approvals/{request['request_id']}/approve"
        body = {"sha256": request["input_sha256"]}
        assert client.post(url, json=body, headers=ALICE).status_code == 200
        again = client.post(url, json=body, headers=ALICE)
        assert again.status_code == 409
        assert _phases(sagacity, "a-5").count("APPROVED") == 1


class TestFourEyes:
    def test_starter_cannot_approve_own_saga(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """A saga started by alice cannot be approved by alice (403); bob can."""
        start_wire(sagacity, bank, "e-1", started_by="alice")
        request = pending_one(client, "e-1")
        assert request["started_by"] == "alice"
        url = f"/sagacity/approvals/{request['request_id']}/approve"
        body = {"sha256": request["input_sha256"]}
        own = client.post(url, json=body, headers=ALICE)
        assert own.status_code == 403
        assert own.json()["error"] == "SelfApprovalError"
        assert "APPROVED" not in _phases(sagacity, "e-1")
        assert client.post(url, json=body, headers=BOB).status_code == 200

    def test_two_approvers_needed(self, client: TestClient, sagacity: Sagacity, bank: Bank) -> None:
        """wire_big needs two principals: after one, resume refuses; after two, it runs."""
        start_wire(sagacity, bank, "e-2", big=True)
        request = pending_one(client, "e-2")
        assert request["approvers_required"] == 2
        url = f"/sagacity/approvals/{request['request_id']}/approve"
        body = {"sha256": request["input_sha256"]}
        first = client.post(url, json=body, headers=ALICE).json()
        assert first["ready"] is False
        assert [a["approver"] for a in first["request"]["approvals"]] == ["alice"]
        early = client.post("/sagacity/sagas/e-2/resume", headers=OLGA)
        assert early.status_code == 403, early.text
        assert bank.log == ["reserve sku-e-2"]
        second = client.post(url, json=body, headers=BOB).json()
        assert second["ready"] is True
        done = client.post("/sagacity/sagas/e-2/resume", headers=OLGA)
        assert done.status_code == 200, done.text
        assert bank.log == ["reserve sku-e-2", "wire_big 100 to acct-1"]


class TestRejectAndEdit:
    def test_reject_compensates_and_journals_the_principal(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Reject → REJECTED by the principal with the reason; the reservation is released."""
        start_wire(sagacity, bank, "r-1")
        request_id = pending_one(client, "r-1")["request_id"]
        response = client.post(
            f"/sagacity/approvals/{request_id}/reject",
            json={"reason": "wrong account", "approver": "mallory"},
            headers=BOB,
        )
        assert response.status_code == 200, response.text
        assert response.json()["outcome"] == SagaOutcome.COMPENSATED.value
        rejected = [e for e in sagacity.journal.entries("r-1") if e.phase is Phase.REJECTED]
        assert isinstance(rejected[0].payload, dict)
        assert rejected[0].payload["approver"] == "bob"
        assert rejected[0].payload["reason"] == "wrong account"
        assert bank.log == ["reserve sku-r-1", "release res-sku-r-1"]

    def test_reject_needs_a_reason(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """An empty reason is 422 and nothing is journaled."""
        start_wire(sagacity, bank, "r-2")
        request_id = pending_one(client, "r-2")["request_id"]
        before = _phases(sagacity, "r-2")
        response = client.post(
            f"/sagacity/approvals/{request_id}/reject", json={"reason": ""}, headers=BOB
        )
        assert response.status_code == 422
        assert _phases(sagacity, "r-2") == before

    def test_edit_makes_a_new_hash_which_must_be_approved(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Edit → a new request with the new input's hash; approving it runs exactly that."""
        start_wire(sagacity, bank, "r-3", amount="9000")
        old = pending_one(client, "r-3")
        edited = client.post(
            f"/sagacity/approvals/{old['request_id']}/edit",
            json={"sha256": old["input_sha256"], "input": {"amount": "90", "to": "acct-1"}},
            headers=ALICE,
        )
        assert edited.status_code == 200, edited.text
        new = edited.json()
        assert new["request_id"] != old["request_id"]
        assert new["input"] == {"amount": "90", "to": "acct-1"}
        assert new["input_sha256"] == hashlib.sha256(rfc8785.dumps(new["input"])).hexdigest()
        assert new["edited_by"] == "alice"
        assert pending_one(client, "r-3")["request_id"] == new["request_id"]
        stale = client.post(
            f"/sagacity/approvals/{old['request_id']}/approve",
            json={"sha256": old["input_sha256"]},
            headers=BOB,
        )
        assert stale.status_code == 404
        approved = client.post(
            f"/sagacity/approvals/{new['request_id']}/approve",
            json={"sha256": new["input_sha256"]},
            headers=BOB,
        )
        assert approved.status_code == 200, approved.text
        assert client.post("/sagacity/sagas/r-3/resume", headers=OLGA).status_code == 200
        assert bank.log == ["reserve sku-r-3", "wire 90 to acct-1"]

    def test_edit_to_arguments_the_tool_does_not_take_is_422(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """An edited input that does not fit the tool's signature is refused; nothing changes."""
        start_wire(sagacity, bank, "r-5")
        old = pending_one(client, "r-5")
        before = _phases(sagacity, "r-5")
        response = client.post(
            f"/sagacity/approvals/{old['request_id']}/edit",
            json={"sha256": old["input_sha256"], "input": {"amount": "1", "iban": "x"}},
            headers=ALICE,
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "ApprovalInputError"
        assert _phases(sagacity, "r-5") == before
        assert pending_one(client, "r-5")["request_id"] == old["request_id"]

    def test_edit_of_a_changed_request_is_409(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Editing with a hash that is not the request's is refused; nothing is journaled."""
        start_wire(sagacity, bank, "r-4")
        old = pending_one(client, "r-4")
        before = _phases(sagacity, "r-4")
        response = client.post(
            f"/sagacity/approvals/{old['request_id']}/edit",
            json={"sha256": "1" * 64, "input": {"amount": "1", "to": "x"}},
            headers=ALICE,
        )
        assert response.status_code == 409
        assert _phases(sagacity, "r-4") == before


class TestOperations:
    def test_resume_where_the_tool_is_not_wrapped_is_409(
        self, sagacity: Sagacity, bank: Bank, db_url: str
    ) -> None:
        """A server whose Sagacity does not wrap the tool answers 409 saying where to resume."""
        from sagacity.server import create_app
        from tests.server._bank import token_auth

        start_wire(sagacity, bank, "o-1")
        request = sagacity.pending("o-1")[0]
        sagacity.approve("o-1", approver="alice", expected_sha256=request.input_sha256)
        bare = Sagacity.from_url(db_url)
        try:
            with TestClient(create_app(bare, token_auth(), ui=False)) as other:
                response = other.post("/sagacity/sagas/o-1/resume", headers=OLGA)
        finally:
            bare.close()
        assert response.status_code == 409
        assert "where the tool is wrapped" in response.json()["message"]
        assert "'wire'" in response.json()["message"]
        assert bank.log == ["reserve sku-o-1"]

    def test_compensate_a_waiting_saga(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Compensating a saga that waits for approval abandons it and undoes the reserve."""
        start_wire(sagacity, bank, "o-2")
        response = client.post("/sagacity/sagas/o-2/compensate", headers=OLGA)
        assert response.status_code == 200, response.text
        assert response.json()["outcome"] == "COMPENSATED"
        assert bank.log == ["reserve sku-o-2", "release res-sku-o-2"]

    def test_doubts_and_resolve(self, client: TestClient, sagacity: Sagacity) -> None:
        """An INTENT with no outcome is listed in doubt; resolving it journals the principal."""
        sagacity.journal.append(
            "o-3", Phase.INTENT, tool_name="reserve", call_id="c-1", payload={"input": {}}
        )
        doubts = client.get("/sagacity/doubts", headers=VIEWER).json()
        assert [(d["saga_id"], d["call_id"], d["kind"]) for d in doubts] == [("o-3", "c-1", "call")]
        response = client.post(
            "/sagacity/sagas/o-3/calls/c-1/resolve",
            json={"executed": True, "result": "res-9", "by": "someone-else"},
            headers=OLGA,
        )
        assert response.status_code == 200, response.text
        entry = response.json()
        assert entry["phase"] == "EXECUTED"
        assert entry["payload"] == {"result": "res-9", "resolved_by": "olga"}
        assert client.get("/sagacity/doubts", headers=VIEWER).json() == []

    def test_resolve_a_call_not_in_doubt_is_409(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """Resolving a call that is not in doubt → 409 naming the saga."""
        sagacity.saga("o-4", lambda: sagacity.tool("reserve")(sku="x"))
        call_id = sagacity.journal.entries("o-4")[0].call_id
        assert call_id == "reserve#1"
        response = client.post(
            "/sagacity/sagas/o-4/calls/reserve%231/resolve", json={"executed": False}, headers=OLGA
        )
        assert response.status_code == 409
        assert response.json()["saga_id"] == "o-4"


def test_ids_with_slashes_and_hashes(client: TestClient, sagacity: Sagacity) -> None:
    """A saga id holding '/' and a call id holding '#' reach their routes, percent-encoded."""
    sagacity.journal.append(
        "team/a#1", Phase.INTENT, tool_name="reserve", call_id="x/y#2", payload={"input": {}}
    )
    detail = client.get("/sagacity/sagas/team%2Fa%231", headers=VIEWER)
    assert detail.status_code == 200, detail.text
    assert detail.json()["summary"]["saga_id"] == "team/a#1"
    verified = client.get("/sagacity/sagas/team%2Fa%231/verify", headers=VIEWER)
    assert verified.json()["ok"] is True
    resolved = client.post(
        "/sagacity/sagas/team%2Fa%231/calls/x%2Fy%232/resolve",
        json={"executed": False},
        headers=OLGA,
    )
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["payload"]["resolved_by"] == "olga"


def test_health_needs_no_token(client: TestClient) -> None:
    """The health check answers without credentials."""
    response = client.get("/sagacity/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_a_path_no_route_matches_answers_the_same_json(client: TestClient) -> None:
    """create_app answers an unknown path with the routes' error shape."""
    response = client.get("/sagacity/no-such-thing", headers=VIEWER)
    assert response.status_code == 404
    assert response.json() == {"error": "NotFound", "message": "Not Found"}
