"""The inbox as a person on call reads it at 1280 px: whole words, what is asked, by whom.

An approved request moves out of "Waiting for a decision" into "Approved, waiting to run",
and a bookmarked request that was used says how its saga went on, with a link to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sagacity import Sagacity
from tests.server._bank import Bank, start_wire
from tests.server.browser.test_inbox import request_of, sign_in

pytestmark = pytest.mark.slow

_BROKEN_WORDS = """
() => {
  const broken = [];
  for (const cell of document.querySelectorAll("table.queue th, table.queue td")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest("a.saga")) continue;  // an id may break anywhere
      const text = node.textContent;
      const words = /[^\\s-]+/g;  // a hyphen is a place to break, as in print
      for (let found = words.exec(text); found; found = words.exec(text)) {
        const range = document.createRange();
        range.setStart(node, found.index);
        range.setEnd(node, found.index + found[0].length);
        const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(found[0]);
      }
    }
  }
  return broken;
}
"""


def test_the_queue_at_1280_px_keeps_words_whole_and_says_what_and_who(
    server_url: str, browser: Any, sagacity: Sagacity, bank: Bank, tmp_path: Path
) -> None:
    """Headers, states and amounts are never split mid-word.

    Each row shows the amount, the input's other first fields and who asked.
    """
    start_wire(
        sagacity,
        bank,
        "order-7731-refund-for-customer-account-4432",
        amount="12500.00 EUR",
        to="DE89 3704 0044 0532 0130 00",
        started_by="support-agent@shop",
    )
    start_wire(sagacity, bank, "order-7732", amount="980.00 EUR", to="FR76 3000 6000", big=True)
    long_one = request_of(sagacity, "order-7731-refund-for-customer-account-4432")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    sign_in(page, server_url, "tok-ada")
    page.screenshot(path=str(tmp_path / "queue-1280.png"), full_page=True)
    assert page.evaluate(_BROKEN_WORDS) == []
    headers = page.locator("table.queue th").all_inner_texts()
    assert [h.upper() for h in headers] == [
        "WHAT", "INPUT", "ASKED BY", "SAGA", "REASON", "ASKED", "EXPIRES", "STATE", "APPROVALS",
    ]  # fmt: skip
    row = page.locator(f'tr[data-request="{long_one.request_id}"]')
    fields = row.locator("td.glance .field").all_inner_texts()
    assert fields == ["amount 12500.00 EUR", "to DE89 3704 0044 0532 0130 00"]
    assert row.locator("td.asked-by").inner_text() == "support-agent@shop"
    for badge in page.locator("table.queue .badge").all():
        box = badge.bounding_box()
        assert box is not None
        assert box["height"] < 24  # one line: "waiting", not "waiti" over "ng"
    context.close()


def test_an_approved_request_waits_to_run_and_a_used_one_links_to_its_saga(
    server_url: str, browser: Any, sagacity: Sagacity, bank: Bank
) -> None:
    """Approved: listed as approved, waiting to run, not as waiting for a decision.

    Run, its bookmarked page is no bare 404: it says who approved it, that its call
    ran, how the saga ended, and links to the saga.
    """
    start_wire(sagacity, bank, "w-approved", amount="50.00 EUR", to="DE89")
    start_wire(sagacity, bank, "w-waiting", amount="60.00 EUR", to="FR76")
    approved = request_of(sagacity, "w-approved")
    waiting = request_of(sagacity, "w-waiting")
    sagacity.approve(
        "w-approved",
        approver="ben@treasury",
        request_id=approved.request_id,
        expected_sha256=approved.input_sha256,
    )
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    sign_in(page, server_url, "tok-ada")
    tables = page.locator("table.queue")
    assert tables.count() == 2
    first = tables.nth(0).locator("tbody tr")
    assert [first.nth(i).get_attribute("data-request") for i in range(first.count())] == [
        waiting.request_id
    ]
    assert page.locator("h1 .count").inner_text() == "1"
    assert page.locator("#approved").inner_text() == "Approved, waiting to run 1"
    second = tables.nth(1).locator("tbody tr")
    assert [second.nth(i).get_attribute("data-request") for i in range(second.count())] == [
        approved.request_id
    ]

    assert sagacity.resume_saga("w-approved").outcome.value == "COMPLETED"
    # Opened as a bookmark is, in a page of its own: the queue's page reloads itself when
    # the saga ends, and that navigation may take the place of this one.
    page = context.new_page()
    answer = page.goto(f"{server_url}/sagacity/ui/requests/{approved.request_id}")
    assert answer is not None
    assert answer.status == 410
    assert page.locator("h1").inner_text() == "No longer waiting"
    message = page.locator("#message").inner_text()
    assert message.startswith(
        f"Request {approved.request_id} for wire (saga w-approved) is no longer waiting for a "
        "decision: approved by ben@treasury at "
    )
    assert message.endswith("; its call ran at seq 5 (EXECUTED).")
    assert page.locator("#saga-status .badge").inner_text() == "COMPLETED"
    page.click("#saga-link")
    page.wait_for_selector("#outcome")
    assert page.locator("#outcome").inner_text() == "COMPLETED"
    context.close()
