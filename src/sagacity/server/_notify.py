"""A webhook for approval requests and their decisions: signed, retried, off the call's path.

`WebhookNotifier` is an `on_approval_request` hook. Calling it only puts the request on
a bounded queue and returns; one background thread POSTs each request's JSON
(`ApprovalRequest.to_json()`) to the URL, signed as Standard Webhooks
(https://www.standardwebhooks.com) specifies::

    Content-Type: application/json
    webhook-id: msg_<the request id: the same on every retry>
    webhook-timestamp: <Unix seconds of this attempt>
    webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">
    X-Sagacity-Event: approval.requested

`announce_decisions(sagacity)` also delivers every decision made from then on, read from
the journal wherever it was made (`Decision.to_json()`; event `approval.approved`,
`approval.rejected`, `approval.edited` or `approval.expired`; webhook-id
`msg_<request id>.<outcome>`, the same from every process that announces it, so a
receiver that refuses a replayed id gets each decision once).

`remind` is an `on_approval_reminder` hook: it delivers a request at its warning time
(event `approval.reminder`, webhook-id `msg_<request id>.reminder.<Unix seconds of the
expiry it warns of>`), with where it escalates and its escalation if it has one.

The secret is the spec's `whsec_` and the base64 of the key, so any Standard Webhooks
library verifies a delivery; the timestamp lets a receiver refuse an old one, and the
id a replayed one.

A delivery that fails (a connection error, a timeout, any status other than 2xx: a
redirect is not followed, it is a failed delivery) is retried `retries` times, waiting
`backoff`, then twice that, and so on (capped at 60 s); then it is given up with an
ERROR log naming the event, saga and request. A slow or dead receiver therefore delays
only other notifications, never a tool call; when the queue is full a notification is
dropped and logged (the request itself is in the journal and the store, and
`GET /sagacity/approvals` lists it).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

import orjson

from sagacity._decisions import Decision
from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError
from sagacity.server._outbox import Outbox

if TYPE_CHECKING:
    from sagacity.saga import Sagacity
    from sagacity.worker import DecisionEvents

__all__ = ["WebhookNotifier", "sign_body"]

_log = logging.getLogger("sagacity.server.webhook")
_EVENT = "approval.requested"
_SECRET_PREFIX = "whsec_"


def _key_of(secret: str | bytes) -> bytes:
    """The HMAC key of a Standard Webhooks secret (`whsec_` + base64), or raw key bytes."""
    if isinstance(secret, bytes):
        key = secret
    elif secret.startswith(_SECRET_PREFIX):
        try:
            key = base64.b64decode(secret[len(_SECRET_PREFIX) :], validate=True)
        except (binascii.Error, ValueError) as error:
            raise ConfigurationError(
                f"webhook secret {secret[:10]}…: the part after 'whsec_' is not base64 ({error})"
            ) from None
    else:
        raise ConfigurationError(
            "a webhook secret is 'whsec_' and the base64 of the key, as Standard Webhooks "
            "specifies (make one with: 'whsec_' + base64.b64encode(os.urandom(32)).decode()); "
            "pass raw key bytes to use a key of your own"
        )
    if not key:
        raise ConfigurationError("a webhook needs a non-empty secret to sign its bodies")
    return key


def sign_body(secret: str | bytes, body: bytes, *, webhook_id: str, timestamp: int) -> str:
    """The `webhook-signature` of a delivery: `v1,` and the base64 HMAC-SHA256.

    Signed is `{webhook_id}.{timestamp}.{body}`, keyed by the secret (`whsec_` + base64 of
    the key, or the key's bytes), as Standard Webhooks specifies.
    """
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key_of(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is answered as it is (a failed delivery): the body goes to the URL configured."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclasses.dataclass(frozen=True, slots=True)
class _Delivery:
    webhook_id: str
    saga_id: str
    request_id: str
    tool_name: str
    body: bytes
    event: str = _EVENT


class WebhookNotifier(Outbox[_Delivery]):
    """POST each new approval request to a webhook, off the caller's thread.

    Args:
        url: Where to POST (http or https).
        secret: The Standard Webhooks secret, `whsec_` and the base64 of the HMAC-SHA256
            key the receiver verifies the signature with (or the key's raw bytes).
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
        key = _key_of(secret)
        if retries < 0 or backoff < 0 or timeout <= 0 or queue_size < 1:
            raise ConfigurationError(
                "webhook retries and backoff must not be negative, timeout and queue_size "
                f"must be positive (got {retries}, {backoff}, {timeout}, {queue_size})"
            )
        self.url = url
        self._secret = key
        self.timeout = timeout
        super().__init__(
            kind="webhook",
            target=url,
            log=_log,
            retries=retries,
            backoff=backoff,
            queue_size=queue_size,
        )
        self._followers: list[tuple[DecisionEvents, threading.Thread]] = []

    def __call__(self, request: ApprovalRequest) -> None:
        """Queue `request` for delivery and return at once; never raises."""
        try:
            delivery = _Delivery(
                webhook_id=f"msg_{request.request_id}",
                saga_id=request.saga_id,
                request_id=request.request_id,
                tool_name=request.tool_name,
                body=orjson.dumps(request.to_json()),
            )
            self._queued(delivery)
        except Exception:  # a hook must never fail the call that asked for approval
            self._failed()
            _log.exception("webhook: cannot queue request %s", request.request_id)

    def remind(self, request: ApprovalRequest) -> None:
        """Queue the reminder of `request` (event `approval.reminder`) and return; never raises.

        An `on_approval_reminder` hook: `Sagacity(on_approval_reminder=notifier.remind)`.
        The body is the request's JSON with `remind_at`, `escalate_to`, `escalation` and
        the `deadline` it warns of; the webhook-id names the request and that deadline,
        the same on every retry and from every process, so a receiver that refuses a
        replayed id gets each reminder once.
        """
        try:
            deadline = request.deadline
            when = "never" if deadline is None else str(int(deadline.timestamp()))
            body = {
                **request.to_json(),
                **request.escalation_json(),
                "deadline": None if deadline is None else deadline.isoformat(),
            }
            self._queued(
                _Delivery(
                    webhook_id=f"msg_{request.request_id}.reminder.{when}",
                    saga_id=request.saga_id,
                    request_id=request.request_id,
                    tool_name=request.tool_name,
                    body=orjson.dumps(body),
                    event="approval.reminder",
                )
            )
        except Exception:  # a hook must never fail the sweep that reminded
            self._failed()
            _log.exception("webhook: cannot queue the reminder of request %s", request.request_id)

    def decided(self, decision: Decision) -> None:
        """Queue `decision` for delivery and return at once; never raises."""
        self._queued(
            _Delivery(
                webhook_id=f"msg_{decision.request_id}.{decision.outcome.value}",
                saga_id=decision.saga_id,
                request_id=decision.request_id,
                tool_name=decision.tool,
                body=orjson.dumps(decision.to_json()),
                event=f"approval.{decision.outcome.value}",
            )
        )

    def announce_decisions(
        self, sagacity: Sagacity, *, poll_interval: float | None = None, listen: bool | None = None
    ) -> None:
        """Deliver every decision made in `sagacity`'s journal from now on, until `close()`.

        A background thread follows the journal (`sagacity.worker.DecisionEvents`: LISTEN
        on PostgreSQL, a cheap poll on SQLite), so a decision made in any process (the CLI,
        another server, a framework's own "no") is announced. Run it in one process, or
        in several: each decision's webhook-id is the same from all of them.
        """
        from sagacity.worker import DecisionEvents

        events = DecisionEvents(sagacity, poll_interval=poll_interval, listen=listen)
        # Started here, not on the thread: "from now on" is this call, so a decision made
        # right after it returns is news even if the thread has not run yet.
        following = events.follow()

        def follow() -> None:
            try:
                for decision in following:
                    self.decided(decision)
            except Exception:  # the journal went away: say so, the requests stay listed
                if not self._closed.is_set():
                    _log.exception("webhook: stopped announcing decisions")

        thread = threading.Thread(target=follow, name="sagacity-webhook-decisions", daemon=True)
        self._followers.append((events, thread))
        thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking notifications; deliver what is queued for up to `timeout` seconds."""
        if self._closed.is_set():
            return
        for events, thread in self._followers:
            events.close()
            thread.join(timeout)
        super().close(timeout)

    def __enter__(self) -> WebhookNotifier:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _detail(self, item: _Delivery) -> str:
        return f", {item.webhook_id}"

    def _attempt(self, delivery: _Delivery) -> str:
        """POST once, signed now; the problem, or "" when the receiver answered 2xx."""
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "sagacity-webhook",
            "webhook-id": delivery.webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign_body(
                self._secret, delivery.body, webhook_id=delivery.webhook_id, timestamp=timestamp
            ),
            "X-Sagacity-Event": delivery.event,
        }
        post = urllib.request.Request(self.url, data=delivery.body, headers=headers, method="POST")
        try:
            with _OPENER.open(post, timeout=self.timeout) as answer:
                status = answer.status
        except urllib.error.HTTPError as error:
            status = error.code
            error.close()
        except Exception as error:  # network errors of every kind: retried
            return f"{type(error).__name__}: {error}"
        if 200 <= status < 300:
            return ""
        if 300 <= status < 400:
            return f"HTTP {status}: a redirect is not followed, the webhook URL must answer 2xx"
        return f"HTTP {status}"
