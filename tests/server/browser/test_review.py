"""What a second approver sees in the inbox: an edit and its diff, and a gate's real expiry.

Through the real server and Debian's chromium: ada edits a wire's amount in the browser;
the queue row and the request page then say "edited by ada at T" with the amount before
and after, ada is offered no Approve button, and ben sees the whole diff and can approve.
A workflow gate's timeout is its expiry on the queue and on the gate's page.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from sagacity import Phase, Sagacity
from sagacity.workflows import WorkflowRuntime, gate, stage, workflow
from tests.server._bank import Bank, start_wire
from tests.server.browser.test_inbox import sign_in

pytestmark = pytest.mark.slow

IBAN = "DE89 3704 0044 0532 0130 00"


@workflow("payout", description="Pay a supplier")
class Payout:
    @stage(order=1)
    def prepare(self, amount: str) -> str:
        """Work out the amount."""
        return amount

    @stage(order=2)
    @gate(reason="money leaves the bank", timeout_seconds=60)
    def pay(self, amount: str) -> str:
        """Pay it."""
        return f"paid {amount}"


def new_page(browser: Any) -> tuple[Any, list[str]]:
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return page, errors


def test_an_edit_is_shown_with_its_diff_and_the_editor_cannot_approve(
    server_url: str, browser: Any, sagacity: Sagacity, bank: Bank
) -> None:
    """Edited by ada at T, 980.00 EUR → 98000.00 EUR, on the queue and the page; four eyes."""
    start_wire(sagacity, bank, "order-7731", amount="980.00 EUR", to=IBAN)
    (asked,) = sagacity.pending("order-7731")

    ada, ada_errors = new_page(browser)
    sign_in(ada, server_url, "tok-ada")
    ada.click(f'tr[data-request="{asked.request_id}"] a.tool')
    ada.click("details.edit summary")
    ada.fill("#input", json.dumps({"amount": "98000.00 EUR", "to": IBAN}))
    ada.click("#edit")
    ada.wait_for_selector("text=Edited by ada@treasury")

    (edited,) = sagacity.pending("order-7731")
    assert edited.edited_by == "ada@treasury"
    assert edited.input == {"amount": "98000.00 EUR", "to": IBAN}
    (awaiting,) = [e for e in sagacity.journal.entries("order-7731") if e.seq == edited.seq]
    edited_at = awaiting.recorded_at

    # The editor, on the new request's page: the edit is said, and no Approve button.
    ada.goto(f"{server_url}/sagacity/ui/requests/{edited.request_id}")
    assert ada.locator("#approve").count() == 0
    assert ada.locator("text=You edited this input").count() == 1

    # The queue row says it was edited, by whom, when, and the amount before and after.
    ben, ben_errors = new_page(browser)
    sign_in(ben, server_url, "tok-ben")
    row = ben.locator(f'tr[data-request="{edited.request_id}"]')
    note = row.locator(".edited-note")
    assert " ".join(note.inner_text().split()) == (
        f'edited by ada@treasury at {edited_at}: amount "980.00 EUR" → "98000.00 EUR"'
    )

    # The request page: the same, a diff of the fields, the input before, and an Approve.
    ben.click(f'tr[data-request="{edited.request_id}"] a.tool')
    diff = ben.locator("section.edit-diff")
    assert diff.locator("h2").inner_text() == (
        f"Edited by ada@treasury at {edited_at}: what changed"
    )
    cells = diff.locator('tr[data-field="amount"] td')
    assert [cells.nth(i).inner_text() for i in range(3)] == [
        "amount",
        '"980.00 EUR"',
        '"98000.00 EUR"',
    ]
    assert diff.locator('tr[data-field="to"]').count() == 0  # unchanged: not listed
    diff.locator("details.before-input summary").click()
    before = json.loads(diff.locator("pre.payload").inner_text())
    assert before == {"amount": "980.00 EUR", "to": IBAN}
    assert json.loads(ben.locator("#payload").inner_text())["amount"] == "98000.00 EUR"

    # The journal's REJECTED of the old request reads as the edit it is, not a rejection.
    closed = ben.locator("li.entry-REJECTED .summary")
    assert closed.inner_text() == (
        f"request {asked.request_id} closed: its input was edited by ada@treasury; the call "
        f"now waits as request {edited.request_id}"
    )
    asked_again = ben.locator(f"li#seq-{edited.seq} .summary")
    assert asked_again.inner_text() == (
        f"request {edited.request_id}; input edited by ada@treasury; replaces request "
        f"{asked.request_id}; reason: {edited.reason}"
    )
    ben.click("#approve")
    ben.wait_for_selector("text=Approved")
    phases = [e.phase for e in sagacity.journal.entries("order-7731")]
    assert phases[-1] is Phase.APPROVED
    assert ada_errors == []
    assert ben_errors == []


def test_a_gate_s_timeout_is_its_expiry_on_the_queue_and_its_page(
    server_url: str, browser: Any, sagacity: Sagacity
) -> None:
    """The gate waits 60 s: its row and its page say "in 59s" or so, never "never"."""
    runtime = WorkflowRuntime(sagacity, workflows=[Payout])
    run = runtime.start("payout", "120.00 EUR")
    (waiting,) = runtime.pending_gates(run.run_id)
    deadline = waiting.requested_at + datetime.timedelta(seconds=60)
    assert waiting.expires_at == deadline  # what the server's expire_gates goes by

    page, errors = new_page(browser)
    sign_in(page, server_url, "tok-ada")
    row = page.locator(f'tr[data-request="{waiting.request_id}"]')
    expires = row.locator("td.expires")
    assert expires.get_attribute("title") == deadline.isoformat()
    assert expires.inner_text().startswith("in ")
    assert expires.inner_text() != "never"

    row.locator("a.gate").click()
    shown = page.locator("dl.facts dd[title]").nth(1)
    assert shown.get_attribute("title") == deadline.isoformat()
    assert shown.inner_text().startswith("in ")
    assert errors == []
