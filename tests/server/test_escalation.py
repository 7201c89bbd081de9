"""Reminders and escalation through the server.

The webhook's reminder, the REST API's request JSON, and the app's background sweep.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sagacity import (
    ApproverGroup,
    CompensationContext,
    Escalator,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
)
from sagacity.server import WebhookNotifier, create_app
from sagacity.testing import FakeClock
from tests.server._bank import ALICE, BOB, CAROL, token_auth
from tests.server.test_notify import KEY, SECRET, Receiver

START = datetime.datetime(2026, 3, 6, 17, 0, tzinfo=datetime.UTC)
LEADS = ApproverGroup(name="treasury-leads", members=["carol"], ttl=1800)


class Treasury:
    """Hold funds (compensable), then pay out: reminded, escalated to the treasury leads."""

    def __init__(self) -> None:
        self.log: list[str] = []

    @compensable(by="release")
    def hold(self, ref: str) -> str:
        """Hold the funds."""
        self.log.append(f"hold {ref}")
        return f"hold-{ref}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(
        reversibility=Reversibility.IRREVERSIBLE,
        remind_before=600,
        escalate_to="treasury-leads",
    )
    def payout(self, amount: str) -> str:
        """Pay out."""
        self.log.append(f"payout {amount}")
        return f"paid-{amount}"


class Desk:
    """A Sagacity on SQLite with a fake clock, the treasury wrapped, and its reminders."""

    def __init__(self, tmp_path: Path, **options: Any) -> None:
        self.clock = FakeClock(START)
        self.sagacity = Sagacity.from_url(
            f"sqlite:///{tmp_path / 'desk.db'}",
            approval_ttl=3600,
            clock=self.clock,
            approver_groups=[LEADS],
            **options,
        )
        self.treasury = Treasury()
        self.tools = {t.name: t for t in self.sagacity.wrap(self.treasury)}

    def start(self, saga_id: str = "payout-9") -> str:
        def work() -> Any:
            self.tools["hold"]("H-9")
            return self.tools["payout"](amount="7000.00")

        result = self.sagacity.saga(saga_id, work, started_by="alice")
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        return result.pending[0].request_id

    def phases(self, saga_id: str = "payout-9") -> list[str]:
        return [e.phase.value for e in self.sagacity.history(saga_id)]


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    """The treasury desk, closed afterwards."""
    opened = Desk(tmp_path)
    yield opened
    opened.sagacity.close()


def test_the_webhook_delivers_one_reminder_per_warning(tmp_path: Path) -> None:
    """approval.reminder, signed, once per request and expiry: the group's warning is another."""
    receiver = Receiver()
    notifier = WebhookNotifier(receiver.url, SECRET, backoff=0.01)
    desk = Desk(tmp_path, on_approval_reminder=notifier.remind)
    try:
        request_id = desk.start()
        desk.clock.advance(minutes=50)
        Escalator(desk.sagacity).sweep()
        Escalator(desk.sagacity).sweep()
        receiver.wait_for(1)
        desk.clock.advance(minutes=10)
        Escalator(desk.sagacity).sweep()  # escalated: the group's time starts
        desk.clock.advance(minutes=20)
        Escalator(desk.sagacity).sweep()
        receiver.wait_for(2)
    finally:
        notifier.close()
        desk.sagacity.close()
        receiver.close()
    assert len(receiver.received) == 2
    (first_headers, first), (second_headers, second) = receiver.received
    assert first_headers["x-sagacity-event"] == "approval.reminder"
    expiry = int(datetime.datetime(2026, 3, 6, 18, 0, tzinfo=datetime.UTC).timestamp())
    assert first_headers["webhook-id"] == f"msg_{request_id}.reminder.{expiry}"
    signed = f"{first_headers['webhook-id']}.{first_headers['webhook-timestamp']}.".encode()
    digest = hmac.new(KEY, signed + first, hashlib.sha256).digest()
    assert first_headers["webhook-signature"] == "v1," + base64.b64encode(digest).decode()
    body = json.loads(first)
    assert (body["request_id"], body["deadline"], body["remind_at"], body["escalate_to"]) == (
        request_id,
        "2026-03-06T18:00:00+00:00",
        "2026-03-06T17:50:00+00:00",
        "treasury-leads",
    )
    assert body["escalation"] is None
    group = json.loads(second)
    assert group["deadline"] == "2026-03-06T18:30:00+00:00"
    assert group["escalation"]["group"] == "treasury-leads"
    assert group["escalation"]["members"] == ["carol"]
    assert second_headers["webhook-id"] != first_headers["webhook-id"]


def test_the_rest_api_shows_the_warning_and_the_escalation(desk: Desk) -> None:
    """GET /sagacity/approvals: remind_at and escalate_to, then the escalation and its group."""
    request_id = desk.start()
    client = TestClient(create_app(desk.sagacity, token_auth()))
    (shown,) = client.get("/sagacity/approvals", headers=ALICE).json()
    assert shown["remind_at"] == "2026-03-06T17:50:00+00:00"
    assert shown["escalate_to"] == "treasury-leads"
    assert shown["escalation"] is None
    desk.clock.advance(minutes=60)
    Escalator(desk.sagacity).sweep()
    (escalated,) = client.get("/sagacity/approvals", headers=ALICE).json()
    assert escalated["escalation"] == {
        "group": "treasury-leads",
        "members": ["carol"],
        "seq": 4,
        "escalated_at": "2026-03-06T18:00:00+00:00",
        "expires_at": "2026-03-06T18:30:00+00:00",
        "remind_at": "2026-03-06T18:20:00+00:00",
    }
    refused = client.post(
        f"/sagacity/approvals/{request_id}/approve",
        headers=BOB,
        json={"sha256": escalated["input_sha256"]},
    )
    assert refused.status_code == 403
    assert "not a member" in json.dumps(refused.json())
    approved = client.post(
        f"/sagacity/approvals/{request_id}/approve",
        headers=CAROL,
        json={"sha256": escalated["input_sha256"]},
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["ready"] is True
    assert approved.json()["request"]["escalation"]["group"] == "treasury-leads"


def test_the_app_sweeps_in_the_background(desk: Desk) -> None:
    """create_app(sweep_interval=) reminds, escalates and denies with no call to sweep."""
    desk.start()
    with TestClient(create_app(desk.sagacity, token_auth(), sweep_interval=0.02)):
        desk.clock.advance(minutes=50)
        _wait_for(lambda: desk.phases()[-1] == "REMINDED")
        desk.clock.advance(minutes=10)
        _wait_for(lambda: desk.phases()[-1] == "ESCALATED")
        desk.clock.advance(minutes=30)
        _wait_for(lambda: desk.phases()[-1] == "ENDED")
    assert desk.phases()[3:] == [
        "REMINDED",
        "ESCALATED",
        "REJECTED",
        "COMPENSATING",
        "COMPENSATED",
        "ENDED",
    ]
    assert desk.treasury.log == ["hold H-9", "release hold-H-9"]


def test_a_bad_sweep_interval_is_refused(desk: Desk) -> None:
    """Zero or a negative interval would spin: refused when the app is made."""
    from sagacity.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="sweep_interval must be positive"):
        create_app(desk.sagacity, token_auth(), sweep_interval=0)


def _wait_for(condition: Any, timeout: float = 20.0) -> None:
    """Wait until `condition()` holds: the background thread appends, the test reads."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the background sweep did not act in time"
        time.sleep(0.01)
