"""Behind an SSO proxy, another site cannot make a signed-in browser resume or compensate.

The proxy authenticates the browser (its cookie) and tells the app who it is in a header:
any page the browser opens can make it POST to the API, and `resume` and `compensate`
need no body that would make the browser ask the API first (a CORS preflight). The API
refuses a changing request that a browser says came from another site.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from sagacity import Sagacity
from sagacity.server import Principal, create_app
from tests.server._bank import Bank, start_wire

OLGA = {"x-forwarded-user": "olga", "x-forwarded-groups": "sagacity-operator"}
ALICE = {"x-forwarded-user": "alice", "x-forwarded-groups": "sagacity-approver"}
EVIL = {"origin": "https://evil.example"}


def from_proxy(request: Request) -> Principal | None:
    """The authenticator docs/server.md shows for an SSO proxy."""
    user = request.headers.get("x-forwarded-user")
    if user is None:
        return None
    groups = request.headers.get("x-forwarded-groups", "").split(",")
    roles = {role for role in ("viewer", "approver", "operator") if f"sagacity-{role}" in groups}
    return Principal(user, frozenset(roles))


@pytest.fixture
def proxied(sagacity: Sagacity) -> Iterator[TestClient]:
    """The app behind the proxy (the test client's Host is `testserver`)."""
    with TestClient(create_app(sagacity, from_proxy, ui=False)) as client:
        yield client


def _approved(sagacity: Sagacity, bank: Bank, saga_id: str) -> None:
    start_wire(sagacity, bank, saga_id)
    sagacity.approve(saga_id, approver="alice")


class TestResume:
    @pytest.mark.parametrize(
        "site",
        [
            EVIL,
            {"origin": "null"},
            {"sec-fetch-site": "cross-site"},
            {"sec-fetch-site": "same-site"},
        ],
    )
    def test_a_page_of_another_site_cannot_resume(
        self, proxied: TestClient, sagacity: Sagacity, bank: Bank, site: dict[str, str]
    ) -> None:
        """403 and the approved call does not run."""
        _approved(sagacity, bank, "o-1")
        answer = proxied.post("/sagacity/sagas/o-1/resume", headers={**OLGA, **site})
        assert answer.status_code == 403, answer.text
        assert answer.json()["message"].startswith("refused: ")
        assert bank.log == ["reserve sku-o-1"]

    def test_its_own_origin_and_a_script_can(
        self, proxied: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Same origin (`Origin` naming the `Host`), or no browser at all: the call runs."""
        _approved(sagacity, bank, "o-2")
        same = {"origin": "http://testserver", "sec-fetch-site": "same-origin"}
        answer = proxied.post("/sagacity/sagas/o-2/resume", headers={**OLGA, **same})
        assert answer.status_code == 200, answer.text
        assert bank.log[-1] == "wire 100 to acct-1"
        _approved(sagacity, bank, "o-3")
        assert proxied.post("/sagacity/sagas/o-3/resume", headers=OLGA).status_code == 200


class TestOtherChanges:
    def test_a_page_of_another_site_cannot_compensate(
        self, proxied: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """Compensate is refused the same way: nothing is undone."""
        start_wire(sagacity, bank, "o-4")
        answer = proxied.post("/sagacity/sagas/o-4/compensate", headers={**OLGA, **EVIL})
        assert answer.status_code == 403, answer.text
        assert bank.log == ["reserve sku-o-4"]

    def test_a_page_of_another_site_cannot_approve(
        self, proxied: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """An approval is held to it too, though its JSON body already needs a preflight."""
        (request,) = start_wire(sagacity, bank, "o-5").pending
        answer = proxied.post(
            f"/sagacity/approvals/{request.request_id}/approve",
            json={"sha256": request.input_sha256},
            headers={**ALICE, **EVIL},
        )
        assert answer.status_code == 403, answer.text
        assert sagacity.pending("o-5")[0].approvals == ()

    def test_reading_from_another_site_is_not_refused(
        self, proxied: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """A GET changes nothing (and the browser keeps its answer from the other page)."""
        start_wire(sagacity, bank, "o-6")
        viewer = {"x-forwarded-user": "vic", "x-forwarded-groups": "sagacity-viewer"}
        answer = proxied.get("/sagacity/sagas/o-6", headers={**viewer, **EVIL})
        assert answer.status_code == 200, answer.text
