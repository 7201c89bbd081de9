"""The inbox's Grants page in a real browser: grant, watch the budget, revoke, refusals.

One chromium serves every test of the module (the conftest's), a new context per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sagacity import Phase, Sagacity, SagaOutcome
from tests.server._bank import Bank, start_wire

pytestmark = pytest.mark.slow

XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture
def page(browser: Any, server_url: str) -> Iterator[Any]:
    """A fresh context signed in as ben (an approver), its page errors collected."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.errors = []
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    opened.goto(f"{server_url}/sagacity/ui/")
    opened.fill("#token", "tok-ben")
    opened.click("button[type=submit]")
    opened.wait_for_selector("text=Signed in as")
    try:
        yield opened
    finally:
        context.close()


def _grant_form(page: Any, **fields: str) -> None:
    form = page.locator("form.grant")
    for name, value in fields.items():
        form.locator(f'[name="{name}"]').fill(value)
    form.locator("button[type=submit]").click()


def test_grant_cover_and_revoke(page: Any, server_url: str, sagacity: Sagacity, bank: Bank) -> None:
    """Granted in the page, a covered wire runs; the row shows the budget; revoked, it asks."""
    page.click("nav >> text=Grants")
    page.wait_for_selector("text=No standing approvals.")
    _grant_form(
        page,
        tool_name="wire",
        max_calls="2",
        ttl_hours="24",
        match='{"to": {"one_of": ["acct-1", "acct-2"]}}',
        reason=XSS,
    )
    page.wait_for_selector("text=Granted by ben@treasury")
    (grant,) = sagacity.grants()
    row = page.locator(f'tr[data-grant="{grant.grant_id}"]')
    assert row.locator(".calls-left").inner_text() == "2 of 2"
    assert row.locator(".covers").inner_text() == 'to in ["acct-1","acct-2"]'
    assert XSS in row.inner_text()  # the reason is shown as text
    assert page.locator("tr[data-grant] img").count() == 0
    granted = sagacity.history(f"grant-{grant.grant_id}")[0]
    assert (granted.payload["grantor"], granted.payload["via"]) == ("ben@treasury", "inbox")  # type: ignore[index,call-overload]

    covered = start_wire(sagacity, bank, "order-1", to="acct-1", started_by="ada@treasury")
    assert covered.outcome is SagaOutcome.COMPLETED
    page.reload()
    assert row.locator(".calls-left").inner_text() == "1 of 2"

    row.locator('input[name="reason"]').fill("vendor under review")
    row.locator("button.danger").click()
    page.wait_for_selector("text=Revoked by ben@treasury")
    assert row.locator(".badge").inner_text() == "revoked"
    assert row.locator(".calls-left").inner_text() == "0 of 2"
    assert row.locator("form.revoke").count() == 0
    revoked = sagacity.history(f"grant-{grant.grant_id}")[-1]
    assert revoked.phase is Phase.REVOKED
    assert revoked.payload["revoked_by"] == "ben@treasury"  # type: ignore[index,call-overload]
    asked = start_wire(sagacity, bank, "order-2", to="acct-1", started_by="ada@treasury")
    assert asked.outcome is SagaOutcome.AWAITING_APPROVAL
    assert bank.log.count("wire 100 to acct-1") == 1
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.errors == []


def test_a_self_grant_and_bad_terms_are_refused(
    page: Any, server_url: str, sagacity: Sagacity
) -> None:
    """For one's own sagas: refused (403), as malformed constraints are (422); nothing kept."""
    page.goto(f"{server_url}/sagacity/ui/grants")
    _grant_form(page, tool_name="wire", max_calls="1", started_by="ben@treasury")
    page.wait_for_selector("text=cannot grant a standing approval")
    page.goto(f"{server_url}/sagacity/ui/grants")
    _grant_form(page, tool_name="wire", max_calls="1", match='{"to": "acct-1"}')
    page.wait_for_selector("text=must be {'equals'")
    assert sagacity.grants() == []
    assert page.errors == []
