"""Authentication and roles: tokens files, principals, 401 and 403 on every route."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import HTTPException, Request
from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity
from sagacity.errors import ConfigurationError
from sagacity.server import Principal, TokenAuth, create_app, hash_token, new_token
from tests.server._bank import ALICE, OLGA, VIEWER, Bank, bearer, pending_one, start_wire


def _tokens_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(text, encoding="utf-8")
    return path


class TestTokensFile:
    def test_entries_are_loaded_by_hash(self, tmp_path: Path) -> None:
        """A token is found by its hash; the file holds no clear token."""
        token = new_token()
        path = _tokens_file(
            tmp_path,
            f'[[token]]\nsha256 = "{hash_token(token)}"\nprincipal = "alice"\n'
            'roles = ["approver"]\n',
        )
        auth = TokenAuth.from_file(path)
        assert token not in path.read_text()
        assert auth.principal_for(token) == Principal("alice", frozenset({"approver"}))
        assert auth.principal_for(token + "x") is None
        assert auth.principal_for("") is None

    def test_env_names_the_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a path, SAGACITY_TOKENS names the file; without it, a clear error."""
        path = _tokens_file(
            tmp_path, f'[[token]]\nsha256 = "{hash_token("t")}"\nprincipal = "p"\nroles = []\n'
        )
        monkeypatch.setenv("SAGACITY_TOKENS", str(path))
        assert TokenAuth.from_file().principals == [Principal("p", frozenset())]
        monkeypatch.delenv("SAGACITY_TOKENS")
        with pytest.raises(ConfigurationError, match="SAGACITY_TOKENS"):
            TokenAuth.from_file()

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ('[[token]]\ntoken = "secret"\nprincipal = "a"\nroles = []\n', "clear token"),
            ('[[token]]\nsha256 = "abc"\nprincipal = "a"\nroles = []\n', "64 hex"),
            (
                f'[[token]]\nsha256 = "{"a" * 64}"\nprincipal = "a"\nroles = ["admin"]\n',
                "unknown role",
            ),
            (f'[[token]]\nsha256 = "{"a" * 64}"\nroles = []\n', "principal"),
            (
                f'[[token]]\nsha256 = "{"a" * 64}"\nprincipal = "a"\nroles = []\n'
                f'[[token]]\nsha256 = "{"A" * 64}"\nprincipal = "b"\nroles = []\n',
                "twice",
            ),
            ("not toml = = =", "not TOML"),
        ],
    )
    def test_bad_files_are_refused_naming_the_entry(
        self, tmp_path: Path, text: str, message: str
    ) -> None:
        """A malformed tokens file is a ConfigurationError naming the file and the problem."""
        path = _tokens_file(tmp_path, text)
        with pytest.raises(ConfigurationError, match=message) as raised:
            TokenAuth.from_file(path)
        assert str(path) in str(raised.value)

    def test_no_auth_no_tokens_refuses_to_build_an_open_server(
        self, sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """create_app with no authenticator and no tokens file fails closed."""
        monkeypatch.delenv("SAGACITY_TOKENS", raising=False)
        with pytest.raises(ConfigurationError, match="tokens"):
            create_app(sagacity)


class TestRoles:
    def test_implications(self) -> None:
        """Approver and operator imply viewer; neither implies the other."""
        approver = Principal("a", frozenset({"approver"}))
        operator = Principal("o", frozenset({"operator"}))
        assert approver.can("viewer")
        assert approver.can("approver")
        assert not approver.can("operator")
        assert operator.can("viewer")
        assert not operator.can("approver")
        assert not Principal("v", frozenset({"viewer"})).can("approver")

    def test_unknown_role_or_blank_name(self) -> None:
        """A principal with an unknown role or no name cannot exist."""
        with pytest.raises(ConfigurationError):
            Principal("x", frozenset({"root"}))
        with pytest.raises(ConfigurationError):
            Principal("  ", frozenset())

    def test_operator_cannot_approve_and_approver_cannot_resume(
        self, client: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Separation of duties: each role is refused the other's routes with 403."""
        start_wire(sagacity, bank, "roles-1")
        request = pending_one(client, "roles-1")
        approve = client.post(
            f"/sagacity/approvals/{request['request_id']}/approve",
            json={"sha256": request["input_sha256"]},
            headers=OLGA,
        )
        assert approve.status_code == 403
        assert "'olga'" in approve.json()["message"]
        resume = client.post("/sagacity/sagas/roles-1/resume", headers=ALICE)
        assert resume.status_code == 403


def _mutations(request_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every mutating route, as (URL, valid body) for a waiting saga 'm-1'."""
    return {
        "/sagacity/approvals/{request_id}/approve": (
            f"/sagacity/approvals/{request_id}/approve",
            {"sha256": "0" * 64},
        ),
        "/sagacity/approvals/{request_id}/reject": (
            f"/sagacity/approvals/{request_id}/reject",
            {"reason": "no"},
        ),
        "/sagacity/approvals/{request_id}/edit": (
            f"/sagacity/approvals/{request_id}/edit",
            {"sha256": "0" * 64, "input": {"amount": "1", "to": "x"}},
        ),
        "/sagacity/sagas/{saga_id}/resume": ("/sagacity/sagas/m-1/resume", {}),
        "/sagacity/sagas/{saga_id}/compensate": ("/sagacity/sagas/m-1/compensate", {}),
        "/sagacity/sagas/{saga_id}/calls/{call_id}/resolve": (
            "/sagacity/sagas/m-1/calls/doubt-1/resolve",
            {"executed": False},
        ),
        "/sagacity/grants": (
            "/sagacity/grants",
            {"tool_name": "send_wire_transfer", "max_calls": 1, "ttl_seconds": 60},
        ),
        "/sagacity/grants/{grant_id}/revoke": ("/sagacity/grants/" + "0" * 32 + "/revoke", {}),
    }


def _post_routes(client: TestClient) -> set[str]:
    """The POST paths of the app's OpenAPI schema under /sagacity/."""
    paths: dict[str, dict[str, Any]] = client.get("/openapi.json").json()["paths"]
    return {path for path, ops in paths.items() if "post" in ops and path.startswith("/sagacity/")}


class TestEveryRouteNeedsAPrincipal:
    @pytest.fixture
    def waiting(self, sagacity: Sagacity, bank: Bank, client: TestClient) -> str:
        start_wire(sagacity, bank, "m-1")
        sagacity.journal.append(
            "m-1", Phase.INTENT, tool_name="reserve", call_id="doubt-1", payload={"input": {}}
        )
        return str(pending_one(client, "m-1")["request_id"])

    def test_the_list_covers_every_mutating_route(self, client: TestClient, waiting: str) -> None:
        """A new POST route must be added to this test's list (and so be tested)."""
        # The workflow gates' routes are tested with the workflow routes.
        posts = {p for p in _post_routes(client) if not p.startswith("/sagacity/workflows/")}
        assert posts == set(_mutations(waiting))

    @pytest.mark.parametrize(
        "headers",
        [
            {},
            bearer("wrong-token"),
            {"Authorization": "Basic dmljOnB3"},
            {"Authorization": "Bearer"},
        ],
        ids=["none", "unknown", "basic", "empty"],
    )
    def test_without_a_valid_token_401_and_nothing_journaled(
        self,
        client: TestClient,
        sagacity: Sagacity,
        bank: Bank,
        waiting: str,
        headers: dict[str, str],
    ) -> None:
        """No token, an unknown one or another scheme → 401 with WWW-Authenticate."""
        before = sagacity.journal.entries("m-1")
        for url, body in _mutations(waiting).values():
            response = client.post(url, json=body, headers=headers)
            assert response.status_code == 401, url
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["error"] == "Unauthorized"
        assert sagacity.journal.entries("m-1") == before
        assert bank.log == ["reserve sku-m-1"]
        assert len(sagacity.pending("m-1")) == 1

    def test_viewer_gets_403_and_nothing_journaled(
        self, client: TestClient, sagacity: Sagacity, bank: Bank, waiting: str
    ) -> None:
        """A viewer is refused every mutating route with 403; the journal is unchanged."""
        before = sagacity.journal.entries("m-1")
        for url, body in _mutations(waiting).values():
            response = client.post(url, json=body, headers=VIEWER)
            assert response.status_code == 403, url
            assert "'vic'" in response.json()["message"]
        assert sagacity.journal.entries("m-1") == before
        assert bank.log == ["reserve sku-m-1"]
        assert list(sagacity.grants()) == []  # no grant was journaled either

    def test_reads_need_a_token_too(self, client: TestClient, waiting: str) -> None:
        """Every GET route but the health check is 401 without a token."""
        for url in (
            "/sagacity/sagas",
            "/sagacity/sagas/m-1",
            "/sagacity/sagas/m-1/verify",
            "/sagacity/approvals",
            f"/sagacity/approvals/{waiting}",
            "/sagacity/doubts",
            "/sagacity/export",
            "/sagacity/events",
            "/sagacity/grants",
        ):
            assert client.get(url).status_code == 401, url


class TestPluggableAuth:
    def test_a_proxy_header_authenticator(self, sagacity: Sagacity, bank: Bank) -> None:
        """auth= maps a request to a principal: here an SSO proxy's header; its absence 401."""

        def from_proxy(request: Request) -> Principal | None:
            user = request.headers.get("x-forwarded-user")
            if user is None:
                return None
            if user == "blocked":
                raise HTTPException(403, detail="user 'blocked' is suspended")
            return Principal(user, frozenset({"approver"}))

        start_wire(sagacity, bank, "sso-1")
        with TestClient(create_app(sagacity, from_proxy, ui=False)) as client:
            request = client.get(
                "/sagacity/approvals", headers={"X-Forwarded-User": "dana"}
            ).json()[0]
            url = f"/sagacity/approvals/{request['request_id']}/approve"
            body = {"sha256": request["input_sha256"]}
            assert client.post(url, json=body).status_code == 401
            assert (
                client.post(url, json=body, headers={"X-Forwarded-User": "blocked"}).status_code
                == 403
            )
            ok = client.post(url, json=body, headers={"X-Forwarded-User": "dana"})
        assert ok.status_code == 200
        assert ok.json()["entry"]["payload"]["approver"] == "dana"

    def test_an_async_authenticator(self, sagacity: Sagacity) -> None:
        """An async authenticator is awaited."""

        async def always_vic(request: Request) -> Principal | None:
            return Principal("vic", frozenset({"viewer"}))

        with TestClient(create_app(sagacity, always_vic, ui=False)) as client:
            assert client.get("/sagacity/sagas").status_code == 200
