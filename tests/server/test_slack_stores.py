"""Slack clicks on every backend, and a replay sent to another server over the same database."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity
from sagacity.server import Principal, SlackInteractions, SlackNotifier, create_app
from tests.server._bank import Bank, start_wire, token_auth
from tests.server._slack_api import SlackApi, slack_api

SECRET = "signing-secret-of-the-slack-app"
USERS = {"U0ALICE": Principal("alice", frozenset({"approver"}))}


@pytest.fixture
def api() -> Iterator[SlackApi]:
    """The local stand-in of Slack's Web API."""
    with slack_api() as stand_in:
        yield stand_in


def signed_click(value: str, action_id: str = "sagacity_approve") -> tuple[bytes, dict[str, str]]:
    """A click by alice, form-encoded and signed now as Slack signs it."""
    payload = {
        "type": "block_actions",
        "user": {"id": "U0ALICE"},
        "channel": {"id": "C0APPROVE"},
        "message": {"ts": "1700000000.000100"},
        "trigger_id": "1.2.3",
        "actions": [{"action_id": action_id, "value": value, "action_ts": f"{time.time()}"}],
    }
    body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    return body, {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": "v0=" + digest.hexdigest(),
        "Content-Type": "application/x-www-form-urlencoded",
    }


def approvals(sagacity: Sagacity, saga_id: str) -> list[str]:
    return [
        str(e.payload["via"])  # type: ignore[index, call-overload]
        for e in sagacity.journal.entries(saga_id)
        if e.phase is Phase.APPROVED
    ]


def test_a_click_approves_on_each_backend(store_url: str, api: SlackApi, bank: Bank) -> None:
    """The click's approval is journaled via slack on memory, SQLite and PostgreSQL."""
    with SlackNotifier("xoxb-t", channel="C0APPROVE", api_base=api.url, backoff=0.01) as poster:
        sagacity = Sagacity.from_url(store_url, on_approval_request=poster)
        sagacity.wrap(bank)
        clicks = SlackInteractions(SECRET, users=USERS, notifier=poster)
        try:
            start_wire(sagacity, bank, "order-1")
            value = api.next().body["blocks"][-1]["elements"][0]["value"]
            body, headers = signed_click(value)
            with TestClient(create_app(sagacity, token_auth(), ui=False, slack=clicks)) as client:
                answer = client.post("/sagacity/slack/interactions", content=body, headers=headers)
                replay = client.post("/sagacity/slack/interactions", content=body, headers=headers)
            assert answer.status_code == 200, answer.text
            assert replay.status_code == 409
            assert "replay" in replay.json()["error"]
            assert approvals(sagacity, "order-1") == ["slack"]
        finally:
            clicks.close()
            sagacity.close()


def test_a_replay_to_another_server_is_refused(
    shared_store_url: str, api: SlackApi, bank: Bank
) -> None:
    """Two servers over one database: the request one took, the other refuses."""
    with SlackNotifier("xoxb-t", channel="C0APPROVE", api_base=api.url, backoff=0.01) as poster:
        first = Sagacity.from_url(shared_store_url, on_approval_request=poster)
        second = Sagacity.from_url(shared_store_url)
        first.wrap(bank)
        clicks = [SlackInteractions(SECRET, users=USERS, notifier=poster) for _ in "ab"]
        try:
            start_wire(first, bank, "order-2", big=True)
            value = api.next().body["blocks"][-1]["elements"][0]["value"]
            body, headers = signed_click(value)
            with (
                TestClient(create_app(first, token_auth(), ui=False, slack=clicks[0])) as a,
                TestClient(create_app(second, token_auth(), ui=False, slack=clicks[1])) as b,
            ):
                taken = a.post("/sagacity/slack/interactions", content=body, headers=headers)
                replayed = b.post("/sagacity/slack/interactions", content=body, headers=headers)
            assert taken.status_code == 200, taken.text
            assert replayed.status_code == 409
            assert "replay" in replayed.json()["error"]  # not only "approved already"
            assert approvals(first, "order-2") == ["slack"]
        finally:
            for taking in clicks:
                taking.close()
            first.close()
            second.close()
