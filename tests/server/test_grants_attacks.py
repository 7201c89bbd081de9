"""The grant routes and the inbox's Grants page against hostile and careless requests.

Bad JSON, bad fields and terms a grant cannot hold are a 4xx naming the field, never a
500, with nothing journaled. Only approvers grant and revoke; the page's forms need the
session's CSRF token and a same-site origin. A grant's reason, tool and principal names
holding markup, control or bidi characters are shown escaped by the REST API, the page
and the CLI.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sagacity import Sagacity
from sagacity.server import create_app
from tests.cli._run import run_cli
from tests.server._bank import ALICE, BOB, OLGA, VIEWER, token_auth
from tests.server.test_ui import sign_in

TERMS: dict[str, Any] = {"tool_name": "wire", "max_calls": 2, "ttl_seconds": 3600}
HOSTILE = "<script>alert(1)</script> \u202eevil\x1b[31m red"


def _post(client: TestClient, body: bytes, headers: dict[str, str] = BOB) -> Any:
    return client.post(
        "/sagacity/grants", content=body, headers={**headers, "content-type": "application/json"}
    )


class TestBadRequests:
    @pytest.mark.parametrize(
        ("body", "names"),
        [
            (b'{"tool_name": "wire", "max_calls": 2, "ttl_seconds": 3600', "JSON decode error"),
            (b"[1, 2]", "body: Input should be a valid dictionary"),
            (b'{"max_calls": 2, "ttl_seconds": 60}', "body.tool_name"),
            (b'{"tool_name": "wire", "max_calls": 2.5, "ttl_seconds": 60}', "body.max_calls"),
            (b'{"tool_name": "wire", "max_calls": 0, "ttl_seconds": 60}', "body.max_calls"),
            (b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": -1}', "body.ttl_seconds"),
            (
                b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": 60, "match": []}',
                "body.match",
            ),
            (
                b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": 60, "grantor": "mallory"}',
                "body.grantor",
            ),
            (
                b'{"tool_name": "wire", "max_calls": 1180591620717411303424, "ttl_seconds": 60}',
                "max_calls must be a whole number from 1 to 9007199254740991",
            ),
            (
                b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": 60,'
                b' "max_amount": 1000000000000000000000000000000, "amount_field": "amount"}',
                "max_amount must be a number of at least 0",
            ),
            (
                b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": 60,'
                b' "match": {"to": {"equals": 1000000000000000000000000}}}',
                "the constraint on 'to' is not JSON",
            ),
            (
                b'{"tool_name": "wire", "max_calls": 1, "expires_at": "9999-12-31T23:59:00-01:00"}',
                "expires_at 9999-12-31T23:59:00-01:00 is past the last time a journal holds",
            ),
            (
                b'{"tool_name": "wire", "max_calls": 1, "expires_at": "2099-01-01T00:00:00"}',
                "expires_at must be a timezone-aware datetime",
            ),
            (
                b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": 60,'
                b' "match": {"iban": {"equals": "X"}}}',
                "tool 'wire' has no argument 'iban' (it takes amount, to)",
            ),
            (
                b'{"tool_name": "reserve", "max_calls": 1, "ttl_seconds": 60}',
                "its calls never ask",
            ),
            (
                b'{"tool_name": "wire_big", "max_calls": 1, "ttl_seconds": 60}',
                "each call needs 2 different approvers",
            ),
        ],
    )
    def test_a_bad_grant_is_a_422_naming_what_is_wrong(
        self, client: TestClient, sagacity: Sagacity, body: bytes, names: str
    ) -> None:
        """Never a 500; nothing journaled."""
        response = _post(client, body)
        assert response.status_code == 422, response.text
        assert names in response.json()["message"]
        assert sagacity.grants() == []

    @pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity"])
    def test_a_number_the_json_parser_accepts_beyond_json_is_a_422(
        self, client: TestClient, sagacity: Sagacity, number: bytes
    ) -> None:
        """`NaN` and `Infinity` parse as floats: no grant lasts that long, or gives that much."""
        ttl = _post(
            client, b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": ' + number + b"}"
        )
        assert ttl.status_code == 422, ttl.text
        assert "ttl" in ttl.json()["message"]
        amount = _post(
            client,
            b'{"tool_name": "wire", "max_calls": 1, "ttl_seconds": 60, "amount_field": "amount", '
            b'"max_amount": ' + number + b"}",
        )
        assert amount.status_code == 422, amount.text
        assert "max_amount" in amount.json()["message"]
        assert sagacity.grants() == []

    def test_a_bad_revocation_is_a_4xx(self, client: TestClient, sagacity: Sagacity) -> None:
        """Bad JSON, an id with a control character, an unknown id."""
        grant_id = client.post("/sagacity/grants", json=TERMS, headers=BOB).json()["grant_id"]
        revoke = f"/sagacity/grants/{grant_id}/revoke"
        headers = {**ALICE, "content-type": "application/json"}
        assert client.post(revoke, content=b"{", headers=headers).status_code == 422
        assert client.post(revoke, json={"reason": 5}, headers=ALICE).status_code == 422
        assert client.post("/sagacity/grants/a%0Ab/revoke", json={}, headers=ALICE).status_code == (
            422
        )
        assert client.post("/sagacity/grants/nope/revoke", json={}, headers=ALICE).status_code == (
            404
        )
        assert sagacity.get_grant(grant_id).state == "active"


class TestWhoMayGrantAndRevoke:
    def test_only_an_approver_grants_or_revokes(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """A viewer's or operator's token is a 403, no token a 401: nothing journaled."""
        grant_id = client.post("/sagacity/grants", json=TERMS, headers=BOB).json()["grant_id"]
        revoke = f"/sagacity/grants/{grant_id}/revoke"
        for headers in (VIEWER, OLGA):
            assert client.post("/sagacity/grants", json=TERMS, headers=headers).status_code == 403
            assert client.post(revoke, json={}, headers=headers).status_code == 403
        assert client.post(revoke, json={}).status_code == 401
        bad = {"Authorization": "Bearer tok-forged"}
        assert client.post(revoke, json={}, headers=bad).status_code == 401
        (only,) = sagacity.grants()
        assert (only.grant_id, only.state) == (grant_id, "active")


def _inbox(sagacity: Sagacity, token: str) -> tuple[TestClient, str]:
    client = TestClient(create_app(sagacity, token_auth()))
    client.__enter__()
    return client, sign_in(client, token)


def _main(page: str) -> str:
    found = re.search(r"<main.*?</main>", page, re.S)
    return found.group(0) if found else page


class TestGrantsPage:
    def test_forms_need_the_csrf_token_a_same_site_origin_and_an_approver(
        self, sagacity: Sagacity
    ) -> None:
        """Without them a grant or a revocation is a 403 and nothing is journaled."""
        form = {"tool_name": "wire", "max_calls": "2", "ttl_hours": "1"}
        bob, csrf = _inbox(sagacity, "tok-bob")
        vic, vic_csrf = _inbox(sagacity, "tok-viewer")
        try:
            grant, revoke = "/sagacity/ui/grants/grant", "/sagacity/ui/grants/revoke"
            assert bob.post(grant, data=form).status_code == 403
            assert bob.post(grant, data={**form, "csrf": "stale"}).status_code == 403
            assert bob.post(grant, data={**form, "csrf": vic_csrf}).status_code == 403
            cross = bob.post(
                grant, data={**form, "csrf": csrf}, headers={"origin": "https://evil.example"}
            )
            assert cross.status_code == 403
            assert vic.post(grant, data={**form, "csrf": vic_csrf}).status_code == 403
            assert sagacity.grants() == []

            made = bob.post(grant, data={**form, "csrf": csrf}, follow_redirects=False)
            assert made.status_code == 303, made.text
            (shown,) = sagacity.grants()
            assert bob.post(revoke, data={"grant_id": shown.grant_id}).status_code == 403
            assert (
                vic.post(revoke, data={"grant_id": shown.grant_id, "csrf": vic_csrf}).status_code
                == 403
            )
            assert sagacity.get_grant(shown.grant_id).state == "active"
        finally:
            bob.__exit__(None, None, None)
            vic.__exit__(None, None, None)

    @pytest.mark.parametrize(
        ("fields", "names"),
        [
            ({"max_calls": "abc"}, "the form field &#39;max_calls&#39; is not valid JSON"),
            ({"max_calls": "2.5"}, "give the number of calls (a whole number)"),
            ({"ttl_hours": "NaN"}, "the form field &#39;ttl_hours&#39; is not valid JSON"),
            ({"ttl_hours": "1e308"}, "is not a length of time a grant can last"),
            ({"match": "[1]"}, "the form field &#39;match&#39; must be a JSON object"),
            ({"match": "{bad"}, "the form field &#39;match&#39; is not valid JSON"),
            ({"max_amount": "1e999", "amount_field": "amount"}, "max_amount must be a number"),
            ({"max_calls": "1" + "0" * 30}, "max_calls must be a whole number from 1"),
            ({"tool_name": "reserve"}, "its calls never ask"),
        ],
    )
    def test_a_bad_form_is_a_422_naming_the_field(
        self, sagacity: Sagacity, fields: dict[str, str], names: str
    ) -> None:
        """Never a 500; nothing journaled."""
        form = {"tool_name": "wire", "max_calls": "2", "ttl_hours": "1"}
        bob, csrf = _inbox(sagacity, "tok-bob")
        try:
            response = bob.post("/sagacity/ui/grants/grant", data={**form, **fields, "csrf": csrf})
        finally:
            bob.__exit__(None, None, None)
        assert response.status_code == 422, response.text
        assert names in _main(response.text)
        assert sagacity.grants() == []


class TestHostileText:
    def test_reason_and_names_are_shown_escaped_everywhere(
        self, sagacity: Sagacity, client: TestClient, db_url: str
    ) -> None:
        """Markup is text; a bidi override or an escape sequence is shown as its JSON escape."""
        made = client.post(
            "/sagacity/grants",
            json={**TERMS, "reason": HOSTILE, "match": {"to": {"equals": "\u202eacct"}}},
            headers=BOB,
        )
        assert made.status_code == 201, made.text
        raw = made.content.decode()
        assert "<script>" in made.json()["reason"]  # JSON carries the text as given
        assert "\x1b" not in raw  # control characters are JSON escapes

        bob, _ = _inbox(sagacity, "tok-viewer")
        try:
            page = bob.get("/sagacity/ui/grants").text
        finally:
            bob.__exit__(None, None, None)
        main = _main(page)
        assert "<script>alert" not in main
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in main
        assert "\u202e" not in main
        assert "\x1b" not in main
        assert "\\u202eevil\\u001b[31m red" in main
        assert "to = &#34;\\u202eacct&#34;" in main or 'to = "\\u202eacct"' in main

        listed = run_cli("grants", "--database", db_url)
        assert listed.returncode == 0, listed.stderr
        assert "\u202e" not in listed.stdout
        assert "\x1b" not in listed.stdout
        assert 'to = "\\u202eacct"' in listed.stdout


class TestSagaCalledGrant:
    def test_revoking_an_applications_saga_called_grant_is_a_404(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """Saga `grant-abc` is the application's: not a grant to show or revoke, left intact."""
        reserve = sagacity.tool("reserve")
        assert sagacity.saga("grant-abc", lambda: reserve(sku="s-1")).outcome.name == "COMPLETED"
        before = sagacity.history("grant-abc")
        assert client.get("/sagacity/grants/abc", headers=VIEWER).status_code == 404
        revoked = client.post("/sagacity/grants/abc/revoke", json={}, headers=ALICE)
        assert revoked.status_code == 404
        assert "is a saga, not a grant's chain" in revoked.json()["message"]
        assert sagacity.history("grant-abc") == before


class TestWhyACallRanUnasked:
    def test_the_saga_shows_the_grant_and_use_that_covered_its_call(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """GET /sagas/{id} and the inbox's saga page carry the INTENT's approval_grant."""
        grant_id = client.post("/sagacity/grants", json=TERMS, headers=BOB).json()["grant_id"]
        wire = sagacity.tool("wire")
        outcome = sagacity.saga("w-1", lambda: wire(amount="5", to="acct-1"), started_by="alice")
        assert outcome.outcome.name == "COMPLETED"

        saga = client.get("/sagacity/sagas/w-1", headers=VIEWER).json()
        (intent,) = [e for e in saga["entries"] if e["phase"] == "INTENT"]
        covered = intent["payload"]["approval_grant"]
        assert (covered["grant_id"], covered["grantor"], covered["use"], covered["grant_seq"]) == (
            grant_id,
            "bob",
            1,
            2,
        )
        viewer, _ = _inbox(sagacity, "tok-viewer")
        try:
            page = viewer.get("/sagacity/ui/saga", params={"id": "w-1"}).text
        finally:
            viewer.__exit__(None, None, None)
        assert "&#34;approval_grant&#34;" in page
        assert f"&#34;grant_id&#34;: &#34;{grant_id}&#34;" in page
