"""Approval in Slack: the Block Kit message, and button clicks signed as Slack signs them.

Outbound calls go to a local stand-in of Slack's Web API (`SLACK_API_BASE`), which
records them; inbound clicks are form-encoded `payload=` JSON bodies signed with the
app's signing secret by the test itself (HMAC-SHA256 over `v0:{timestamp}:{body}`), then
posted to the real app. Every decision is read back from the journal.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import rfc8785
from fastapi.testclient import TestClient

from sagacity import Escalator, Phase, Reversibility, Sagacity, compensable
from sagacity.audit._keys import PrivateKey, generate_key
from sagacity.server import Principal, SlackInteractions, SlackNotifier, create_app, slack_signature
from sagacity.testing import FakeClock
from tests.server._bank import Bank, start_wire, token_auth
from tests.server._slack_api import ApiCall, SlackApi, slack_api

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0APPROVE"
USERS = {
    "U0ALICE": Principal("alice", frozenset({"approver"})),
    "U0BOB": Principal("bob", frozenset({"approver"})),
    "U0VIC": Principal("vic", frozenset({"viewer"})),
}
"""The table of Slack users: alice and bob approve, vic only views."""


@pytest.fixture
def api() -> Iterator[SlackApi]:
    """The local stand-in of Slack's Web API."""
    with slack_api() as stand_in:
        yield stand_in


@pytest.fixture
def notifier(api: SlackApi) -> Iterator[SlackNotifier]:
    """Posts to the stand-in."""
    sender = SlackNotifier("xoxb-test-token", channel=CHANNEL, api_base=api.url, backoff=0.01)
    yield sender
    sender.close()


@pytest.fixture
def key() -> PrivateKey:
    """The server's approval key."""
    return generate_key()


@pytest.fixture
def sagacity(
    db_url: str, bank: Bank, notifier: SlackNotifier, key: PrivateKey
) -> Iterator[Sagacity]:
    """A SQLite Sagacity that posts each request to Slack, signs and requires signatures."""
    instance = Sagacity.from_url(
        db_url,
        on_approval_request=notifier,
        approval_signing_key=key,
        require_signed_approvals=True,
    )
    instance.wrap(bank)
    yield instance
    instance.close()


@pytest.fixture
def interactions(notifier: SlackNotifier) -> Iterator[SlackInteractions]:
    """The click endpoint's configuration."""
    taking = SlackInteractions(SIGNING_SECRET, users=USERS, notifier=notifier)
    yield taking
    taking.close()


@pytest.fixture
def slack_client(sagacity: Sagacity, interactions: SlackInteractions) -> Iterator[TestClient]:
    """The app with the Slack endpoint."""
    app = create_app(sagacity, token_auth(), ui=False, slack=interactions)
    with TestClient(app) as client:
        yield client


def button(call: ApiCall, action_id: str) -> dict[str, Any]:
    """A button of a posted message."""
    for block in call.body["blocks"]:
        if block["type"] == "actions":
            for element in block["elements"]:
                if element["action_id"] == action_id:
                    found: dict[str, Any] = element
                    return found
    raise AssertionError(f"no button {action_id} in {call.body}")


def click_body(message: ApiCall, user: str, action_id: str, *, trigger: str = "1") -> bytes:
    """The body Slack sends when `user` clicks a button of `message`."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0BANK"},
        "api_app_id": "A0SAGACITY",
        "token": "legacy-verification-token",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": CHANNEL},
        "trigger_id": f"{trigger}.12345.abcdef",
        "team": {"id": "T0BANK", "domain": "bank"},
        "channel": {"id": CHANNEL, "name": "approvals"},
        "message": {"type": "message", "ts": "1700000000.000100", "text": message.body["text"]},
        "response_url": "https://hooks.slack.com/actions/T0BANK/1/secret",
        "actions": [
            {
                "action_id": action_id,
                "block_id": "sagacity_decision",
                "value": button(message, action_id)["value"],
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def signed_headers(
    body: bytes, *, timestamp: int | None = None, secret: str = SIGNING_SECRET
) -> dict[str, str]:
    """The headers Slack sends: its timestamp and the v0 signature, computed here."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = f"v0:{stamp}:".encode() + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def post(client: TestClient, body: bytes, headers: dict[str, str]) -> Any:
    return client.post("/sagacity/slack/interactions", content=body, headers=headers)


def decisions(sagacity: Sagacity, saga_id: str) -> list[tuple[str, Any]]:
    return [
        (e.phase.name, e.payload)
        for e in sagacity.journal.entries(saga_id)
        if e.phase in (Phase.APPROVED, Phase.REJECTED)
    ]


class TestSignature:
    def test_slacks_documented_example(self) -> None:
        """The signature of Slack's own documented request is Slack's documented value."""
        body = (
            b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&"
            b"channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&"
            b"command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2F"
            b"commands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id="
            b"398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
        )
        assert slack_signature(SIGNING_SECRET, 1531420618, body) == (
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        )


class TestTheMessage:
    def test_the_message_shows_the_exact_input_and_binds_the_buttons_to_its_hash(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi
    ) -> None:
        """chat.postMessage with the bot token: tool, canonical input, sha256, two buttons."""
        start_wire(sagacity, bank, "order-1", amount="12500.00 EUR", to="DE89 3704")
        (request,) = sagacity.pending("order-1")
        call = api.next()
        assert call.method == "chat.postMessage"
        assert call.authorization == "Bearer xoxb-test-token"
        assert call.content_type == "application/json; charset=utf-8"
        assert call.body["channel"] == CHANNEL
        texts = [b["text"]["text"] for b in call.body["blocks"] if "text" in b]
        assert texts[0] == "Approval needed: wire"
        canonical = rfc8785.dumps({"amount": "12500.00 EUR", "to": "DE89 3704"}).decode()
        assert f"Exact input (canonical JSON):\n{canonical}" in texts
        assert f"sha256 {hashlib.sha256(canonical.encode()).hexdigest()}" in texts
        assert all(
            b["text"]["type"] == "plain_text" for b in call.body["blocks"] if "text" in b
        )  # no mrkdwn: an input cannot mention, link or format
        for action in ("sagacity_approve", "sagacity_reject"):
            assert json.loads(button(call, action)["value"]) == {
                "request_id": request.request_id,
                "saga_id": "order-1",
                "sha256": request.input_sha256,
            }

    def test_a_hostile_input_stays_plain_text_on_its_line(
        self, sagacity: Sagacity, api: SlackApi
    ) -> None:
        """Mentions, links and newlines in the input reach Slack as escaped plain text."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def post_note(body: str) -> str:
            """Post a note."""
            return "posted"

        (tool,) = sagacity.wrap(post_note)
        hostile = "<!channel> <https://evil.example|Approve>\n\u202eApproved by alice"
        sagacity.saga("note-1", lambda: tool(body=hostile))
        call = api.next()
        (shown,) = [
            b["text"]["text"]
            for b in call.body["blocks"]
            if "text" in b and b["text"]["text"].startswith("Exact input")
        ]
        line = shown.split("\n", 1)[1]
        assert "\n" not in line
        assert "\u202e" not in line
        assert json.loads(line) == {"body": hostile}
        assert all(b["text"]["type"] == "plain_text" for b in call.body["blocks"] if "text" in b)

    def test_a_reminder_posts_the_request_again(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, notifier: SlackNotifier
    ) -> None:
        """`remind` posts the same buttons under a reminder header."""
        start_wire(sagacity, bank, "order-2")
        first = api.next()
        (request,) = sagacity.pending("order-2")
        notifier.remind(request)
        again = api.next()
        assert again.body["blocks"][0]["text"]["text"] == "Reminder: approval still needed: wire"
        assert button(again, "sagacity_approve") == button(first, "sagacity_approve")

    def test_the_escalators_reminder_is_posted_at_the_warning_time(
        self, api: SlackApi, notifier: SlackNotifier
    ) -> None:
        """`remind` as `on_approval_reminder`: the sweep at the warning time posts it."""
        clock = FakeClock()

        @compensable(reversibility=Reversibility.IRREVERSIBLE, remind_before=600)
        def refund(amount: str) -> str:
            """Refund a customer."""
            return "refunded"

        instance = Sagacity.from_url(
            "memory://",
            on_approval_request=notifier,
            on_approval_reminder=notifier.remind,
            approval_ttl=3600,
            clock=clock,
        )
        (tool,) = instance.wrap(refund)
        instance.saga("refund-1", lambda: tool(amount="40.00"))
        assert api.next().body["blocks"][0]["text"]["text"] == "Approval needed: refund"
        clock.advance(minutes=51)
        assert [a.action for a in Escalator(instance).sweep()] == ["reminded"]
        reminder = api.next()
        assert reminder.method == "chat.postMessage"
        assert reminder.body["blocks"][0]["text"]["text"] == (
            "Reminder: approval still needed: refund"
        )


class TestClicks:
    def test_an_approver_approves_and_the_message_says_who(
        self,
        sagacity: Sagacity,
        bank: Bank,
        api: SlackApi,
        slack_client: TestClient,
        key: PrivateKey,
    ) -> None:
        """A signed click approves as the mapped principal, signed, via slack; then it runs."""
        start_wire(sagacity, bank, "order-3")
        (request,) = sagacity.pending("order-3")
        message = api.next()
        body = click_body(message, "U0ALICE", "sagacity_approve")
        answer = post(slack_client, body, signed_headers(body))
        assert answer.status_code == 200, answer.text
        ((phase, payload),) = decisions(sagacity, "order-3")
        assert phase == "APPROVED"
        assert payload["approver"] == "alice"
        assert payload["input_sha256"] == request.input_sha256
        assert payload["via"] == "slack"
        assert payload["key_id"] == key.key_id
        (approved,) = sagacity.pending("order-3")
        assert approved.state == "approved"  # the signature counts where it is required
        update = api.next()
        assert update.method == "chat.update"
        assert (update.body["channel"], update.body["ts"]) == (CHANNEL, "1700000000.000100")
        context = [b for b in update.body["blocks"] if b["type"] == "context"]
        assert context[0]["elements"][0]["text"].startswith("Approved by alice in Slack")
        assert not [b for b in update.body["blocks"] if b["type"] == "actions"]
        result = sagacity.resume_saga("order-3")
        assert result.outcome.value == "COMPLETED"
        assert bank.log == ["reserve sku-order-3", "wire 100 to acct-1"]

    def test_reject_compensates_and_the_buttons_go(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Reject: journaled via slack, the saga compensated, the message updated."""
        start_wire(sagacity, bank, "order-4")
        message = api.next()
        body = click_body(message, "U0BOB", "sagacity_reject")
        assert post(slack_client, body, signed_headers(body)).status_code == 200
        ((phase, payload),) = decisions(sagacity, "order-4")
        assert (phase, payload["approver"], payload["via"]) == ("REJECTED", "bob", "slack")
        assert bank.log == ["reserve sku-order-4", "release res-sku-order-4"]
        update = api.next()
        assert update.method == "chat.update"
        assert not [b for b in update.body["blocks"] if b["type"] == "actions"]

    def test_two_approvers_the_message_counts_them(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Of two needed approvals, the first keeps the buttons and says 1 of 2."""
        start_wire(sagacity, bank, "order-5", big=True)
        message = api.next()
        first = click_body(message, "U0ALICE", "sagacity_approve")
        assert post(slack_client, first, signed_headers(first)).status_code == 200
        update = api.next()
        assert [b for b in update.body["blocks"] if b["type"] == "actions"]
        assert "1 of 2 approvals" in json.dumps(update.body)
        second = click_body(message, "U0BOB", "sagacity_approve", trigger="2")
        assert post(slack_client, second, signed_headers(second)).status_code == 200
        assert [p["approver"] for _, p in decisions(sagacity, "order-5")] == ["alice", "bob"]


class TestRefusals:
    def test_a_replayed_request_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """The same signed request sent again, within five minutes: 409, journal unchanged."""
        start_wire(sagacity, bank, "order-6", big=True)
        message = api.next()
        body = click_body(message, "U0ALICE", "sagacity_approve")
        headers = signed_headers(body)
        assert post(slack_client, body, headers).status_code == 200
        replayed = post(slack_client, body, headers)
        assert replayed.status_code == 409
        assert "replay" in replayed.json()["error"]
        assert len(decisions(sagacity, "order-6")) == 1

    def test_a_stale_timestamp_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Signed correctly, but 301 s old (or 301 s ahead): 401, nothing decided."""
        start_wire(sagacity, bank, "order-7")
        message = api.next()
        body = click_body(message, "U0ALICE", "sagacity_approve")
        for offset in (-301, 301):
            headers = signed_headers(body, timestamp=int(time.time()) + offset)
            refused = post(slack_client, body, headers)
            assert refused.status_code == 401
            assert "timestamp" in refused.json()["error"]
        assert not decisions(sagacity, "order-7")

    @pytest.mark.parametrize("how", ["other-secret", "altered-body", "no-signature", "no-v0"])
    def test_a_bad_signature_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient, how: str
    ) -> None:
        """Another secret, a body changed after signing, a missing header: 401."""
        start_wire(sagacity, bank, "order-8")
        message = api.next()
        body = click_body(message, "U0ALICE", "sagacity_approve")
        headers = signed_headers(body)
        if how == "other-secret":
            headers = signed_headers(body, secret="not-the-signing-secret")
        elif how == "altered-body":
            body = body.replace(b"U0ALICE", b"U0BOB")
        elif how == "no-signature":
            del headers["X-Slack-Signature"]
        else:
            headers["X-Slack-Signature"] = headers["X-Slack-Signature"].removeprefix("v0=")
        refused = post(slack_client, body, headers)
        assert refused.status_code == 401
        assert not decisions(sagacity, "order-8")

    def test_an_unknown_slack_user_is_refused_and_told(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """A Slack user not in the table: 403, nothing journaled, an ephemeral refusal."""
        start_wire(sagacity, bank, "order-9")
        message = api.next()
        body = click_body(message, "U0MALLORY", "sagacity_approve")
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 403
        assert "U0MALLORY is not in sagacity's table" in refused.json()["error"]
        assert not decisions(sagacity, "order-9")
        told = api.next()
        assert told.method == "chat.postEphemeral"
        assert (told.body["channel"], told.body["user"]) == (CHANNEL, "U0MALLORY")

    def test_a_principal_who_is_not_an_approver_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Vic is in the table as a viewer: 403, nothing journaled."""
        start_wire(sagacity, bank, "order-10")
        message = api.next()
        body = click_body(message, "U0VIC", "sagacity_reject")
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 403
        assert "lacks the 'approver' role" in refused.json()["error"]
        assert not decisions(sagacity, "order-10")
        assert bank.log == ["reserve sku-order-10"]

    def test_a_second_click_by_the_same_approver_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Alice clicks Approve twice (two genuine requests): the second is 409."""
        start_wire(sagacity, bank, "order-11", big=True)
        message = api.next()
        first = click_body(message, "U0ALICE", "sagacity_approve", trigger="1")
        again = click_body(message, "U0ALICE", "sagacity_approve", trigger="2")
        assert post(slack_client, first, signed_headers(first)).status_code == 200
        refused = post(slack_client, again, signed_headers(again))
        assert refused.status_code == 409
        assert len(decisions(sagacity, "order-11")) == 1

    def test_self_approval_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Alice started the saga: her click approves nothing (four eyes)."""
        start_wire(sagacity, bank, "order-12", started_by="alice")
        message = api.next()
        body = click_body(message, "U0ALICE", "sagacity_approve")
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 403
        assert "started" in refused.json()["error"]
        assert not decisions(sagacity, "order-12")

    def test_a_button_for_an_edited_input_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """The input was edited after the message: its buttons decide nothing."""
        start_wire(sagacity, bank, "order-13")
        message = api.next()
        (request,) = sagacity.pending("order-13")
        sagacity.edit(
            "order-13",
            approver="carol",
            request_id=request.request_id,
            new_input={"amount": "999999", "to": "acct-9"},
        )
        for action in ("sagacity_approve", "sagacity_reject"):
            body = click_body(message, "U0BOB", action, trigger=action)
            refused = post(slack_client, body, signed_headers(body))
            assert refused.status_code == 410
        assert [p for p, _ in decisions(sagacity, "order-13")] == ["REJECTED"]  # the edit's
