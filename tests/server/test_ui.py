"""The approval inbox at /sagacity/ui, through FastAPI's TestClient over a real SQLite journal."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from sagacity import Phase, Reversibility, Sagacity, compensable
from sagacity.server import Principal, TokenAuth, create_app
from sagacity.server._ui_http import security_headers
from sagacity.server._ui_inbox import pretty_json
from sagacity.server._ui_sessions import SessionStore
from sagacity.workflows import WorkflowRuntime
from tests.server._bank import Bank, start_wire
from tests.workflows._refund import REQUEST as REFUND_REQUEST
from tests.workflows._refund import Ledger, RefundRequest, RefundWorkflow

UI = "/sagacity/ui"
PRINCIPALS = {
    "tok-ada": Principal("ada", frozenset({"approver", "operator"})),
    "tok-ben": Principal("ben", frozenset({"approver"})),
    "tok-vic": Principal("vic", frozenset({"viewer"})),
    "tok-opa": Principal("opa", frozenset({"operator"})),
    "tok-evil": Principal('<img src=x onerror="alert(1)">', frozenset({"approver"})),
}
XSS_SCRIPT = "<script>window.__xss=1</script>"
XSS_IMG = '<img src=x onerror="window.__xss=1">'


@pytest.fixture
def app_client(sagacity: Sagacity) -> Iterator[TestClient]:
    """A client of the whole app (API and inbox) over `sagacity`."""
    app = create_app(sagacity, TokenAuth.from_tokens(PRINCIPALS))
    with TestClient(app) as client:
        yield client


def csrf_of(page: str) -> str:
    """The CSRF token the page's forms post."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; return the session's CSRF token."""
    form = client.get(f"{UI}/sign-in")
    assert form.status_code == 200
    response = client.post(
        f"{UI}/sign-in", data={"csrf": csrf_of(form.text), "token": token, "next": ""}
    )
    assert response.status_code == 200, response.text
    return csrf_of(response.text)


def only_request(sagacity: Sagacity, saga_id: str) -> Any:
    (request,) = sagacity.pending(saga_id)
    return request


def phases(sagacity: Sagacity, saga_id: str) -> list[str]:
    return [entry.phase.value for entry in sagacity.history(saga_id)]


class TestSignIn:
    def test_a_page_without_a_session_sends_the_browser_to_sign_in(
        self, app_client: TestClient
    ) -> None:
        """No session: the inbox answers with the sign-in page, remembering where to return."""
        response = app_client.get(f"{UI}/", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"] == f"{UI}/sign-in?next=%2Fsagacity%2Fui%2F"

    def test_the_session_cookie_is_httponly_samesite_strict_and_scoped_to_the_inbox(
        self, app_client: TestClient
    ) -> None:
        """The token is exchanged for an opaque cookie no script and no other site can use."""
        form = app_client.get(f"{UI}/sign-in")
        response = app_client.post(
            f"{UI}/sign-in",
            data={"csrf": csrf_of(form.text), "token": "tok-ada", "next": ""},
            follow_redirects=False,
        )
        assert response.status_code == 303
        assert response.headers["location"] == f"{UI}/"
        cookie = next(
            c for c in response.headers.get_list("set-cookie") if c.startswith("sagacity_session=")
        )
        flags = [part.strip().lower() for part in cookie.split(";")]
        assert "httponly" in flags
        assert "samesite=strict" in flags
        assert "path=/sagacity/ui" in flags
        assert "secure" not in flags  # plain http here; https marks it Secure (below)
        assert "tok-ada" not in cookie
        page = app_client.get(f"{UI}/")
        assert page.status_code == 200
        assert "Signed in as ada." in page.text
        assert "tok-ada" not in page.text

    def test_over_https_the_cookie_is_secure(self, sagacity: Sagacity) -> None:
        """A request that came over https gets a Secure cookie."""
        app = create_app(sagacity, TokenAuth.from_tokens(PRINCIPALS))
        with TestClient(app, base_url="https://inbox.example") as client:
            form = client.get(f"{UI}/sign-in")
            response = client.post(
                f"{UI}/sign-in",
                data={"csrf": csrf_of(form.text), "token": "tok-ada", "next": ""},
                follow_redirects=False,
            )
        cookie = next(
            c for c in response.headers.get_list("set-cookie") if c.startswith("sagacity_session=")
        )
        assert "secure" in [part.strip().lower() for part in cookie.split(";")]

    def test_an_unknown_token_signs_nobody_in(self, app_client: TestClient) -> None:
        """A wrong token gets 401 and no session cookie."""
        form = app_client.get(f"{UI}/sign-in")
        response = app_client.post(
            f"{UI}/sign-in", data={"csrf": csrf_of(form.text), "token": "tok-nobody"}
        )
        assert response.status_code == 401
        assert "That token is not known." in response.text
        assert "sagacity_session" not in response.headers.get("set-cookie", "")
        assert app_client.get(f"{UI}/", follow_redirects=False).status_code == 303

    def test_a_sign_in_post_without_the_form_nonce_is_refused(self, app_client: TestClient) -> None:
        """Login CSRF: another site cannot sign the browser in as its own principal."""
        response = app_client.post(f"{UI}/sign-in", data={"token": "tok-ada"})
        assert response.status_code == 403
        assert "sagacity_session" not in response.headers.get("set-cookie", "")

    def test_next_never_leaves_the_inbox(self, app_client: TestClient) -> None:
        """After sign-in the browser goes to a page of the inbox, never to another site."""
        for target, expected in [
            ("https://evil.example/", f"{UI}/"),
            ("//evil.example/x", f"{UI}/"),
            (f"{UI}//evil.example", f"{UI}/"),
            ("/elsewhere", f"{UI}/"),
            (f"{UI}/saga?id=a", f"{UI}/saga?id=a"),
        ]:
            app_client.cookies.clear()
            form = app_client.get(f"{UI}/sign-in")
            response = app_client.post(
                f"{UI}/sign-in",
                data={"csrf": csrf_of(form.text), "token": "tok-ada", "next": target},
                follow_redirects=False,
            )
            assert response.headers["location"] == expected, target

    def test_sign_out_ends_the_session_on_the_server(self, app_client: TestClient) -> None:
        """After sign-out the old cookie opens nothing, even if a copy of it is replayed."""
        csrf = sign_in(app_client, "tok-ada")
        cookie = app_client.cookies.get("sagacity_session")
        assert cookie
        response = app_client.post(f"{UI}/sign-out", data={"csrf": csrf}, follow_redirects=False)
        assert response.status_code == 303
        app_client.cookies.set("sagacity_session", cookie, path=UI)
        assert app_client.get(f"{UI}/", follow_redirects=False).status_code == 303

    def test_sign_in_always_issues_a_fresh_session_id(self, app_client: TestClient) -> None:
        """Session fixation: an id planted before sign-in is never the signed-in session."""
        sign_in(app_client, "tok-vic")
        planted = app_client.cookies.get("sagacity_session")
        assert planted
        sign_in(app_client, "tok-ada")
        fresh = app_client.cookies.get("sagacity_session")
        assert fresh
        assert fresh != planted
        app_client.cookies.clear()
        app_client.cookies.set("sagacity_session", planted, path=UI)
        # The planted (old) session was ended by the new sign-in.
        assert app_client.get(f"{UI}/", follow_redirects=False).status_code == 303

    def test_a_restarted_server_knows_no_old_session(self, sagacity: Sagacity) -> None:
        """Sessions live in the server's memory: another server process signs nobody in."""
        auth = TokenAuth.from_tokens(PRINCIPALS)
        with TestClient(create_app(sagacity, auth)) as first:
            sign_in(first, "tok-ada")
            cookie = first.cookies.get("sagacity_session")
        assert cookie
        with TestClient(create_app(sagacity, auth)) as second:
            second.cookies.set("sagacity_session", cookie, path=UI)
            assert second.get(f"{UI}/", follow_redirects=False).status_code == 303

    def test_an_authenticator_that_knows_the_browser_signs_it_in_without_a_token(
        self, sagacity: Sagacity
    ) -> None:
        """An SSO proxy's header is enough: the first page view opens a session."""

        def proxy_header(request: Any) -> Principal | None:
            name = request.headers.get("x-forwarded-user")
            return Principal(name, frozenset({"approver"})) if name else None

        with TestClient(create_app(sagacity, proxy_header)) as client:
            page = client.get(f"{UI}/", headers={"X-Forwarded-User": "sso-sam"})
            assert page.status_code == 200
            assert "sso-sam" in page.text
            assert client.cookies.get("sagacity_session")
            # The session now carries the principal, header or not.
            assert client.get(f"{UI}/").status_code == 200


class TestCsrf:
    @pytest.fixture
    def waiting(self, sagacity: Sagacity, bank: Bank) -> Any:
        start_wire(sagacity, bank, "csrf-1")
        return only_request(sagacity, "csrf-1")

    def form(self, waiting: Any, csrf: str | None) -> dict[str, str]:
        data = {"request_id": waiting.request_id, "sha256": waiting.input_sha256}
        if csrf is not None:
            data["csrf"] = csrf
        return data

    def test_approve_without_the_csrf_token_is_refused_and_journals_nothing(
        self, app_client: TestClient, sagacity: Sagacity, waiting: Any
    ) -> None:
        """A signed-in browser's cookie alone cannot approve: the form's token is required."""
        sign_in(app_client, "tok-ada")
        before = phases(sagacity, "csrf-1")
        response = app_client.post(f"{UI}/requests/approve", data=self.form(waiting, None))
        assert response.status_code == 403
        assert "CSRF token" in response.text
        assert phases(sagacity, "csrf-1") == before

    def test_another_sessions_token_does_not_pass(
        self, app_client: TestClient, sagacity: Sagacity, waiting: Any
    ) -> None:
        """The token is per session: one leaked from another session is refused."""
        other = sign_in(app_client, "tok-ben")
        app_client.cookies.clear()
        sign_in(app_client, "tok-ada")
        before = phases(sagacity, "csrf-1")
        response = app_client.post(f"{UI}/requests/approve", data=self.form(waiting, other))
        assert response.status_code == 403
        assert phases(sagacity, "csrf-1") == before

    @pytest.mark.parametrize(
        "headers",
        [
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
        ],
    )
    def test_a_cross_site_post_is_refused_even_with_the_token(
        self, app_client: TestClient, sagacity: Sagacity, waiting: Any, headers: dict[str, str]
    ) -> None:
        """A form another site sends is refused by its Origin / Sec-Fetch-Site."""
        csrf = sign_in(app_client, "tok-ada")
        before = phases(sagacity, "csrf-1")
        response = app_client.post(
            f"{UI}/requests/approve", data=self.form(waiting, csrf), headers=headers
        )
        assert response.status_code == 403
        assert phases(sagacity, "csrf-1") == before

    def test_a_same_origin_post_passes(
        self, app_client: TestClient, sagacity: Sagacity, waiting: Any
    ) -> None:
        """What a browser sends from the inbox itself is accepted."""
        csrf = sign_in(app_client, "tok-ada")
        response = app_client.post(
            f"{UI}/requests/approve",
            data=self.form(waiting, csrf),
            headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
        )
        assert response.status_code == 200, response.text
        assert phases(sagacity, "csrf-1")[-1] == "APPROVED"

    def test_without_a_session_a_post_is_401(
        self, app_client: TestClient, sagacity: Sagacity, waiting: Any
    ) -> None:
        """No session: refused, nothing journaled."""
        before = phases(sagacity, "csrf-1")
        response = app_client.post(f"{UI}/requests/approve", data=self.form(waiting, "x"))
        assert response.status_code == 401
        assert phases(sagacity, "csrf-1") == before


class TestRoles:
    def test_a_viewer_sees_the_request_but_cannot_approve_it(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """The viewer's page has no decision forms, and a forged post is refused (403)."""
        start_wire(sagacity, bank, "roles-1")
        waiting = only_request(sagacity, "roles-1")
        csrf = sign_in(app_client, "tok-vic")
        page = app_client.get(f"{UI}/requests/{waiting.request_id}")
        assert page.status_code == 200
        assert waiting.input_sha256 in page.text
        assert 'action="/sagacity/ui/requests/approve"' not in page.text
        before = phases(sagacity, "roles-1")
        for path, data in [
            ("requests/approve", {"request_id": waiting.request_id, "sha256": "0" * 64}),
            ("requests/reject", {"request_id": waiting.request_id, "reason": "no"}),
            ("requests/edit", {"request_id": waiting.request_id, "input": "{}"}),
            ("sagas/resume", {"saga_id": "roles-1"}),
            ("sagas/compensate", {"saga_id": "roles-1"}),
            ("sagas/resolve", {"saga_id": "roles-1", "call_id": "reserve#1", "executed": "true"}),
        ]:
            response = app_client.post(f"{UI}/{path}", data={"csrf": csrf, **data})
            assert response.status_code == 403, path
            assert "lacks the" in response.text
        assert phases(sagacity, "roles-1") == before
        assert bank.log == ["reserve sku-roles-1"]

    def test_an_approver_cannot_operate_and_an_operator_cannot_approve(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Separation of duties holds in the inbox as in the API."""
        start_wire(sagacity, bank, "roles-2")
        waiting = only_request(sagacity, "roles-2")
        csrf = sign_in(app_client, "tok-ben")
        response = app_client.post(
            f"{UI}/sagas/compensate", data={"csrf": csrf, "saga_id": "roles-2"}
        )
        assert response.status_code == 403
        app_client.cookies.clear()
        csrf = sign_in(app_client, "tok-opa")
        response = app_client.post(
            f"{UI}/requests/approve",
            data={"csrf": csrf, "request_id": waiting.request_id, "sha256": waiting.input_sha256},
        )
        assert response.status_code == 403
        assert phases(sagacity, "roles-2") == ["INTENT", "EXECUTED", "AWAITING_APPROVAL"]


class TestDecisions:
    def test_approve_binds_the_displayed_hash_and_journals_the_principal(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """The page posts the hash it showed; APPROVED names the signed-in principal only."""
        start_wire(sagacity, bank, "dec-1", amount="250.00", to="DE89")
        waiting = only_request(sagacity, "dec-1")
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/requests/{waiting.request_id}")
        shown = re.search(r'name="sha256" value="([0-9a-f]{64})"', page.text)
        assert shown is not None
        assert shown.group(1) == waiting.input_sha256
        assert str(escape(pretty_json({"amount": "250.00", "to": "DE89"}))) in page.text
        response = app_client.post(
            f"{UI}/requests/approve",
            data={
                "csrf": csrf,
                "request_id": waiting.request_id,
                "sha256": shown.group(1),
                "approver": "mallory",  # ignored: the approver is the session's principal
            },
        )
        assert response.status_code == 200
        assert "Approved by ada" in response.text
        approved = sagacity.history("dec-1")[-1]
        assert approved.phase is Phase.APPROVED
        assert approved.payload["approver"] == "ada"
        assert approved.payload["input_sha256"] == waiting.input_sha256
        # Approved, the request page offers the operator the run; running it runs the call.
        response = app_client.post(
            f"{UI}/sagas/resume",
            data={"csrf": csrf, "saga_id": "dec-1", "request_id": waiting.request_id},
        )
        assert response.status_code == 200, response.text
        assert 'id="outcome">COMPLETED' in response.text
        assert bank.log == ["reserve sku-dec-1", "wire 250.00 to DE89"]
        assert phases(sagacity, "dec-1")[-3:] == ["INTENT", "EXECUTED", "ENDED"]

    def test_a_stale_hash_is_refused_and_nothing_is_journaled(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """An approval of another input than the request's is refused by the core's check."""
        start_wire(sagacity, bank, "dec-2")
        waiting = only_request(sagacity, "dec-2")
        csrf = sign_in(app_client, "tok-ada")
        before = phases(sagacity, "dec-2")
        response = app_client.post(
            f"{UI}/requests/approve",
            data={"csrf": csrf, "request_id": waiting.request_id, "sha256": "ab" * 32},
        )
        assert response.status_code in (403, 409)
        assert "ApprovalHashMismatchError" in response.text
        assert phases(sagacity, "dec-2") == before

    def test_reject_compensates_and_journals_the_reason_and_principal(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Rejecting ends the saga compensated; REJECTED names the principal and reason."""
        start_wire(sagacity, bank, "dec-3")
        waiting = only_request(sagacity, "dec-3")
        csrf = sign_in(app_client, "tok-ben")
        response = app_client.post(
            f"{UI}/requests/reject",
            data={"csrf": csrf, "request_id": waiting.request_id, "reason": "wrong account"},
        )
        assert response.status_code == 200
        assert 'id="outcome">COMPENSATED' in response.text
        rejected = next(e for e in sagacity.history("dec-3") if e.phase is Phase.REJECTED)
        assert (rejected.payload["approver"], rejected.payload["reason"]) == (
            "ben",
            "wrong account",
        )
        assert bank.log == ["reserve sku-dec-3", "release res-sku-dec-3"]

    def test_the_principal_who_started_the_saga_cannot_approve_it(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Four eyes: no approve button for the starter, and a forced post journals nothing."""
        start_wire(sagacity, bank, "eyes-1", started_by="ada")
        waiting = only_request(sagacity, "eyes-1")
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/requests/{waiting.request_id}")
        assert "You started this saga" in page.text
        assert 'id="approve"' not in page.text
        before = phases(sagacity, "eyes-1")
        response = app_client.post(
            f"{UI}/requests/approve",
            data={"csrf": csrf, "request_id": waiting.request_id, "sha256": waiting.input_sha256},
        )
        assert response.status_code == 403
        assert "SelfApprovalError" in response.text
        assert phases(sagacity, "eyes-1") == before

    def test_two_approvers_are_needed_when_the_tool_says_so(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """1 of 2 shows progress and no run; the second approver makes it runnable."""
        start_wire(sagacity, bank, "two-1", big=True)
        waiting = only_request(sagacity, "two-1")
        form = {"request_id": waiting.request_id, "sha256": waiting.input_sha256}
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.post(f"{UI}/requests/approve", data={"csrf": csrf, **form})
        assert page.status_code == 200
        assert "1 of 2" in page.text
        assert "You approved this request already." in page.text
        assert 'id="resume"' not in page.text
        again = app_client.post(f"{UI}/requests/approve", data={"csrf": csrf, **form})
        assert again.status_code == 409  # the same principal twice counts once
        app_client.cookies.clear()
        csrf = sign_in(app_client, "tok-ben")
        assert app_client.post(f"{UI}/requests/approve", data={"csrf": csrf, **form}).is_success
        app_client.cookies.clear()
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/requests/{waiting.request_id}")
        assert "2 of 2" in page.text
        assert 'id="resume"' in page.text
        response = app_client.post(
            f"{UI}/sagas/resume", data={"csrf": csrf, "saga_id": "two-1", **form}
        )
        assert 'id="outcome">COMPLETED' in response.text
        assert bank.log[-1] == "wire_big 100 to acct-1"
        approvers = [
            e.payload["approver"] for e in sagacity.history("two-1") if e.phase is Phase.APPROVED
        ]
        assert approvers == ["ada", "ben"]

    def test_two_browsers_deciding_at_once_run_the_call_once(
        self, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Two approvers with the same page open: one approval counts, the call runs once."""
        start_wire(sagacity, bank, "race-1")
        waiting = only_request(sagacity, "race-1")
        form = {"request_id": waiting.request_id, "sha256": waiting.input_sha256}
        app = create_app(sagacity, TokenAuth.from_tokens(PRINCIPALS))
        with TestClient(app) as ada, TestClient(app) as ben:
            ada_csrf, ben_csrf = sign_in(ada, "tok-ada"), sign_in(ben, "tok-ben")
            assert ada.post(f"{UI}/requests/approve", data={"csrf": ada_csrf, **form}).is_success
            late = ben.post(f"{UI}/requests/approve", data={"csrf": ben_csrf, **form})
            assert late.status_code == 409
            resume = {"csrf": ada_csrf, "saga_id": "race-1", **form}
            assert ada.post(f"{UI}/sagas/resume", data=resume).is_success
            again = ada.post(f"{UI}/sagas/resume", data=resume)
            assert again.status_code in (404, 409)
        assert bank.log.count("wire 100 to acct-1") == 1
        assert [e.phase for e in sagacity.history("race-1")].count(Phase.APPROVED) == 1

    def test_a_page_left_open_across_an_edit_approves_nothing(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """The old page's approve names the old request and hash: refused, nothing journaled."""
        start_wire(sagacity, bank, "stale-1", amount="10", to="a")
        old = only_request(sagacity, "stale-1")
        sagacity.edit(
            "stale-1",
            approver="ben",
            request_id=old.request_id,
            new_input={"amount": "10000", "to": "a"},
        )
        csrf = sign_in(app_client, "tok-ada")
        before = phases(sagacity, "stale-1")
        response = app_client.post(
            f"{UI}/requests/approve",
            data={"csrf": csrf, "request_id": old.request_id, "sha256": old.input_sha256},
        )
        assert response.status_code == 404
        assert phases(sagacity, "stale-1") == before

    def test_an_unknown_request_is_404(self, app_client: TestClient) -> None:
        """A request page or decision for a request that does not exist says so."""
        csrf = sign_in(app_client, "tok-ada")
        assert app_client.get(f"{UI}/requests/nope").status_code == 404
        response = app_client.post(
            f"{UI}/requests/approve", data={"csrf": csrf, "request_id": "nope", "sha256": "0" * 64}
        )
        assert response.status_code == 404
        assert "nope" in response.text

    def test_edit_makes_a_new_request_that_runs_exactly_the_edited_input(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Edit journals a new request with its own hash; approved and run, it runs as edited."""
        if not hasattr(sagacity, "edit"):
            pytest.fail("Sagacity.edit is missing: the inbox's edit form needs it")
        start_wire(sagacity, bank, "dec-4", amount="900", to="acct-9")
        waiting = only_request(sagacity, "dec-4")
        csrf = sign_in(app_client, "tok-ada")
        response = app_client.post(
            f"{UI}/requests/edit",
            data={
                "csrf": csrf,
                "request_id": waiting.request_id,
                "input": '{"amount": "90", "to": "acct-9"}',
            },
        )
        assert response.status_code == 200, response.text
        edited = only_request(sagacity, "dec-4")
        assert edited.request_id != waiting.request_id
        assert edited.input == {"amount": "90", "to": "acct-9"}
        assert edited.input_sha256 in response.text
        # Another approver approves the edited request; the operator runs it.
        app_client.cookies.clear()
        csrf = sign_in(app_client, "tok-ben")
        response = app_client.post(
            f"{UI}/requests/approve",
            data={"csrf": csrf, "request_id": edited.request_id, "sha256": edited.input_sha256},
        )
        assert response.status_code == 200, response.text
        app_client.cookies.clear()
        csrf = sign_in(app_client, "tok-ada")
        response = app_client.post(
            f"{UI}/sagas/resume",
            data={"csrf": csrf, "saga_id": "dec-4", "request_id": edited.request_id},
        )
        assert response.status_code == 200, response.text
        assert bank.log[-1] == "wire 90 to acct-9"

    @pytest.mark.parametrize(
        ("text", "why"),
        [("[1, 2]", "must be a JSON object"), ("{nope", "not valid JSON"), ("NaN", "not valid")],
    )
    def test_an_edit_that_is_not_a_json_object_is_refused_naming_the_field(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank, text: str, why: str
    ) -> None:
        """Bad edit input: 422 naming the field, nothing journaled."""
        start_wire(sagacity, bank, "dec-5")
        waiting = only_request(sagacity, "dec-5")
        csrf = sign_in(app_client, "tok-ada")
        before = phases(sagacity, "dec-5")
        response = app_client.post(
            f"{UI}/requests/edit",
            data={"csrf": csrf, "request_id": waiting.request_id, "input": text},
        )
        assert response.status_code == 422
        assert "'input'" in html.unescape(response.text)
        assert why in response.text
        assert phases(sagacity, "dec-5") == before


class TestSagaPage:
    def test_an_in_doubt_call_is_resolved_by_the_operator(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """The saga page lists a call in doubt; resolving it journals the principal."""
        sagacity.journal.append(
            "doubt-1",
            Phase.INTENT,
            tool_name="reserve",
            call_id="reserve#1",
            payload={"input": {"sku": "s-1"}, "reversibility": "COMPENSATABLE"},
        )
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/saga", params={"id": "doubt-1"})
        assert page.status_code == 200
        assert "Calls in doubt" in page.text
        assert "chain verified" in page.text
        response = app_client.post(
            f"{UI}/sagas/resolve",
            data={
                "csrf": csrf,
                "saga_id": "doubt-1",
                "call_id": "reserve#1",
                "executed": "true",
                "result": '"res-s-1"',
            },
        )
        assert response.status_code == 200, response.text
        resolved = sagacity.history("doubt-1")[-1]
        assert (resolved.phase, resolved.payload) == (
            Phase.EXECUTED,
            {"result": "res-s-1", "resolved_by": "ada"},
        )
        response = app_client.post(
            f"{UI}/sagas/compensate", data={"csrf": csrf, "saga_id": "doubt-1"}
        )
        assert response.status_code == 200
        assert 'id="outcome">COMPENSATED' in response.text
        assert bank.log == ["release res-s-1"]

    def test_a_compensation_in_doubt_is_settled_by_the_operator(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """A release that started and never reported is listed; settling it is journaled."""
        call = {"tool_name": "reserve", "call_id": "reserve#1"}
        sagacity.journal.append("doubt-2", Phase.INTENT, **call, payload={"input": {"sku": "s"}})
        sagacity.journal.append(
            "doubt-2", Phase.EXECUTED, **call, ref_seq=1, payload={"result": "res-s"}
        )
        sagacity.journal.append(
            "doubt-2", Phase.COMPENSATING, **call, ref_seq=2, payload={"attempt": 1}
        )
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/saga", params={"id": "doubt-2"})
        assert "The compensation of" in page.text
        assert 'name="kind" value="compensation"' in page.text
        response = app_client.post(
            f"{UI}/sagas/resolve",
            data={
                "csrf": csrf,
                "saga_id": "doubt-2",
                "call_id": "reserve#1",
                "kind": "compensation",
                "executed": "true",
            },
        )
        assert response.status_code == 200, response.text
        settled = sagacity.history("doubt-2")[-1]
        assert (settled.phase, settled.ref_seq, settled.payload) == (
            Phase.COMPENSATED,
            2,
            {"resolved_by": "ada"},
        )
        assert "Calls in doubt" not in response.text
        assert bank.log == []  # settled by a human: the release is not called

    def test_a_tampered_request_can_be_rejected_but_not_approved(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank, db_url: str
    ) -> None:
        """A stored request whose input was edited shows the journal's, and only reject."""
        import sqlite3

        start_wire(sagacity, bank, "tamper-2", amount="10", to="acct-1")
        waiting = only_request(sagacity, "tamper-2")
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db, db:
            db.execute(
                "UPDATE sagacity_approval_request SET input = ? WHERE request_id = ?",
                ('{"amount":"10000","to":"acct-666"}', waiting.request_id),
            )
        sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/requests/{waiting.request_id}")
        assert page.status_code == 200
        assert "tampered" in page.text
        assert "acct-666" not in page.text  # the journal's input is shown, not the store's
        assert 'id="approve"' not in page.text
        assert 'id="edit"' not in page.text
        assert 'id="reject"' in page.text

    def test_an_edited_row_shows_the_chain_broken(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank, db_url: str
    ) -> None:
        """The verification badge reads the chain: an edited payload turns it red."""
        import sqlite3

        start_wire(sagacity, bank, "tamper-1")
        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("DROP TRIGGER sagacity_journal_no_update")  # as an intruder would
            db.execute(
                "UPDATE sagacity_journal SET payload = ? WHERE saga_id = ? AND seq = 2",
                ('{"result":"res-forged"}', "tamper-1"),
            )
        sign_in(app_client, "tok-vic")
        page = app_client.get(f"{UI}/saga", params={"id": "tamper-1"})
        assert page.status_code == 200
        assert "chain BROKEN at seq 2" in page.text

    def test_an_unknown_saga_is_404(self, app_client: TestClient) -> None:
        """A saga with no entries is not found, and the page says which."""
        sign_in(app_client, "tok-vic")
        response = app_client.get(f"{UI}/saga", params={"id": "ghost"})
        assert response.status_code == 404
        assert "ghost" in response.text


class TestSagasPage:
    def test_lists_filters_and_pages_the_sagas(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Every saga with its status; a status filter; a cursor to the next page."""
        start_wire(sagacity, bank, "list-a")
        sagacity.saga("list-b", lambda: sagacity.tool("reserve")(sku="b"))
        for n in range(55):
            sagacity.saga(f"list-c{n:02d}", lambda: None)
        sign_in(app_client, "tok-vic")
        page = app_client.get(f"{UI}/sagas", params={"status": "AWAITING_APPROVAL"})
        assert page.status_code == 200
        assert re.findall(r'data-saga="([^"]+)"', page.text) == ["list-a"]
        first = app_client.get(f"{UI}/sagas")
        shown = re.findall(r'data-saga="([^"]+)"', first.text)
        assert len(shown) == 50
        assert shown[:2] == ["list-a", "list-b"]
        next_url = re.search(r'href="([^"]+)" rel="next"', first.text)
        assert next_url is not None
        second = app_client.get(html.unescape(next_url.group(1)))
        rest = re.findall(r'data-saga="([^"]+)"', second.text)
        assert len(shown) + len(rest) == 57
        assert not set(shown) & set(rest)

    def test_an_unknown_status_is_refused_by_name(self, app_client: TestClient) -> None:
        """A status the journal never has: 422, naming it."""
        sign_in(app_client, "tok-vic")
        response = app_client.get(f"{UI}/sagas", params={"status": "NOPE"})
        assert response.status_code == 422
        assert "NOPE" in response.text


class TestPageErrors:
    @pytest.mark.parametrize(
        ("url", "field"),
        [
            (f"{UI}/saga?id=a%00b", "saga id"),
            (f"{UI}/saga?id=%20%20", "saga id"),
            (f"{UI}/requests/a%00b", "request id"),
            (f"{UI}/requests/%20", "request id"),
            (f"{UI}/sagas?cursor=a%00b", "cursor"),
            (f"{UI}/sagas?cursor=%20", "cursor"),
        ],
    )
    def test_a_bad_id_is_an_error_page_naming_the_field(
        self, app_client: TestClient, url: str, field: str
    ) -> None:
        """A NUL or blank id is refused as the JSON API refuses it: 422, naming the field.

        The answer is the inbox's error page with its security headers, never a 500 (a
        NUL reaching PostgreSQL fails the query).
        """
        sign_in(app_client, "tok-vic")
        response = app_client.get(url)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("text/html")
        for name, value in security_headers().items():
            assert response.headers[name] == value
        message = re.search(r'id="message">([^<]*)<', response.text)
        assert message is not None, response.text
        assert html.unescape(message.group(1)).startswith(f"{field} ")

    @pytest.mark.parametrize("page", ["/", "/requests/{request_id}", "/sagas"])
    def test_a_store_that_cannot_be_read_is_an_error_page(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank, db_url: str, page: str
    ) -> None:
        """A journal error on a page view is the error page with its status, not a bare 500.

        The page says what could not be read and carries the security headers.
        """
        import sqlite3

        start_wire(sagacity, bank, "gone-1")
        waiting = only_request(sagacity, "gone-1")
        sign_in(app_client, "tok-vic")
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db, db:
            db.execute("DROP TABLE sagacity_approval_request")
            db.execute("DROP TABLE sagacity_journal")
        response = app_client.get(UI + page.format(request_id=waiting.request_id))
        assert response.status_code == 503, response.text
        assert "<h1>JournalError</h1>" in response.text
        assert "no such table" in response.text  # what could not be read
        for name, value in security_headers().items():
            assert response.headers[name] == value

    def test_a_saga_with_an_unreadable_row_leaves_the_queue_working(
        self, app_client: TestClient, sagacity: Sagacity, bank: Bank, db_url: str
    ) -> None:
        """The queue lists a broken waiting saga beside a healthy one; its page says why.

        The broken saga's request page is a 503 error page naming the saga.
        """
        import sqlite3

        start_wire(sagacity, bank, "row-broken")
        start_wire(sagacity, bank, "row-fine")
        broken = only_request(sagacity, "row-broken")
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db, db:
            db.execute("DROP TRIGGER sagacity_journal_no_update")  # as an intruder would
            db.execute(
                "UPDATE sagacity_journal SET payload = '{not json' WHERE saga_id = 'row-broken'"
            )
        sign_in(app_client, "tok-vic")
        queue = app_client.get(f"{UI}/")
        assert queue.status_code == 200, queue.text
        assert "row-broken" in queue.text
        assert "row-fine" in queue.text
        page = app_client.get(f"{UI}/requests/{broken.request_id}")
        assert page.status_code == 503
        assert "row-broken" in page.text
        for name, value in security_headers().items():
            assert page.headers[name] == value


class TestEscaping:
    def test_hostile_payloads_ids_and_names_render_as_text(
        self, app_client: TestClient, sagacity: Sagacity
    ) -> None:
        """Whatever a model or tool wrote reaches the page escaped, in every place it shows."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def hostile(note: str, html_note: str) -> str:
            return "sent"

        (tool,) = sagacity.wrap(hostile)
        saga_id = f"saga-{XSS_IMG}"
        sagacity.saga(saga_id, lambda: tool(note=XSS_SCRIPT, html_note=XSS_IMG))
        # A tool name and an error only a raw journal writer could put there.
        sagacity.journal.append(
            saga_id,
            Phase.FAILED,
            tool_name="send_<b>bold</b>",
            call_id=XSS_SCRIPT,
            payload={"kind": "failure", "error": XSS_SCRIPT},
        )
        waiting = only_request(sagacity, saga_id)
        sign_in(app_client, "tok-evil")
        pages = [
            app_client.get(f"{UI}/"),
            app_client.get(f"{UI}/requests/{waiting.request_id}"),
            app_client.get(f"{UI}/saga", params={"id": saga_id}),
            app_client.get(f"{UI}/sagas"),
        ]
        for page in pages:
            assert page.status_code == 200
            for raw in ("<script>window", "<img src=x", "<b>bold"):
                assert raw not in page.text
            assert "&lt;img src=x onerror=" in page.text
        request_page = pages[1].text
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in request_page
        assert "send_&lt;b&gt;bold&lt;/b&gt;" in request_page
        assert "error: &lt;script&gt;" in pages[2].text
        assert "Content-Security-Policy" in pages[1].headers
        assert "script-src 'self'" in pages[1].headers["Content-Security-Policy"]

    def test_an_error_message_holding_markup_is_escaped(
        self, app_client: TestClient, sagacity: Sagacity
    ) -> None:
        """An error that quotes a hostile id is shown as text too."""
        sign_in(app_client, "tok-vic")
        response = app_client.get(f"{UI}/saga", params={"id": XSS_SCRIPT})
        assert response.status_code == 404
        assert XSS_SCRIPT not in response.text
        assert "&lt;script&gt;" in response.text

    def test_invisible_and_reordering_characters_are_shown_as_escapes(self) -> None:
        r"""A right-to-left override cannot disguise an amount: it shows as \u202e."""
        shown = pretty_json({"amount": "100\u202e00001", "tag": "a\U000e0041b", "nbsp": "1\xa0000"})
        assert "\u202e" not in shown
        assert "100\\u202e00001" in shown
        assert "a\\udb40\\udc41b" in shown
        assert "1\\u00a0000" in shown
        import json

        assert json.loads(shown) == {
            "amount": "100\u202e00001",
            "tag": "a\U000e0041b",
            "nbsp": "1\xa0000",
        }

    def test_the_timeline_summary_escapes_them_too(self) -> None:
        r"""A reason or result quoted in the timeline's one-line summary shows \u202e."""
        from sagacity.journal import GENESIS_HASH
        from sagacity.journal._entry import seal
        from sagacity.server._ui_inbox import timeline

        entry, _ = seal(
            "s",
            1,
            Phase.EXECUTED,
            tool_name="wire\u202e",
            call_id="wire#1\u202e",
            ref_seq=None,
            payload={"result": "100\u202e00001", "reason": "ok\u202eko"},
            prev_hash=GENESIS_HASH,
        )
        (row,) = timeline([entry])
        shown = f"{row.summary} {row.tool_name} {row.call_id}"
        assert "\u202e" not in shown
        assert "ok\\u202eko" in row.summary
        assert "100\\u202e00001" in row.summary
        assert (row.tool_name, row.call_id) == ("wire\\u202e", "wire#1\\u202e")


class TestSessions:
    def test_sessions_end_after_their_lifetime_and_when_idle(self) -> None:
        """A session lasts `lifetime` from sign-in and `idle` between requests."""
        now = [0.0]
        store = SessionStore(lifetime=100, idle=30, clock=lambda: now[0])
        alice = Principal("alice", frozenset({"viewer"}))
        sid, _ = store.open(alice)
        now[0] = 29
        assert store.get(sid) is not None
        now[0] = 58
        assert store.get(sid) is not None
        now[0] = 101
        assert store.get(sid) is None
        sid, _ = store.open(alice)
        now[0] = 200
        assert store.get(sid) is None

    def test_the_store_is_bounded_and_forgets_the_least_recently_used(self) -> None:
        """Opening past the limit ends the least recently used session."""
        store = SessionStore(limit=2)
        alice = Principal("alice", frozenset({"viewer"}))
        first, _ = store.open(alice)
        second, _ = store.open(alice)
        assert store.get(first) is not None  # first is now the most recently used
        store.open(alice)
        assert len(store) == 2
        assert store.get(second) is None
        assert store.get(first) is not None

    def test_a_forged_or_huge_session_id_is_nobody(self) -> None:
        """Unknown ids, empty ids and absurdly long ones open nothing."""
        store = SessionStore()
        assert store.get("") is None
        assert store.get("x" * 10_000) is None
        assert store.get("made-up") is None


class TestLiveUpdates:
    def test_the_event_stream_needs_a_session(self, app_client: TestClient) -> None:
        """Without a session the stream is refused."""
        assert app_client.get(f"{UI}/events").status_code == 401

    def test_the_stream_says_changed_when_a_request_appears(
        self, sagacity: Sagacity, bank: Bank
    ) -> None:
        """A request asked after the page was drawn makes the stream send `changed`."""
        app = create_app(sagacity, TokenAuth.from_tokens(PRINCIPALS))
        with TestClient(app) as client:
            sign_in(client, "tok-vic")
            page = client.get(f"{UI}/")
            events = re.search(r'data-events="([^"]+)"', page.text)
            assert events is not None
            start_wire(sagacity, bank, "live-1")
            with client.stream("GET", html.unescape(events.group(1))) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                lines = stream.iter_lines()
                seen = [next(lines) for _ in range(4)]
        assert "event: changed" in seen


REFUND = "refund-1"


@pytest.fixture
def refunds(sagacity: Sagacity, tmp_path: Path) -> tuple[WorkflowRuntime, Ledger]:
    """The refund workflow's runtime, built in the server's process on the served Sagacity."""
    ledger = Ledger(tmp_path / "ledger.txt")
    runtime = WorkflowRuntime(sagacity, [RefundWorkflow(ledger)])
    return runtime, ledger


def flow_of(page: str) -> list[tuple[str, str]]:
    """The stage flow a request page shows: (stage, status), in the order shown."""
    found = re.findall(
        r'data-stage="([^"]*)"><code>[^<]*</code>(?: \(gated\))?: '
        r'<span class="stage-status">([^<]*)</span>',
        page,
    )
    return [(html.unescape(name), status) for name, status in found]


class TestWorkflowGates:
    def test_a_gate_is_listed_by_workflow_and_stage_beside_a_tool_approval(
        self,
        app_client: TestClient,
        sagacity: Sagacity,
        bank: Bank,
        refunds: tuple[WorkflowRuntime, Ledger],
    ) -> None:
        """The queue shows the gate as kind gate, named by workflow and stage, not a tool."""
        start_wire(sagacity, bank, "tool-1", amount="10.00", to="FR76")
        refunds[0].start("refund-request", REFUND_REQUEST, run_id=REFUND)
        (gate,) = refunds[0].pending_gates()
        sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/").text
        rows = re.findall(r'<tr class="item[^"]*" data-request="([^"]+)">(.*?)</tr>', page, re.S)
        kinds = {rid: re.findall(r'<span class="kind">([^<]*)</span>', row) for rid, row in rows}
        assert kinds[gate.request_id] == ["gate"]
        assert kinds[only_request(sagacity, "tool-1").request_id] == ["tool"]
        (gate_row,) = [row for rid, row in rows if rid == gate.request_id]
        assert '<span class="workflow">refund-request</span>' in gate_row
        assert '<span class="stage">wire</span>' in gate_row
        assert "refund-request.wire" not in gate_row
        assert '<span class="count">2</span>' in page

    def test_the_gate_page_shows_the_run_stage_flow_in_order(
        self, app_client: TestClient, refunds: tuple[WorkflowRuntime, Ledger]
    ) -> None:
        """Each stage in order with its status; the exact value and its hash are shown."""
        refunds[0].start("refund-request", REFUND_REQUEST, run_id=REFUND)
        (gate,) = refunds[0].pending_gates()
        sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/requests/{gate.request_id}").text
        assert flow_of(page) == [
            ("reserve_funds", "done"),
            ("wire", "waiting at the gate"),
            ("notify", "not started"),
        ]
        assert 'id="run-status">PAUSED_AT_GATE' in page
        assert 'class="stage current" data-stage="wire"' in page
        assert f'name="sha256" value="{gate.input_sha256}"' in page
        assert "DE89370400440532013000" in page

    def test_approving_a_gate_journals_the_principal_and_the_shown_hash_then_resume_runs_on(
        self,
        app_client: TestClient,
        sagacity: Sagacity,
        refunds: tuple[WorkflowRuntime, Ledger],
    ) -> None:
        """The gate's approval is the core one, bound to the hash; an operator resumes the run."""
        runtime, ledger = refunds
        runtime.start("refund-request", REFUND_REQUEST, run_id=REFUND)
        (gate,) = runtime.pending_gates()
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/requests/{gate.request_id}").text
        shown = re.search(r'name="sha256" value="([0-9a-f]{64})"', page)
        assert shown is not None
        response = app_client.post(
            f"{UI}/requests/approve",
            data={"csrf": csrf, "request_id": gate.request_id, "sha256": shown.group(1)},
        )
        assert response.status_code == 200, response.text
        approved = sagacity.history(REFUND)[-1]
        assert approved.phase is Phase.APPROVED
        assert approved.payload["approver"] == "ada"
        assert approved.payload["input_sha256"] == gate.input_sha256 == shown.group(1)
        assert ("wire", "approved") in flow_of(response.text)
        assert f'action="{UI}/workflows/resume"' in response.text
        assert ledger.lines() == ["reserve A-17 120.00"]  # approving runs nothing
        response = app_client.post(f"{UI}/workflows/resume", data={"csrf": csrf, "run_id": REFUND})
        assert response.status_code == 200, response.text
        assert "Resumed by ada: COMPLETED." in response.text
        assert ledger.lines() == [
            "reserve A-17 120.00",
            "wire 120.00 to DE89370400440532013000",
            "notify wire-A-17",
        ]
        assert runtime.get(REFUND).status.value == "COMPLETED"

    def test_a_stale_hash_approves_no_gate(
        self,
        app_client: TestClient,
        sagacity: Sagacity,
        refunds: tuple[WorkflowRuntime, Ledger],
    ) -> None:
        """A hash other than the gate's journals nothing, as for a tool."""
        refunds[0].start("refund-request", REFUND_REQUEST, run_id=REFUND)
        (gate,) = refunds[0].pending_gates()
        csrf = sign_in(app_client, "tok-ada")
        before = phases(sagacity, REFUND)
        response = app_client.post(
            f"{UI}/requests/approve",
            data={"csrf": csrf, "request_id": gate.request_id, "sha256": "0" * 64},
        )
        assert response.status_code == 403, response.text
        assert "ApprovalHashMismatchError" in response.text
        assert phases(sagacity, REFUND) == before

    def test_a_gate_is_not_edited_from_the_inbox(
        self,
        app_client: TestClient,
        sagacity: Sagacity,
        refunds: tuple[WorkflowRuntime, Ledger],
    ) -> None:
        """A gate's value is the previous stage's output: no edit form, and a forged post is 409."""
        refunds[0].start("refund-request", REFUND_REQUEST, run_id=REFUND)
        (gate,) = refunds[0].pending_gates()
        csrf = sign_in(app_client, "tok-ada")
        page = app_client.get(f"{UI}/requests/{gate.request_id}").text
        assert f'action="{UI}/requests/edit"' not in page
        before = phases(sagacity, REFUND)
        response = app_client.post(
            f"{UI}/requests/edit",
            data={"csrf": csrf, "request_id": gate.request_id, "input": '{"reservation": {}}'},
        )
        assert response.status_code == 409, response.text
        assert "the gate before stage &#39;wire&#39;" in response.text
        assert phases(sagacity, REFUND) == before

    def test_without_a_runtime_the_flow_comes_from_the_journal(
        self, db_url: str, sagacity: Sagacity, refunds: tuple[WorkflowRuntime, Ledger]
    ) -> None:
        """A server with no runtime still names the gate and shows the stages reached."""
        refunds[0].start("refund-request", REFUND_REQUEST, run_id=REFUND)
        (gate,) = refunds[0].pending_gates()
        elsewhere = Sagacity.from_url(db_url)  # another process's view: no runtime on it
        try:
            app = create_app(elsewhere, TokenAuth.from_tokens(PRINCIPALS))
            with TestClient(app) as client:
                csrf = sign_in(client, "tok-ada")
                queue = client.get(f"{UI}/").text
                assert '<span class="workflow">refund-request</span>' in queue
                page = client.get(f"{UI}/requests/{gate.request_id}").text
                assert flow_of(page) == [("reserve_funds", "done"), ("wire", "waiting at the gate")]
                assert "stages not reached yet are not known here" in page
                response = client.post(
                    f"{UI}/requests/approve",
                    data={"csrf": csrf, "request_id": gate.request_id, "sha256": gate.input_sha256},
                )
                assert response.status_code == 200, response.text
                assert "continues with resume where it is registered" in response.text
                assert f'action="{UI}/workflows/resume"' not in response.text
                refused = client.post(
                    f"{UI}/workflows/resume", data={"csrf": csrf, "run_id": REFUND}
                )
                assert refused.status_code == 409
                assert "not registered in this server" in refused.text
        finally:
            elsewhere.close()
        assert sagacity.history(REFUND)[-1].payload["approver"] == "ada"
        assert refunds[0].resume(REFUND).status.value == "COMPLETED"

    def test_a_hostile_run_id_and_value_are_escaped(
        self, app_client: TestClient, refunds: tuple[WorkflowRuntime, Ledger]
    ) -> None:
        """Run ids and values come from users: the queue and the gate page show them as text."""
        hostile = RefundRequest(order_id=XSS_IMG, amount=Decimal("5"), iban=XSS_SCRIPT)
        run_id = f"run-{XSS_IMG}"
        refunds[0].start("refund-request", hostile, run_id=run_id)
        (gate,) = refunds[0].pending_gates()
        sign_in(app_client, "tok-ada")
        pages = [
            app_client.get(f"{UI}/"),
            app_client.get(f"{UI}/requests/{gate.request_id}"),
        ]
        for page in pages:
            assert page.status_code == 200
            for raw in ("<script>window", "<img src=x"):
                assert raw not in page.text
            assert "&lt;img src=x onerror=" in page.text
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in pages[1].text
        assert flow_of(pages[1].text)[1] == ("wire", "waiting at the gate")
