"""The inbox's escalation screen, in Debian's chromium through the real server.

A payout's request names a warning time and the group it escalates to. Before expiry the
queue and the page say when the reminder goes out and where it escalates; once the sweep
escalated it, they say to which group and who may approve it now: ada (not a member) is
offered no Approve button, and ben (a member) approves it in the browser.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import (
    ApproverGroup,
    Escalator,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
)
from sagacity.server import TokenAuth, create_app
from sagacity.testing import FakeClock
from tests.server._live import live_server
from tests.server.browser.conftest import TOKENS
from tests.server.browser.test_inbox import sign_in
from tests.server.browser.test_review import new_page

pytestmark = pytest.mark.slow

START = datetime.datetime(2026, 3, 6, 17, 0, tzinfo=datetime.UTC)


class Payouts:
    """Pay a supplier: reminded 10 minutes before expiry, then escalated to the leads."""

    def __init__(self) -> None:
        self.paid: list[str] = []

    @compensable(
        reversibility=Reversibility.IRREVERSIBLE,
        remind_before=600,
        escalate_to="treasury-leads",
    )
    def pay(self, amount: str) -> str:
        """Pay the supplier."""
        self.paid.append(amount)
        return f"paid {amount}"


@pytest.fixture
def clock() -> FakeClock:
    """The server's time, moved by the test."""
    return FakeClock(START)


@pytest.fixture
def payouts() -> Payouts:
    """What was paid."""
    return Payouts()


@pytest.fixture
def sagacity(tmp_path: Path, clock: FakeClock, payouts: Payouts) -> Iterator[Sagacity]:
    """A Sagacity on SQLite whose requests expire in an hour and escalate to ben's group."""
    instance = Sagacity.from_url(
        f"sqlite:///{tmp_path / 'escalation.db'}",
        approval_ttl=3600,
        clock=clock,
        approver_groups=[ApproverGroup(name="treasury-leads", members=["ben@treasury"], ttl=1800)],
    )
    instance.wrap(payouts)
    yield instance
    instance.close()


@pytest.fixture
def server_url(sagacity: Sagacity) -> Iterator[str]:
    """The app over `sagacity`, served by uvicorn on a free port."""
    with live_server(create_app(sagacity, TokenAuth.from_tokens(TOKENS))) as url:
        yield url


def test_the_escalation_is_shown_and_only_the_group_approves(
    server_url: str, browser: Any, sagacity: Sagacity, clock: FakeClock, payouts: Payouts
) -> None:
    """Reminder and group before expiry; after it the group, its members, and four eyes."""
    tool = sagacity.tool("pay")
    result = sagacity.saga("supplier-42", lambda: tool(amount="4200.00 EUR"))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    (asked,) = result.pending

    ada, ada_errors = new_page(browser)
    sign_in(ada, server_url, "tok-ada")
    row = ada.locator(f'tr[data-request="{asked.request_id}"]')
    assert row.locator(".escalates-to").inner_text() == "then treasury-leads"
    assert row.locator(".reminder").inner_text() == "reminder in 50m"
    ada.click(f'tr[data-request="{asked.request_id}"] a.tool')
    assert ada.locator("dd.reminder").inner_text() == "in 50m"
    assert ada.locator("dd.escalates-to").inner_text() == "escalates to treasury-leads"

    clock.advance(minutes=60)
    assert [a.action for a in Escalator(sagacity).sweep()] == ["escalated"]
    (escalated,) = [e for e in sagacity.history("supplier-42") if e.phase is Phase.ESCALATED]

    ada.goto(f"{server_url}/sagacity/ui/")
    badge = ada.locator(f'tr[data-request="{asked.request_id}"] .badge.escalated')
    assert badge.inner_text() == "escalated to treasury-leads"
    assert badge.get_attribute("title") == "only ben@treasury may approve it now"
    ada.goto(f"{server_url}/sagacity/ui/requests/{asked.request_id}")
    shown = " ".join(ada.locator("dd.escalation").inner_text().split())
    assert shown == (
        f"to treasury-leads at 2026-03-06T18:00:00+00:00 (journal seq {escalated.seq}): "
        "only ben@treasury may approve it now"
    )
    assert ada.locator("#approve").count() == 0
    assert ada.locator("text=only its members (ben@treasury) may approve it now").count() == 1

    ben, ben_errors = new_page(browser)
    sign_in(ben, server_url, "tok-ben")
    ben.goto(f"{server_url}/sagacity/ui/requests/{asked.request_id}")
    ben.click("#approve")
    ben.wait_for_selector("text=1 of 1")
    (approved,) = sagacity.pending("supplier-42")
    assert [a.approver for a in approved.approvals] == ["ben@treasury"]
    assert approved.state == "approved"
    assert ada_errors == []
    assert ben_errors == []
