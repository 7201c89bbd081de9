r"""A right-to-left override in an id or an input is shown escaped on every page and terminal.

`pay<U+202E>live-1` displays as `pay1-evil` raw: what an approver reads must be what
is stored, so every page of the inbox and `sagacity pending` show `pay\u202elive-1`.
The forms still post the exact id back, so such a saga can still be operated.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from sagacity import Sagacity
from sagacity.server import Principal, TokenAuth, create_app
from tests.cli._run import run_cli
from tests.server._bank import Bank, start_wire

UI = "/sagacity/ui"
RLO = "\u202e"
SAGA = f"pay{RLO}live-1"
SHOWN = "pay\\u202elive-1"
TO = f"acct{RLO}1-ACME"
HIDDEN = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def ui(sagacity: Sagacity, bank: Bank) -> Iterator[TestClient]:
    """The inbox over a saga whose id and input hold a right-to-left override."""
    start_wire(sagacity, bank, SAGA, to=TO)
    tokens = {"tok-ada": Principal("ada", frozenset({"approver", "operator"}))}
    with TestClient(create_app(sagacity, TokenAuth.from_tokens(tokens))) as client:
        form = client.get(f"{UI}/sign-in")
        signed = client.post(
            f"{UI}/sign-in", data={"csrf": _csrf(form.text), "token": "tok-ada", "next": ""}
        )
        assert signed.status_code == 200, signed.text
        yield client


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


class TestPages:
    def test_the_request_page_shows_the_saga_id_and_input_escaped(
        self, ui: TestClient, sagacity: Sagacity
    ) -> None:
        """Header, facts and payload: no bidi control reaches the page, the escape does."""
        (request,) = sagacity.pending(SAGA)
        page = ui.get(f"{UI}/requests/{request.request_id}")
        assert page.status_code == 200, page.text
        shown = re.sub(r'value="[^"]*"', "", page.text)  # what is posted back, below
        assert HIDDEN.search(shown) is None
        crumbs = re.search(r'<p class="crumbs">.*?</p>', page.text, re.DOTALL)
        assert crumbs is not None
        assert f">{SHOWN}</a></p>" in crumbs.group()
        assert f"<title>wire · {SHOWN}" in page.text
        assert "acct\\u202e1-ACME" in page.text

    @pytest.mark.parametrize("path", ["/", "/sagas", f"/saga?id={quote(SAGA)}"])
    def test_the_inbox_and_saga_pages_show_it_escaped(self, ui: TestClient, path: str) -> None:
        """The queue, the saga list and the saga's own page show the escape."""
        page = ui.get(f"{UI}{path}")
        assert page.status_code == 200, page.text
        assert HIDDEN.search(re.sub(r'value="[^"]*"', "", page.text)) is None
        assert SHOWN in html.unescape(page.text)

    def test_the_resume_form_posts_the_exact_id(
        self, ui: TestClient, sagacity: Sagacity, bank: Bank
    ) -> None:
        """The hidden field holds the stored id, so running the approved call still works."""
        (request,) = sagacity.pending(SAGA)
        sagacity.approve(SAGA, approver="ben")
        page = ui.get(f"{UI}/requests/{request.request_id}")
        field = re.search(r'<form[^>]*class="resume".*?</form>', page.text, re.DOTALL)
        assert field is not None, page.text
        posted = dict(re.findall(r'name="([a-z_]+)" value="([^"]*)"', field.group()))
        assert html.unescape(posted["saga_id"]) == SAGA
        done = ui.post(f"{UI}/sagas/resume", data={k: html.unescape(v) for k, v in posted.items()})
        assert 'id="outcome">COMPLETED' in done.text, done.text
        assert bank.log[-1] == f"wire 100 to {TO}"


class TestTerminal:
    def test_pending_shows_the_saga_id_and_input_escaped(self, tmp_path: Path) -> None:
        """`sagacity pending` (a table when not on a terminal) prints the escapes."""
        database = tmp_path / "s.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        bank = Bank()
        sagacity.wrap(bank)
        start_wire(sagacity, bank, SAGA, to=TO)
        sagacity.close()
        shown = run_cli("pending", "--database", str(database))
        assert shown.returncode == 0, shown.stderr
        assert HIDDEN.search(shown.stdout) is None
        (row,) = shown.stdout.splitlines()[1:]
        assert row.startswith(SHOWN + "  ")
        assert row.endswith('{"amount":"100","to":"acct\\u202e1-ACME"}')
