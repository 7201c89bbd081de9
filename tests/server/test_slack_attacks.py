"""Attacks on the Slack channel: replays, skew, forged bodies, strangers, stale messages.

Every click is signed exactly as Slack signs (HMAC-SHA256 of `v0:{timestamp}:{body}`
under the signing secret) and posted to the real app; outbound calls go to the local
stand-in of Slack's Web API. Each attack reads the journal back: it decided nothing
it should not have.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sagacity import (
    ApproverGroup,
    Escalator,
    Reversibility,
    Sagacity,
    compensable,
)
from sagacity.audit._keys import PrivateKey, generate_key
from sagacity.server import SlackInteractions, SlackNotifier, create_app
from sagacity.server._slack import request_message
from sagacity.testing import FakeClock
from tests.server._bank import ALICE, Bank, start_wire, token_auth
from tests.server._slack_api import ApiCall, SlackApi, block_kit_problems, slack_api
from tests.server.test_slack import (
    CHANNEL,
    SIGNING_SECRET,
    USERS,
    click_body,
    decisions,
    post,
    signed_headers,
)


class Clock:
    """Unix seconds that a test moves by hand (the click endpoint's clock)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now


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
    """A SQLite Sagacity that posts each request to Slack and signs its approvals."""
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
def clock() -> Clock:
    """The click endpoint's time."""
    return Clock()


@pytest.fixture
def interactions(notifier: SlackNotifier, clock: Clock) -> Iterator[SlackInteractions]:
    """The click endpoint, on the test's clock."""
    taking = SlackInteractions(SIGNING_SECRET, users=USERS, notifier=notifier, clock=clock)
    yield taking
    taking.close()


@pytest.fixture
def slack_client(sagacity: Sagacity, interactions: SlackInteractions) -> Iterator[TestClient]:
    """The app with the Slack endpoint and the inbox's JSON routes."""
    app = create_app(sagacity, token_auth(), ui=False, slack=interactions)
    with TestClient(app) as client:
        yield client


def signed_at(body: bytes, clock: Clock, offset: float = 0) -> dict[str, str]:
    """Slack's headers for `body`, stamped `offset` seconds from the clock's now."""
    return signed_headers(body, timestamp=int(clock.now + offset))


def signed_payload(payload: Any) -> bytes:
    """A form body `payload=<JSON>`, as Slack sends interactions."""
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def texts_of(call: ApiCall) -> list[str]:
    """Every text of a message's blocks, in order (sections, header, context)."""
    found: list[str] = []
    for block in call.body["blocks"]:
        if "text" in block:
            found.append(block["text"]["text"])
        for element in block.get("elements", []):
            if element.get("type") == "plain_text":
                found.append(element["text"])
    return found


def has_buttons(call: ApiCall) -> bool:
    return any(b["type"] == "actions" for b in call.body["blocks"])


class TestReplays:
    def test_a_replay_within_five_minutes_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient, clock: Clock
    ) -> None:
        """The same signed click, 4 minutes later: 409, one approval of the two needed."""
        start_wire(sagacity, bank, "replay-1", big=True)
        body = click_body(api.next(), "U0ALICE", "sagacity_approve")
        headers = signed_at(body, clock)
        assert post(slack_client, body, headers).status_code == 200
        clock.now += 240
        replayed = post(slack_client, body, headers)
        assert replayed.status_code == 409
        assert "replay" in replayed.json()["error"]
        assert [p["approver"] for _, p in decisions(sagacity, "replay-1")] == ["alice"]

    def test_a_replay_after_five_minutes_is_refused_for_its_age(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient, clock: Clock
    ) -> None:
        """Once its mark could be forgotten, the replay is refused by its timestamp."""
        start_wire(sagacity, bank, "replay-2", big=True)
        body = click_body(api.next(), "U0ALICE", "sagacity_approve")
        headers = signed_at(body, clock)
        assert post(slack_client, body, headers).status_code == 200
        clock.now += 301
        replayed = post(slack_client, body, headers)
        assert replayed.status_code == 401
        assert "timestamp" in replayed.json()["error"]
        clock.now += 3600  # long after: the mark is purged, the age still refuses it
        assert post(slack_client, body, headers).status_code == 401
        assert len(decisions(sagacity, "replay-2")) == 1

    def test_a_click_stamped_five_minutes_ahead_cannot_be_replayed_later(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient, clock: Clock
    ) -> None:
        """A timestamp 300 s ahead stays valid for 10 minutes: so does its mark."""
        start_wire(sagacity, bank, "replay-3", big=True)
        body = click_body(api.next(), "U0ALICE", "sagacity_approve")
        headers = signed_at(body, clock, offset=300)
        assert post(slack_client, body, headers).status_code == 200
        clock.now += 600  # the timestamp is exactly 300 s old: still accepted by age
        replayed = post(slack_client, body, headers)
        assert replayed.status_code == 409
        assert len(decisions(sagacity, "replay-3")) == 1


class TestSkewAndSignatures:
    @pytest.mark.parametrize(
        "stamp", ["", "abc", "1.5e9", "9" * 5000, "-1", "0x6553f100", "1700000000.0"]
    )
    def test_a_timestamp_that_is_no_unix_time_is_401(
        self,
        sagacity: Sagacity,
        bank: Bank,
        api: SlackApi,
        slack_client: TestClient,
        stamp: str,
    ) -> None:
        """Signed over that very timestamp, still refused: 401, never a server error."""
        start_wire(sagacity, bank, "skew-1")
        body = click_body(api.next(), "U0ALICE", "sagacity_approve")
        headers = signed_headers(body)
        headers["X-Slack-Request-Timestamp"] = stamp
        digest = hashlib.sha256  # the signature is over the header as sent
        import hmac

        headers["X-Slack-Signature"] = (
            "v0="
            + hmac.new(SIGNING_SECRET.encode(), f"v0:{stamp}:".encode() + body, digest).hexdigest()
        )
        refused = slack_client.post(
            "/sagacity/slack/interactions",
            content=body,
            headers={k: v.encode("utf-8").decode("latin-1") for k, v in headers.items()},
        )
        assert refused.status_code == 401
        assert not decisions(sagacity, "skew-1")

    def test_a_signature_for_another_body_or_time_is_refused(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient, clock: Clock
    ) -> None:
        """Bob's genuine signature on Alice's body, or moved to another timestamp: 401."""
        start_wire(sagacity, bank, "sig-1")
        message = api.next()
        alice = click_body(message, "U0ALICE", "sagacity_approve")
        bob = click_body(message, "U0BOB", "sagacity_approve")
        swapped = signed_at(bob, clock)
        assert post(slack_client, alice, swapped).status_code == 401
        moved = signed_at(alice, clock)
        moved["X-Slack-Request-Timestamp"] = str(int(clock.now) - 1)
        assert post(slack_client, alice, moved).status_code == 401
        upper = signed_at(alice, clock)
        upper["X-Slack-Signature"] = "v0=" + upper["X-Slack-Signature"][3:].upper()
        assert post(slack_client, alice, upper).status_code == 401
        assert not decisions(sagacity, "sig-1")
        assert post(slack_client, alice, signed_at(alice, clock)).status_code == 200


class TestStrangers:
    def test_a_mapped_user_of_no_principal_with_rights_decides_nothing(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """An unmapped user's Approve and Reject both decide nothing, and nothing runs."""
        start_wire(sagacity, bank, "stranger-1")
        message = api.next()
        for action in ("sagacity_approve", "sagacity_reject"):
            body = click_body(message, "U0EVE", action, trigger=action)
            refused = post(slack_client, body, signed_headers(body))
            assert refused.status_code == 403
            assert "U0EVE" in refused.json()["error"]
        assert not decisions(sagacity, "stranger-1")
        assert bank.log == ["reserve sku-stranger-1"]

    def test_an_approver_outside_the_escalation_group_is_refused(
        self, db_url: str, api: SlackApi, notifier: SlackNotifier, clock: Clock
    ) -> None:
        """Escalated to the leads: alice, an approver but no lead, approves nothing."""
        fake = FakeClock()

        @compensable(reversibility=Reversibility.IRREVERSIBLE, escalate_to="leads")
        def refund(amount: str) -> str:
            """Refund a customer."""
            return "refunded"

        instance = Sagacity.from_url(
            db_url,
            on_approval_request=notifier,
            approval_ttl=600,
            clock=fake,
            approver_groups=[ApproverGroup(name="leads", members=["bob"], ttl=600)],
        )
        (tool,) = instance.wrap(refund)
        instance.saga("refund-9", lambda: tool(amount="40.00"))
        message = api.next()
        fake.advance(minutes=11)
        assert [a.action for a in Escalator(instance).sweep()] == ["escalated"]
        taking = SlackInteractions(SIGNING_SECRET, users=USERS, notifier=notifier, clock=clock)
        try:
            with TestClient(create_app(instance, token_auth(), ui=False, slack=taking)) as client:
                body = click_body(message, "U0ALICE", "sagacity_approve")
                refused = post(client, body, signed_at(body, clock))
                assert refused.status_code == 403, refused.text
                assert "not a member" in refused.json()["error"]
                assert not decisions(instance, "refund-9")
                body = click_body(message, "U0BOB", "sagacity_approve", trigger="2")
                assert post(client, body, signed_at(body, clock)).status_code == 200
            assert [p["approver"] for _, p in decisions(instance, "refund-9")] == ["bob"]
        finally:
            taking.close()
            instance.close()


class TestDecidedElsewhere:
    def test_approved_in_the_inbox_then_clicked_in_slack(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Alice approved over the API; her Slack click, and bob's, approve nothing more."""
        start_wire(sagacity, bank, "elsewhere-1")
        message = api.next()
        (request,) = sagacity.pending("elsewhere-1")
        approved = slack_client.post(
            f"/sagacity/approvals/{request.request_id}/approve",
            json={"sha256": request.input_sha256},
            headers=ALICE,
        )
        assert approved.status_code == 200, approved.text
        for user in ("U0ALICE", "U0BOB"):
            body = click_body(message, user, "sagacity_approve", trigger=user)
            refused = post(slack_client, body, signed_headers(body))
            assert refused.status_code == 409, refused.text
        assert [(p, d["approver"]) for p, d in decisions(sagacity, "elsewhere-1")] == [
            ("APPROVED", "alice")
        ]
        calls = [api.next() for _ in range(4)]
        assert sorted(c.method for c in calls) == ["chat.postEphemeral"] * 2 + ["chat.update"] * 2
        update = next(c for c in calls if c.method == "chat.update")
        assert not has_buttons(update)  # the message no longer asks anyone
        assert "Approved by alice (1 of 1)" in "\n".join(texts_of(update))

    def test_rejected_in_the_inbox_then_clicked_the_message_says_so(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """A stale message's click: 410, and the message loses its buttons and says why."""
        start_wire(sagacity, bank, "elsewhere-2")
        message = api.next()
        sagacity.reject("elsewhere-2", approver="carol", reason="no")
        body = click_body(message, "U0ALICE", "sagacity_approve")
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 410
        calls = {api.next().method: None for _ in range(2)}
        assert set(calls) == {"chat.postEphemeral", "chat.update"}
        assert [p for p, _ in decisions(sagacity, "elsewhere-2")] == ["REJECTED"]

    def test_the_same_approver_twice_through_slack_and_the_api(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """Alice approves in Slack, then over the API: one approval of alice, 1 of 2."""
        start_wire(sagacity, bank, "twice-1", big=True)
        message = api.next()
        (request,) = sagacity.pending("twice-1")
        body = click_body(message, "U0ALICE", "sagacity_approve")
        assert post(slack_client, body, signed_headers(body)).status_code == 200
        again = slack_client.post(
            f"/sagacity/approvals/{request.request_id}/approve",
            json={"sha256": request.input_sha256},
            headers=ALICE,
        )
        assert again.status_code == 409, again.text
        (still,) = sagacity.pending("twice-1")
        assert [a.approver for a in still.approvals] == ["alice"]
        assert still.state == "waiting"


class TestMalformed:
    def test_a_huge_body_is_413(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """A 1 MB body, signed: 413 before anything is parsed; a small one still works."""
        start_wire(sagacity, bank, "huge-1")
        message = api.next()
        body = click_body(message, "U0ALICE", "sagacity_approve") + b"&pad=" + b"x" * 1_000_000
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 413
        assert not decisions(sagacity, "huge-1")

    @pytest.mark.parametrize(
        "payload",
        [
            None,
            [],
            "block_actions",
            {"type": "block_actions"},
            {"type": "view_submission", "user": {"id": "U0ALICE"}},
            {"type": "block_actions", "user": "U0ALICE", "actions": []},
            {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": {"a": 1}},
            {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": [1, 2]},
            {
                "type": "block_actions",
                "user": {"id": "U0ALICE"},
                "actions": [{"action_id": "sagacity_approve", "value": 7}],
            },
            {
                "type": "block_actions",
                "user": {"id": "U0ALICE"},
                "actions": [{"action_id": "sagacity_approve", "value": "[1]"}],
            },
            {
                "type": "block_actions",
                "user": {"id": "U0ALICE"},
                "channel": "C0APPROVE",
                "actions": [{"action_id": "sagacity_approve", "value": "{}"}],
            },
        ],
    )
    def test_a_malformed_signed_payload_is_400(
        self, sagacity: Sagacity, slack_client: TestClient, payload: Any
    ) -> None:
        """Signed, but no click of ours: 400 with a reason, never a server error."""
        body = signed_payload(payload)
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 400, refused.text
        assert refused.json()["ok"] is False

    @pytest.mark.parametrize(
        "body",
        [b"", b"payload=", b"payload=%7B", b"\xff\xfe", b'{"type": "block_actions"}', b"a=1&a=2"],
    )
    def test_a_body_that_is_no_form_is_400(
        self, sagacity: Sagacity, slack_client: TestClient, body: bytes
    ) -> None:
        """Empty, cut, not UTF-8, JSON instead of a form: 400."""
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 400, refused.text

    @pytest.mark.parametrize(
        "value",
        [
            {"request_id": "r" * 600, "saga_id": "s" * 600, "sha256": "0" * 64},
            {"request_id": "x", "saga_id": "", "sha256": "0" * 64},
            {"request_id": "x", "saga_id": "a\x00b", "sha256": "0" * 64},
            {"request_id": ["x"], "saga_id": {"a": 1}, "sha256": "0" * 64},
            {"request_id": "x", "saga_id": "y", "sha256": "0" * 64 + "\n"},
        ],
    )
    def test_a_button_value_naming_nothing_is_4xx(
        self, sagacity: Sagacity, slack_client: TestClient, value: dict[str, Any]
    ) -> None:
        """A signed click whose value names no request of ours: a 4xx, never a 500."""
        payload = {
            "type": "block_actions",
            "user": {"id": "U0ALICE"},
            "actions": [{"action_id": "sagacity_approve", "value": json.dumps(value)}],
        }
        body = signed_payload(payload)
        refused = post(slack_client, body, signed_headers(body))
        assert 400 <= refused.status_code < 500, refused.text
        assert refused.json()["ok"] is False


class TestWhatTheMessageShows:
    def test_an_edited_request_is_posted_as_edited_and_the_old_message_goes_stale(
        self, sagacity: Sagacity, bank: Bank, api: SlackApi, slack_client: TestClient
    ) -> None:
        """The edit's message names its editor; a click on the old one updates it."""
        start_wire(sagacity, bank, "edit-1", amount="100")
        old = api.next()
        (request,) = sagacity.pending("edit-1")
        sagacity.edit(
            "edit-1",
            approver="carol",
            request_id=request.request_id,
            new_input={"amount": "100000", "to": "acct-9"},
        )
        new = api.next()
        assert new.method == "chat.postMessage"
        shown = "\n".join(texts_of(new))
        assert '"amount":"100000"' in shown
        assert "Edited by: carol" in shown  # not shown as the call's own untouched ask
        body = click_body(old, "U0ALICE", "sagacity_approve")
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 410
        calls = [api.next(), api.next()]
        (update,) = [c for c in calls if c.method == "chat.update"]
        assert not has_buttons(update)
        assert "no longer waits" in "\n".join(texts_of(update))
        assert [p for p, _ in decisions(sagacity, "edit-1")] == ["REJECTED"]  # the edit's

    def test_an_input_too_long_to_show_has_no_approve_button(
        self, sagacity: Sagacity, api: SlackApi, slack_client: TestClient
    ) -> None:
        """What is cut cannot be approved in Slack: the click on a crafted button is 409."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def transfer(memo: str, to: str) -> str:
            """Transfer money."""
            return "sent"

        (tool,) = sagacity.wrap(transfer)
        sagacity.saga("long-1", lambda: tool(memo="x" * 3000, to="acct-attacker"))
        message = api.next()
        shown = "\n".join(texts_of(message))
        assert "acct-attacker" not in shown  # cut: the approver cannot see where it goes
        assert "open the inbox" in shown.lower()
        approve = [
            e
            for b in message.body["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == "sagacity_approve"
        ]
        assert approve == []
        (request,) = sagacity.pending("long-1")
        value = json.dumps(
            {"request_id": request.request_id, "saga_id": "long-1", "sha256": request.input_sha256}
        )
        payload = {
            "type": "block_actions",
            "user": {"id": "U0ALICE"},
            "actions": [{"action_id": "sagacity_approve", "value": value}],
        }
        body = signed_payload(payload)
        refused = post(slack_client, body, signed_headers(body))
        assert refused.status_code == 409
        assert "inbox" in refused.json()["error"]
        assert not decisions(sagacity, "long-1")
        reject = click_body(message, "U0BOB", "sagacity_reject")
        assert post(slack_client, reject, signed_headers(reject)).status_code == 200

    def test_a_request_that_needs_a_justification_is_approved_in_the_inbox(
        self, sagacity: Sagacity, api: SlackApi, slack_client: TestClient
    ) -> None:
        """A button cannot carry the approver's words: no Approve, and a crafted one is 403."""

        @compensable(reversibility=Reversibility.IRREVERSIBLE, justification_required=True)
        def close_account(account: str) -> str:
            """Close an account."""
            return "closed"

        (tool,) = sagacity.wrap(close_account)
        sagacity.saga("why-1", lambda: tool(account="acct-7"))
        message = api.next()
        assert "needs a justification" in "\n".join(texts_of(message))
        assert [
            e["action_id"]
            for b in message.body["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
        ] == ["sagacity_reject"]
        (request,) = sagacity.pending("why-1")
        value = json.dumps(
            {"request_id": request.request_id, "saga_id": "why-1", "sha256": request.input_sha256}
        )
        payload = {
            "type": "block_actions",
            "user": {"id": "U0ALICE"},
            "actions": [{"action_id": "sagacity_approve", "value": value}],
        }
        body = signed_payload(payload)
        refused = post(slack_client, body, signed_headers(body))
        assert 400 <= refused.status_code < 500
        assert not decisions(sagacity, "why-1")

    @pytest.mark.parametrize("what", ["input", "astral", "reason", "members", "saga"])
    def test_every_block_keeps_within_slacks_limits(
        self, what: str, api: SlackApi, notifier: SlackNotifier
    ) -> None:
        """A long input, reason, group or saga id still makes a message Slack accepts."""
        fake = FakeClock()
        members = [f"member-{n:04d}-of-the-very-large-group" for n in range(400)]

        def refund(note: str) -> str:
            return "refunded"

        refund.__doc__ = "Refund " + "r" * (5000 if what == "reason" else 10)  # the reason
        refund = compensable(reversibility=Reversibility.IRREVERSIBLE, escalate_to="leads")(refund)

        instance = Sagacity.from_url(
            "memory://",
            on_approval_request=notifier,
            approval_ttl=600,
            clock=fake,
            approver_groups=[
                ApproverGroup(
                    name="leads", members=members if what == "members" else ["bob"], ttl=600
                )
            ],
        )
        (tool,) = instance.wrap(refund)
        saga_id = ("\U0001d49c" * 500) if what == "saga" else "limits-1"
        note = {"input": "\u200b" * 4000, "astral": "\U0001d49c" * 1600}.get(what, "n")
        instance.saga(saga_id, lambda: tool(note=note))
        fake.advance(minutes=11)
        Escalator(instance).sweep()
        (request,) = instance.pending(saga_id)
        for built in (request_message(request), request_message(request, reminder=True)):
            assert block_kit_problems(built) == []
        assert block_kit_problems(api.next().body) == []
        notifier.close()
        assert (notifier.delivered, notifier.failed) == (1, 0)  # Slack took it


class TestTamperedStore:
    def test_a_request_whose_stored_input_was_changed_is_not_decided_in_slack(
        self, bank: Bank, api: SlackApi, notifier: SlackNotifier, clock: Clock
    ) -> None:
        """A store row edited outside sagacity: the click is 409 and the message goes stale."""
        import dataclasses

        import rfc8785

        from sagacity.approval import InMemoryApprovalStore
        from sagacity.journal import InMemoryJournal, JsonValue

        store = InMemoryApprovalStore()
        instance = Sagacity(InMemoryJournal(), store, on_approval_request=notifier)
        instance.wrap(bank)
        start_wire(instance, bank, "forged-1")
        message = api.next()
        (request,) = instance.pending("forged-1")
        forged: dict[str, JsonValue] = {"amount": "999999", "to": "acct-evil"}
        store.replace(
            dataclasses.replace(
                request,
                input=forged,
                input_sha256=hashlib.sha256(rfc8785.dumps(forged)).hexdigest(),
            )
        )
        taking = SlackInteractions(SIGNING_SECRET, users=USERS, notifier=notifier, clock=clock)
        with TestClient(create_app(instance, token_auth(), ui=False, slack=taking)) as client:
            body = click_body(message, "U0ALICE", "sagacity_approve")
            refused = post(client, body, signed_at(body, clock))
        taking.close()
        assert refused.status_code == 409, refused.text
        assert not decisions(instance, "forged-1")
        calls = [api.next(), api.next()]
        (update,) = [c for c in calls if c.method == "chat.update"]
        assert not has_buttons(update)


class TestTheBotToken:
    def test_a_redirect_does_not_carry_the_token_elsewhere(self, bank: Bank) -> None:
        """The Web API answers 302 to another host: the call fails, the token stays home."""
        import http.server
        import queue
        import threading

        stolen: queue.Queue[str] = queue.Queue()

        class Thief(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stolen.put(self.headers.get("Authorization", ""))
                self.send_response(200)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        thief = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Thief)
        elsewhere = f"http://127.0.0.1:{thief.server_address[1]}/steal"

        class Redirect(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(302)
                self.send_header("Location", elsewhere)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        redirect = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        servers = [thief, redirect]
        threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
        for thread in threads:
            thread.start()
        try:
            sender = SlackNotifier(
                "xoxb-secret-token",
                channel=CHANNEL,
                api_base=f"http://127.0.0.1:{redirect.server_address[1]}/api",
                retries=0,
            )
            instance = Sagacity.from_url("memory://", on_approval_request=sender)
            instance.wrap(bank)
            start_wire(instance, bank, "token-1")
            sender.close()
        finally:
            for server in servers:
                server.shutdown()
                server.server_close()
        assert (sender.delivered, sender.failed) == (0, 1)
        assert stolen.empty()
