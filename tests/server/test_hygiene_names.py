"""Principal names the server accepts: compared as people read them, refused when invisible."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sagacity import Sagacity
from sagacity.errors import ConfigurationError
from sagacity.server import Principal, TokenAuth, create_app, hash_token
from tests.server._bank import Bank, bearer, start_wire


def _tokens_file(tmp_path: Path, *names: str) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(
        "".join(
            f'[[token]]\nsha256 = "{hash_token(f"tok-{i}")}"\n'
            f'principal = "{name}"\nroles = ["approver"]\n'
            for i, name in enumerate(names)
        ),
        encoding="utf-8",
    )
    return path


class TestTokensFile:
    def test_a_name_with_a_trailing_space_is_refused_when_loaded(self, tmp_path: Path) -> None:
        """`carol ` used to load, then fail every decision with a 500: now the file is refused."""
        path = _tokens_file(tmp_path, "alice", "carol ")
        with pytest.raises(ConfigurationError) as caught:
            TokenAuth.from_file(path)
        assert str(caught.value) == (
            f"tokens file {str(path)!r}, token #2: principal name 'carol ' is refused: "
            "it has spaces around it (give 'carol')"
        )

    @pytest.mark.parametrize(
        ("name", "code"),
        [("bob\u200b", "U+200B"), ("ali\u202ece", "U+202E"), ("eve\u2066", "U+2066")],
    )
    def test_a_name_with_an_invisible_character_is_refused(
        self, tmp_path: Path, name: str, code: str
    ) -> None:
        """Zero-width and bidi characters make a name that looks like another one."""
        expected = f"token #1: principal name .*{re.escape(code)}"
        with pytest.raises(ConfigurationError, match=expected):
            TokenAuth.from_file(_tokens_file(tmp_path, name))

    def test_two_spellings_of_one_name_are_refused(self, tmp_path: Path) -> None:
        """`sam` and `sam` with a fullwidth s would be one principal under two names."""
        with pytest.raises(ConfigurationError, match="token #2: principal '\uff53am' is the same"):
            TokenAuth.from_file(_tokens_file(tmp_path, "sam", "\uff53am"))

    def test_one_name_may_hold_two_tokens(self, tmp_path: Path) -> None:
        """Two tokens of the same principal (a rotation) still load."""
        auth = TokenAuth.from_file(_tokens_file(tmp_path, "sam", "sam"))
        assert [p.name for p in auth.principals] == ["sam", "sam"]

    def test_a_principal_object_is_held_to_the_same_rule(self) -> None:
        """An authenticator of one's own cannot build a principal with such a name either."""
        with pytest.raises(ConfigurationError, match=r"U\+200B"):
            Principal("bob\u200b", frozenset({"approver"}))


class TestFourEyesThroughTheServer:
    def test_the_starter_cannot_approve_under_a_fullwidth_spelling(
        self, db_url: str, bank: Bank
    ) -> None:
        """A saga started by `sam` is not approved by `sam` in fullwidth: 403, nothing runs."""
        sagacity = Sagacity.from_url(db_url)
        sagacity.wrap(bank)
        auth = TokenAuth.from_tokens(
            {
                "tok-sam": Principal("\uff53am", frozenset({"approver", "viewer"})),
                "tok-olga": Principal("olga", frozenset({"operator"})),
            }
        )
        try:
            start_wire(sagacity, bank, "order-1", started_by="sam")
            with TestClient(create_app(sagacity, auth, ui=False)) as client:
                request = pending_one_as(client, "order-1", bearer("tok-sam"))
                answer = client.post(
                    f"/sagacity/approvals/{request['request_id']}/approve",
                    json={"sha256": request["input_sha256"]},
                    headers=bearer("tok-sam"),
                )
                assert answer.status_code == 403, answer.text
                assert answer.json()["error"] == "SelfApprovalError"
                assert "'\uff53am' started the saga" in answer.json()["message"]
                resumed = client.post("/sagacity/sagas/order-1/resume", headers=bearer("tok-olga"))
                assert resumed.status_code == 403, resumed.text
            assert bank.log == ["reserve sku-order-1"]
        finally:
            sagacity.close()


def pending_one_as(client: TestClient, saga_id: str, headers: dict[str, str]) -> dict[str, object]:
    """The one pending request of `saga_id`, read with `headers`."""
    response = client.get("/sagacity/approvals", params={"saga_id": saga_id}, headers=headers)
    assert response.status_code == 200, response.text
    (found,) = response.json()
    return dict(found)
