"""The approval inbox in a real browser: sign in, approve, run, reject, and hostile payloads.

Set `SAGACITY_SCREENSHOTS=1` to (re)write `docs/images/inbox.png` and `request.png`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sagacity import Phase, Reversibility, Sagacity, compensable
from tests.server._bank import Bank, start_wire

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
IMAGES = ROOT / "docs" / "images"
XSS_SCRIPT = "<script>window.__xss=1</script>"
XSS_IMG = '<img src=x onerror="window.__xss=1">'


def screenshot(page: Any, name: str) -> None:
    """Write a screenshot for the docs, only when asked (normal runs leave the tree alone)."""
    if os.environ.get("SAGACITY_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / name), full_page=True)


def request_of(sagacity: Sagacity, saga_id: str) -> Any:
    (request,) = sagacity.pending(saga_id)
    return request


def sign_in(page: Any, server_url: str, token: str) -> None:
    page.goto(f"{server_url}/sagacity/ui/")
    assert "/sagacity/ui/sign-in" in page.url  # no session yet: sent to sign in
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_selector("text=Signed in as")


def test_sign_in_approve_run_reject_and_hostile_payloads(
    server_url: str, browser: Any, sagacity: Sagacity, bank: Bank
) -> None:
    """The whole inbox as an approver uses it, checked against the journal at each step."""
    start_wire(sagacity, bank, "order-7731", amount="12500.00 EUR", to="DE89 3704 0044")
    start_wire(sagacity, bank, "order-7732", amount="980.00 EUR", to="FR76 3000 6000")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an e-mail."""
        bank.log.append(f"email {to}")
        return "sent"

    (email,) = sagacity.wrap(send_email)
    sagacity.saga(
        "support-88",
        lambda: email(to="cust@example.com", subject=XSS_SCRIPT, body=XSS_IMG),
    )
    wire, other, hostile = (
        request_of(sagacity, s) for s in ("order-7731", "order-7732", "support-88")
    )

    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, server_url, "tok-ada")

    # The queue lists the three requests, oldest first.
    rows = page.locator("table.queue tbody tr")
    assert rows.count() == 3
    assert [rows.nth(i).get_attribute("data-request") for i in range(3)] == [
        wire.request_id,
        other.request_id,
        hostile.request_id,
    ]
    assert page.locator(f'tr[data-request="{wire.request_id}"] a.tool').inner_text() == "wire"
    screenshot(page, "inbox.png")

    # The request page shows the exact journaled input and its hash; approve binds it.
    page.click(f'tr[data-request="{wire.request_id}"] a.tool')
    page.wait_for_selector("#payload")
    assert page.locator("#sha256").inner_text() == wire.input_sha256
    assert '"amount": "12500.00 EUR"' in page.locator("#payload").inner_text()
    assert page.locator(".timeline li").count() == 3  # INTENT, EXECUTED, AWAITING_APPROVAL
    page.wait_for_timeout(2500)  # past one look of the live stream at the stores
    assert page.locator("#live").is_hidden()  # the page is current: no "out of date"
    screenshot(page, "request.png")
    page.click("#approve")
    page.wait_for_selector("text=Approved by ada@treasury")
    approved = sagacity.history("order-7731")[-1]
    assert approved.phase is Phase.APPROVED
    assert approved.payload["approver"] == "ada@treasury"
    assert approved.payload["input_sha256"] == wire.input_sha256
    assert bank.log == ["reserve sku-order-7731", "reserve sku-order-7732"]  # not run yet

    # Approved, the operator runs the call: the tool runs once, the saga completes.
    page.click("#resume")
    page.wait_for_selector("#outcome")
    assert page.locator("#outcome").inner_text() == "COMPLETED"
    assert "chain verified" in page.locator("#verify").inner_text()
    assert bank.log[-1] == "wire 12500.00 EUR to DE89 3704 0044"
    assert [e.phase.value for e in sagacity.history("order-7731")][-4:] == [
        "APPROVED",
        "INTENT",
        "EXECUTED",
        "ENDED",
    ]
    assert page.locator(".timeline .entry-APPROVED .summary").inner_text() == (
        "approved by ada@treasury"
    )

    # Reject the other: the saga is compensated, REJECTED names the principal.
    page.goto(f"{server_url}/sagacity/ui/requests/{other.request_id}")
    page.fill("#reason", "beneficiary not on the vendor list")
    page.click("#reject")
    page.wait_for_selector("#outcome")
    assert page.locator("#outcome").inner_text() == "COMPENSATED"
    rejected = next(e for e in sagacity.history("order-7732") if e.phase is Phase.REJECTED)
    assert rejected.payload["approver"] == "ada@treasury"
    assert rejected.payload["reason"] == "beneficiary not on the vendor list"
    assert bank.log[-1] == "release res-sku-order-7732"

    # A payload holding markup is shown as text, and no script of it runs.
    page.goto(f"{server_url}/sagacity/ui/")
    assert page.evaluate("typeof window.__xss") == "undefined"
    page.click(f'tr[data-request="{hostile.request_id}"] a.tool')
    page.wait_for_selector("#payload")
    shown = page.locator("#payload").inner_text()
    assert XSS_SCRIPT in shown
    assert '<img src=x onerror=\\"window.__xss=1\\">' in shown  # JSON escapes the quotes
    assert page.locator("#payload img, #payload script").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert errors == []
    context.close()


def test_the_queue_updates_itself_when_another_process_asks(
    server_url: str, browser: Any, sagacity: Sagacity, tmp_path: Path
) -> None:
    """A request asked by another process appears in an open inbox without a reload."""
    context = browser.new_context()
    page = context.new_page()
    sign_in(page, server_url, "tok-ben")
    assert page.locator("p.empty").inner_text() == "Nothing waits for approval."
    # Another process, with its own Sagacity on the same SQLite file, asks for approval.
    script = (
        "import sys\n"
        "from sagacity import Sagacity\n"
        "from tests.server._bank import Bank, start_wire\n"
        "other = Sagacity.from_url(sys.argv[1])\n"
        "bank = Bank()\n"
        "other.wrap(bank)\n"
        "print(start_wire(other, bank, 'order-9001').outcome.value)\n"
        "other.close()\n"
    )
    asked = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{tmp_path / 'inbox.db'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert asked.stdout.strip() == "AWAITING_APPROVAL"
    request = request_of(sagacity, "order-9001")
    page.wait_for_selector(f'tr[data-request="{request.request_id}"]', timeout=15_000)
    assert page.locator("table.queue tbody tr").count() == 1

    # A page with a decision in progress is not reloaded under the reader: it says it is
    # out of date once another approver decided.
    page.click(f'tr[data-request="{request.request_id}"] a.tool')
    page.wait_for_selector("#payload")
    page.fill("#reason", "half-typed")
    assert page.locator("#live").is_hidden()
    sagacity.approve(
        "order-9001",
        approver="carol@treasury",
        request_id=request.request_id,
        expected_sha256=request.input_sha256,
    )
    page.wait_for_selector("#live", state="visible", timeout=15_000)
    assert page.input_value("#reason") == "half-typed"
    context.close()
