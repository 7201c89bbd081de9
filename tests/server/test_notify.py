"""The webhook: a real local HTTP server receives signed bodies; a dead one delays nothing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagacity import Sagacity, SagaOutcome
from sagacity.server import WebhookNotifier
from tests.server._bank import Bank, start_wire

KEY = b"s3cret-key-of-32-bytes-exactly!!"
SECRET = "whsec_" + base64.b64encode(KEY).decode()


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]]
    answers: list[int]
    hang: threading.Event | None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.hang is not None:
            self.hang.wait(30)
        # Header names are case-insensitive: keep them lowercase, as the spec writes them.
        self.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        status = self.answers.pop(0) if self.answers else 204
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class Receiver:
    """A local webhook receiver on a free port."""

    def __init__(self, *, answers: list[int] | None = None, hang: bool = False) -> None:
        handler: type[_Receiver] = type(
            "Handler",
            (_Receiver,),
            {
                "received": [],
                "answers": list(answers or []),
                "hang": threading.Event() if hang else None,
            },
        )
        self.handler = handler
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def received(self) -> list[tuple[dict[str, str], bytes]]:
        return self.handler.received

    def release(self) -> None:
        if self.handler.hang is not None:
            self.handler.hang.set()

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.received) >= count, self.received

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


def _sagacity(db_url: str, bank: Bank, notifier: WebhookNotifier) -> Sagacity:
    instance = Sagacity.from_url(db_url, on_approval_request=notifier)
    instance.wrap(bank)
    return instance


def test_the_receiver_gets_the_request_signed(db_url: str, bank: Bank, receiver: Receiver) -> None:
    """The body is the request's JSON; webhook-signature is HMAC-SHA256 of id.timestamp.body."""
    notifier = WebhookNotifier(receiver.url, SECRET, backoff=0.01)
    sagacity = _sagacity(db_url, bank, notifier)
    try:
        start_wire(sagacity, bank, "hook-1", amount="42")
        receiver.wait_for(1)
    finally:
        notifier.close()
        sagacity.close()
    headers, body = receiver.received[0]
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    digest = hmac.new(KEY, signed, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(digest).decode()
    assert hmac.compare_digest(headers["webhook-signature"], expected)
    assert headers["x-sagacity-event"] == "approval.requested"
    sent = json.loads(body)
    assert sent["saga_id"] == "hook-1"
    assert sent["tool_name"] == "wire"
    assert sent["input"] == {"amount": "42", "to": "acct-1"}
    assert notifier.delivered == 1


def test_failures_are_retried_with_the_same_delivery_id(db_url: str, bank: Bank) -> None:
    """Two 503 answers, then 200: delivered on the third attempt, one delivery id."""
    receiver = Receiver(answers=[503, 503, 200])
    notifier = WebhookNotifier(receiver.url, SECRET, retries=3, backoff=0.01)
    sagacity = _sagacity(db_url, bank, notifier)
    try:
        start_wire(sagacity, bank, "hook-2")
        receiver.wait_for(3)
        deadline = time.monotonic() + 5
        while notifier.delivered < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        notifier.close()
        sagacity.close()
        receiver.close()
    ids = {headers["webhook-id"] for headers, _ in receiver.received}
    assert len(receiver.received) == 3
    assert len(ids) == 1
    assert notifier.delivered == 1
    assert notifier.failed == 0


def test_a_hanging_webhook_does_not_delay_the_call(db_url: str, bank: Bank) -> None:
    """While the receiver hangs, the saga still returns AWAITING_APPROVAL at once."""
    receiver = Receiver(hang=True)
    notifier = WebhookNotifier(receiver.url, SECRET, timeout=20, retries=0)
    sagacity = _sagacity(db_url, bank, notifier)
    try:
        started = time.monotonic()
        first = start_wire(sagacity, bank, "hook-3")
        second = start_wire(sagacity, bank, "hook-4")
        elapsed = time.monotonic() - started
        assert first.outcome is SagaOutcome.AWAITING_APPROVAL
        assert second.outcome is SagaOutcome.AWAITING_APPROVAL
        # The receiver has not answered the first POST yet: the calls did not wait for it.
        assert receiver.received == []
        assert elapsed < 5.0, elapsed
    finally:
        receiver.release()
        notifier.close()
        sagacity.close()
        receiver.close()


def test_a_dead_webhook_fails_nothing(db_url: str, bank: Bank) -> None:
    """Nothing listens on the URL: the saga waits for approval as usual; the failure is counted."""
    notifier = WebhookNotifier(
        "http://127.0.0.1:9/hook", SECRET, retries=1, backoff=0.01, timeout=1
    )
    sagacity = _sagacity(db_url, bank, notifier)
    try:
        result = start_wire(sagacity, bank, "hook-5")
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert len(sagacity.pending("hook-5")) == 1
        deadline = time.monotonic() + 10
        while notifier.failed < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert notifier.failed == 1
    finally:
        notifier.close()
        sagacity.close()


def test_a_full_queue_drops_and_never_blocks(db_url: str, bank: Bank) -> None:
    """With a hanging receiver and a queue of one, extra notifications are dropped at once."""
    receiver = Receiver(hang=True)
    notifier = WebhookNotifier(receiver.url, SECRET, timeout=20, retries=0, queue_size=1)
    sagacity = _sagacity(db_url, bank, notifier)
    try:
        started = time.monotonic()
        for n in range(4):
            start_wire(sagacity, bank, f"hook-q{n}")
        assert time.monotonic() - started < 5.0
        assert notifier.failed >= 2
    finally:
        receiver.release()
        notifier.close()
        sagacity.close()
        receiver.close()


def test_bad_settings_are_refused() -> None:
    """A non-http URL or an empty secret is a ConfigurationError."""
    from sagacity.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="http"):
        WebhookNotifier("file:///etc/passwd", SECRET)
    with pytest.raises(ConfigurationError, match="secret"):
        WebhookNotifier("http://127.0.0.1/", "")
