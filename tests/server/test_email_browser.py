"""An approval e-mail's link in a real browser: sign in, land on the request, approve.

The mail goes through aiosmtpd on loopback; the server is uvicorn over SQLite; the
browser is Debian's chromium, started once for the module.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import Phase, Sagacity
from sagacity.server import (
    ApprovalLinks,
    EmailNotifier,
    Principal,
    SmtpSettings,
    TokenAuth,
    create_app,
)
from tests.server._bank import Bank, start_wire
from tests.server._live import live_server
from tests.server._smtp import Inbox, smtp_server
from tests.server.browser.conftest import chromium_path

pytestmark = pytest.mark.slow

TOKENS = {
    "tok-ada": Principal("ada@treasury", frozenset({"approver"})),
    "tok-ben": Principal("ben@treasury", frozenset({"approver"})),
}
INBOX_URL = "https://approvals.bank.example/sagacity/ui"
"""Where approvers reach the inbox; the test's server stands in for that address."""
LINK = re.compile(re.escape(INBOX_URL) + r"/links/[A-Za-z0-9_.-]+")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless chromium for this module.

    Not for the session: Playwright's sync API keeps an event loop running on the main
    thread while it is open (see tests/server/browser/conftest.py).
    """
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def mail() -> Iterator[tuple[Inbox, int]]:
    """The SMTP server: its inbox and port."""
    with smtp_server() as server:
        yield server


@pytest.fixture
def site(
    tmp_path: Path, bank: Bank, mail: tuple[Inbox, int]
) -> Iterator[tuple[Sagacity, str, Inbox]]:
    """A Sagacity mailing its requests, and the URL of its app (which opens the links)."""
    inbox, port = mail
    links = ApprovalLinks("browser-link-secret-0123456789abcdef!", inbox_url=INBOX_URL)
    with EmailNotifier(
        SmtpSettings(host="127.0.0.1", port=port, security="none"),
        sender="sagacity@bank.example",
        links=links,
        default_recipients=["treasury@bank.example"],
    ) as notifier:
        sagacity = Sagacity.from_url(
            f"sqlite:///{tmp_path / 'mail.db'}", on_approval_request=notifier
        )
        sagacity.wrap(bank)
        try:
            app = create_app(sagacity, TokenAuth.from_tokens(TOKENS), ui={"links": links})
            with live_server(app) as url:
                yield sagacity, url, inbox
        finally:
            sagacity.close()
            links.close()


def test_an_emailed_link_leads_through_sign_in_to_a_decision(
    site: tuple[Sagacity, str, Inbox], bank: Bank, chromium: Any
) -> None:
    """The approver follows the mail's link, signs in, approves there; the link is spent."""
    sagacity, url, inbox = site
    start_wire(sagacity, bank, "order-7731", amount="12500.00 EUR", to="DE89 3704 0044")
    (request,) = sagacity.pending("order-7731")
    received = inbox.next()
    (link,) = LINK.findall(received.text())
    local = url + link.removeprefix("https://approvals.bank.example")

    context = chromium.new_context()
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(local)
        assert "/sagacity/ui/sign-in" in page.url  # no session: sign in first
        page.fill("#token", "tok-ben")
        page.click("button[type=submit]")
        page.wait_for_selector("#approve")
        assert page.url == f"{url}/sagacity/ui/requests/{request.request_id}"
        assert "Opened from an e-mail link" in page.content()
        assert page.text_content("#sha256") == request.input_sha256
        page.click("#approve")
        page.wait_for_selector("text=Approved by ben@treasury")

        (approved,) = [
            e for e in sagacity.journal.entries("order-7731") if e.phase is Phase.APPROVED
        ]
        assert isinstance(approved.payload, dict)
        assert approved.payload["approver"] == "ben@treasury"
        assert approved.payload["via"] == "email"

        answer = page.goto(local)
        assert answer is not None
        assert answer.status == 410
        assert page.text_content("h1") == "Link used"
        assert errors == []
    finally:
        context.close()
