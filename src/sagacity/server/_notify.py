"""A webhook for new approval requests: signed, retried, and never on the tool call's path.

`WebhookNotifier` is an `on_approval_request` hook. Calling it only puts the request on
a bounded queue and returns; one background thread POSTs each request's JSON
(`ApprovalRequest.to_json()`) to the URL with::

    Content-Type: application/json
    X-Sagacity-Event: approval.requested
    X-Sagacity-Delivery: <a random id, the same on every retry of one delivery>
    X-Sagacity-Signature: sha256=<hex HMAC-SHA256 of the exact body, keyed by the secret>

A delivery that fails (a connection error, a timeout, a status other than 2xx) is
retried `retries` times, waiting `backoff`, then twice that, and so on (capped at 60 s).
A slow or dead receiver therefore delays only other notifications, never a tool call;
when the queue is full a notification is dropped and logged (the request itself is in
the journal and the store, and `GET /sagacity/approvals` lists it).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid

import orjson

from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError

__all__ = ["WebhookNotifier", "sign_body"]

_log = logging.getLogger("sagacity.server.webhook")
_STOP = object()


def sign_body(secret: str | bytes, body: bytes) -> str:
    """The `X-Sagacity-Signature` value of `body`: `sha256=` and the HMAC's hex digest."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


class WebhookNotifier:
    """POST each new approval request to a webhook, off the caller's thread.

    Args:
        url: Where to POST (http or https).
        secret: The HMAC-SHA256 key the receiver verifies the signature with.
        retries: How many times a failed delivery is tried again.
        backoff: Seconds before the first retry; doubled for each next one (max 60 s).
        timeout: Seconds one POST may take before it counts as failed.
        queue_size: How many notifications may wait; beyond that new ones are dropped.
    """

    def __init__(
        self,
        url: str,
        secret: str | bytes,
        *,
        retries: int = 5,
        backoff: float = 1.0,
        timeout: float = 5.0,
        queue_size: int = 1000,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"webhook URL {url!r} must be http:// or https://")
        if not secret:
            raise ConfigurationError("a webhook needs a non-empty secret to sign its bodies")
        if retries < 0 or backoff < 0 or timeout <= 0 or queue_size < 1:
            raise ConfigurationError(
                "webhook retries and backoff must not be negative, timeout and queue_size "
                f"must be positive (got {retries}, {backoff}, {timeout}, {queue_size})"
            )
        self.url = url
        self._secret = secret.encode("utf-8") if isinstance(secret, str) else secret
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._closed = threading.Event()
        self._count = threading.Lock()
        self.delivered = 0
        """How many notifications were delivered (a 2xx answer)."""
        self.failed = 0
        """How many were given up on after every retry, or dropped on a full queue."""
        self._thread = threading.Thread(target=self._run, name="sagacity-webhook", daemon=True)
        self._thread.start()

    def __call__(self, request: ApprovalRequest) -> None:
        """Queue `request` for delivery and return at once; never raises."""
        try:
            if self._closed.is_set():
                _log.warning("webhook closed: request %s not sent", request.request_id)
                return
            body = orjson.dumps(request.to_json())
            self._queue.put_nowait(body)
        except queue.Full:
            self._failed()
            _log.warning(
                "webhook queue full: saga %r request %s not sent to %s",
                request.saga_id,
                request.request_id,
                self.url,
            )
        except Exception:  # a hook must never fail the call that asked for approval
            self._failed()
            _log.exception("webhook: cannot queue request %s", request.request_id)

    def _failed(self) -> None:
        with self._count:  # callers' threads and the delivery thread both count
            self.failed += 1

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking notifications; deliver what is queued for up to `timeout` seconds."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)

    def __enter__(self) -> WebhookNotifier:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, bytes)
            self._deliver(item)

    def _deliver(self, body: bytes) -> None:
        delivery = uuid.uuid4().hex
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "sagacity-webhook",
            "X-Sagacity-Event": "approval.requested",
            "X-Sagacity-Delivery": delivery,
            "X-Sagacity-Signature": sign_body(self._secret, body),
        }
        wait = self.backoff
        for attempt in range(self.retries + 1):
            if attempt:
                # While closing, a dead receiver must not hold the process for minutes.
                if self._closed.wait(0) and attempt > 1:
                    break
                time.sleep(min(wait, 60.0))
                wait *= 2
            try:
                post = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(post, timeout=self.timeout) as answer:
                    if 200 <= answer.status < 300:
                        self.delivered += 1
                        return
                    problem = f"HTTP {answer.status}"
            except urllib.error.HTTPError as error:
                problem = f"HTTP {error.code}"
            except Exception as error:  # network errors of every kind: retried
                problem = f"{type(error).__name__}: {error}"
            _log.warning(
                "webhook %s delivery %s attempt %d failed: %s",
                self.url,
                delivery,
                attempt + 1,
                problem,
            )
        self._failed()
        _log.error("webhook %s: gave up on delivery %s", self.url, delivery)
