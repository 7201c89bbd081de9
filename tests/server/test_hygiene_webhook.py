"""The webhook follows Standard Webhooks: a real loopback receiver verifies it as the spec does.

The receiver below implements the spec's verification, independently of sagacity: the
secret is `whsec_` + base64 of the key; the signed content is `{id}.{timestamp}.{body}`;
`webhook-signature` holds space-separated `v1,<base64>` signatures; a timestamp more
than five minutes away, or an id seen already, is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sagacity import Sagacity
from sagacity.errors import ConfigurationError
from sagacity.server import WebhookNotifier, sign_body
from tests.server._bank import Bank, start_wire

KEY = os.urandom(32)
SECRET = "whsec_" + base64.b64encode(KEY).decode()
TOLERANCE = 5 * 60


def spec_verify(secret: str, headers: dict[str, str], body: bytes, seen: set[str]) -> str:
    """Standard Webhooks verification; "" when the delivery is genuine, else why not.

    `seen` holds the ids the receiver accepted already: one of them again is a replay.
    """
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    signatures = headers.get("webhook-signature", "")
    if not (msg_id and stamp.isdigit() and signatures):
        return "missing headers"
    if abs(time.time() - int(stamp)) > TOLERANCE:
        return "timestamp out of tolerance"
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for signature in signatures.split(" "):
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return "replayed" if msg_id in seen else ""
    return "no signature matches"


@dataclass
class Receiver:
    """A loopback receiver: answers from `answers` (then 204), records what it verified."""

    answers: list[int] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    redirected_hits: int = 0
    seen: set[str] = field(default_factory=set)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.deliveries) >= count, timeout=20)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    """A receiver on a free loopback port, and its URL."""
    state = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/moved":
                state.redirected_hits += 1
                self._answer(200)
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            with state.changed:
                state.verdicts.append(spec_verify(SECRET, headers, body, state.seen))
                state.deliveries.append((headers, body))
                status = state.answers.pop(0) if state.answers else 204
                if 200 <= status < 300:  # an id is spent once accepted
                    state.seen.add(headers.get("webhook-id", ""))
                state.changed.notify_all()
            self._answer(status)

        do_GET = do_POST

        def _answer(self, status: int) -> None:
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "/moved")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def _run(db_url: str, bank: Bank, notifier: WebhookNotifier, saga_id: str) -> str:
    """Start a saga that asks approval; return its request id."""
    sagacity = Sagacity.from_url(db_url, on_approval_request=notifier)
    sagacity.wrap(bank)
    try:
        (request,) = start_wire(sagacity, bank, saga_id).pending
        return request.request_id
    finally:
        sagacity.close()


class TestSignature:
    def test_a_spec_receiver_verifies_the_delivery(
        self, db_url: str, bank: Bank, receiver: tuple[Receiver, str]
    ) -> None:
        """webhook-id, webhook-timestamp and a v1 signature over id.timestamp.body verify."""
        state, url = receiver
        notifier = WebhookNotifier(url, SECRET, backoff=0.01)
        try:
            request_id = _run(db_url, bank, notifier, "hook-1")
            state.wait_for(1)
        finally:
            notifier.close()
        assert state.verdicts == [""]
        headers, body = state.deliveries[0]
        assert headers["webhook-id"] == f"msg_{request_id}"
        assert headers["webhook-signature"].startswith("v1,")
        assert headers["x-sagacity-event"] == "approval.requested"
        assert json.loads(body)["saga_id"] == "hook-1"
        assert notifier.delivered == 1

    def test_a_replayed_or_altered_delivery_is_refused_by_the_receiver(
        self, db_url: str, bank: Bank, receiver: tuple[Receiver, str]
    ) -> None:
        """What the spec lets a receiver refuse: the same id again, another body, old time."""
        state, url = receiver
        notifier = WebhookNotifier(url, SECRET, backoff=0.01)
        try:
            _run(db_url, bank, notifier, "hook-2")
            state.wait_for(1)
        finally:
            notifier.close()
        headers, body = state.deliveries[0]
        assert spec_verify(SECRET, headers, body, state.seen) == "replayed"
        assert spec_verify(SECRET, headers, body + b" ", set()) == "no signature matches"
        old = dict(headers, **{"webhook-timestamp": str(int(headers["webhook-timestamp"]) - 301)})
        assert spec_verify(SECRET, old, body, set()) == "timestamp out of tolerance"

    def test_sign_body_is_the_spec_signature(self) -> None:
        """The spec's own example: its secret, id, timestamp and body give its signature."""
        signature = sign_body(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            b'{"test": 2432232314}',
            webhook_id="msg_p5jXN8AQM9LWM0D4loKWxJek",
            timestamp=1614265330,
        )
        assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

    @pytest.mark.parametrize(
        ("secret", "why"),
        [("s3cret", "'whsec_' and the base64"), ("whsec_not base64!", "is not base64")],
    )
    def test_a_secret_not_in_the_spec_form_is_refused(self, secret: str, why: str) -> None:
        """A plain string is not a Standard Webhooks secret: refused before anything is sent."""
        with pytest.raises(ConfigurationError, match=why):
            WebhookNotifier("http://127.0.0.1:9/hook", secret)


class TestDelivery:
    def test_a_redirect_is_a_failed_delivery_and_retries_keep_one_id(
        self,
        db_url: str,
        bank: Bank,
        receiver: tuple[Receiver, str],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """302, then 302: not followed, not delivered; given up with an ERROR naming the event."""
        state, url = receiver
        state.answers = [302, 302]
        notifier = WebhookNotifier(url, SECRET, retries=1, backoff=0.01)
        with caplog.at_level(logging.WARNING, logger="sagacity.server.webhook"):
            try:
                request_id = _run(db_url, bank, notifier, "hook-3")
                state.wait_for(2)
            finally:
                notifier.close()
        assert state.redirected_hits == 0
        assert (notifier.delivered, notifier.failed) == (0, 1)
        assert {h["webhook-id"] for h, _ in state.deliveries} == {f"msg_{request_id}"}
        assert state.verdicts[0] == ""
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert f"gave up on approval.requested of saga 'hook-3' request {request_id}" in errors[0]
        assert "after 2 attempt(s); last: HTTP 302" in errors[0]

    def test_a_failure_then_success_is_delivered(
        self, db_url: str, bank: Bank, receiver: tuple[Receiver, str]
    ) -> None:
        """503, then 200: delivered on the second attempt, each attempt signed afresh."""
        state, url = receiver
        state.answers = [503, 200]
        notifier = WebhookNotifier(url, SECRET, retries=3, backoff=0.01)
        try:
            _run(db_url, bank, notifier, "hook-4")
            state.wait_for(2)
        finally:
            notifier.close()
        assert (notifier.delivered, notifier.failed) == (1, 0)
        assert state.verdicts == ["", ""]
        (first, _), (second, _) = state.deliveries
        assert first["webhook-id"] == second["webhook-id"]
