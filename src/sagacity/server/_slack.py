"""Approval requests in Slack: a Block Kit message with Approve and Reject buttons.

`SlackNotifier` is an `on_approval_request` hook (and its `remind` an
`on_approval_reminder` one): it queues a `chat.postMessage` (`Outbox`) with the tool,
the saga, the reason, the exact input (canonical JSON, as plain text: no mrkdwn, no
links, no mentions) and its sha256, and two buttons whose value binds the request id,
the saga and the hash. `SlackInteractions` (`_slack_clicks`) takes the buttons' clicks.
Every text is kept within Slack's limits (Slack refuses a message past them whole); an
input too long to show whole is cut, and its message has no Approve button.

Outbound calls go to `api_base` (default `https://slack.com/api`) with the bot token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError
from sagacity.server._outbox import Outbox
from sagacity.server._shown import RequestFacts, one_line

__all__ = [
    "APPROVE_ACTION",
    "REJECT_ACTION",
    "SLACK_API",
    "SlackNotifier",
    "request_message",
    "shows_whole_input",
    "slack_signature",
]

_log = logging.getLogger("sagacity.server.slack")
SLACK_API = "https://slack.com/api"
APPROVE_ACTION = "sagacity_approve"
REJECT_ACTION = "sagacity_reject"
_TEXT_LIMIT = 3000
"""The most characters a section's text may hold: Slack refuses a message past it whole."""
_INPUT_HEADING = "Exact input (canonical JSON):\n"


def slack_signature(secret: str | bytes, timestamp: str | int, body: bytes) -> str:
    """The `X-Slack-Signature` of a request, as Slack computes it.

    `v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{body}` under the signing secret.
    """
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    signed = f"v0:{timestamp}:".encode() + body
    return "v0=" + hmac.new(key, signed, hashlib.sha256).hexdigest()


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def _length(text: str) -> int:
    """`text`'s length as the stricter reading of Slack's limits counts it: UTF-16 units.

    A character past U+FFFF (an emoji, a mathematical letter) counts twice.
    """
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def _fit(text: str, limit: int = _TEXT_LIMIT, *, note: str = "") -> str:
    """`text` cut to at most `limit` characters, ending with `…` and `note` when cut."""
    if _length(text) <= limit:
        return text
    budget = limit - _length(note) - 1
    kept = 0
    for end, character in enumerate(text):
        kept += 2 if ord(character) > 0xFFFF else 1
        if kept > budget:
            return text[:end] + "…" + note
    return text


def _input_text(facts: RequestFacts) -> tuple[str, bool]:
    """The input's section text, and whether it holds the whole input."""
    text = _INPUT_HEADING + facts.input_json
    if _length(text) <= _TEXT_LIMIT:
        return text, True
    note = (
        f" (cut: the input is {len(facts.input_json)} characters; the inbox shows all of it, "
        "and the hash below is of all of it)"
    )
    return _fit(text, note=note), False


def shows_whole_input(request: ApprovalRequest) -> bool:
    """Whether `request`'s message shows its whole input: only then can it be approved there.

    An input too long for a Slack section is cut, and what an approver has not seen is
    not approved from Slack: such a message has a Reject button only, and a click on
    Approve for it is refused.
    """
    return _input_text(RequestFacts.of(request))[1]


def request_message(
    request: ApprovalRequest, *, reminder: bool = False, decided: str | None = None
) -> dict[str, Any]:
    """The Block Kit message of `request` (without its channel): facts, input, hash, buttons.

    Every value a model, tool or caller wrote is plain text on one line (`one_line`),
    and every text is cut to Slack's limits (a message past them is refused whole).
    `decided` (who decided what) replaces the buttons with that line once the request
    no longer waits; while it waits for more approvers, the line is shown above them.
    An input too long to show whole gets no Approve button (`shows_whole_input`), nor
    does a request whose approval needs a justification: both are approved in the inbox.
    """
    facts = RequestFacts.of(request)
    value = orjson.dumps(
        {"request_id": request.request_id, "saga_id": request.saga_id, "sha256": facts.input_sha256}
    ).decode()
    shown_input, whole = _input_text(facts)
    title = ("Reminder: approval still needed: " if reminder else "Approval needed: ") + facts.tool
    details = [
        f"Saga: {facts.saga_id}",
        f"Reason: {facts.reason}",
        f"Request: {facts.request_id}",
        f"Expires: {facts.expires_at or 'never'}",
        f"Approvals: {facts.approvals}",
    ]
    if facts.edited_by is not None:
        details.append(
            f"Edited by: {facts.edited_by} (a person changed the input the call asked for; "
            "they cannot approve it)"
        )
    if facts.started_by is not None:
        details.append(f"Started by: {facts.started_by} (cannot approve it)")
    if facts.escalation is not None:
        details.append(f"Escalated {facts.escalation}")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(_fit(one_line(title), 150))},
        {"type": "section", "text": _plain(_fit("\n".join(details), note=" (cut)"))},
        {"type": "section", "text": _plain(shown_input)},
        {"type": "section", "text": _plain(f"sha256 {facts.input_sha256}")},
    ]
    waiting = decided is None or request.state == "waiting"
    if decided is not None:
        blocks.append({"type": "context", "elements": [_plain(_fit(one_line(decided), 2000))]})
    if waiting and request.problem is None:
        buttons: list[dict[str, Any]] = []
        elsewhere = None
        if not whole:
            elsewhere = "The input is too long to show here whole: open the inbox to see all of it"
        elif request.justification_required:  # a button cannot say why the approver approves
            elsewhere = "Approving it needs a justification in the approver's own words"
        if elsewhere is None:
            buttons.append(
                {
                    "type": "button",
                    "action_id": APPROVE_ACTION,
                    "style": "primary",
                    "text": _plain("Approve"),
                    "value": value,
                    "confirm": {
                        "title": _plain("Approve this exact input?"),
                        "text": _plain(f"sha256 {facts.input_sha256}"),
                        "confirm": _plain("Approve"),
                        "deny": _plain("Cancel"),
                    },
                }
            )
        else:
            blocks.append(
                {
                    "type": "context",
                    "elements": [
                        _plain(f"{elsewhere}: approve it in the inbox. Reject works here.")
                    ],
                }
            )
        buttons.append(
            {
                "type": "button",
                "action_id": REJECT_ACTION,
                "style": "danger",
                "text": _plain("Reject"),
                "value": value,
            }
        )
        blocks.append({"type": "actions", "block_id": "sagacity_decision", "elements": buttons})
    fallback = f"{title} in saga {facts.saga_id} (sha256 {facts.input_sha256[:12]}…)"
    return {"text": one_line(fallback, 3000), "blocks": blocks}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is a failed call: urllib would follow it with the bot token, to any host."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclasses.dataclass(frozen=True, slots=True)
class _ApiCall:
    method: str
    body: dict[str, Any] | Callable[[], dict[str, Any]]
    event: str
    saga_id: str
    request_id: str
    tool_name: str


class SlackNotifier(Outbox[_ApiCall]):
    """Post each new approval request (and each reminder) to a Slack channel.

    Args:
        token: The bot token (`xoxb-…`) with the `chat:write` scope.
        channel: The channel id (`C…`) for every tool not in `channels`.
        channels: Channel ids by tool name.
        api_base: Where Slack's Web API is (tests point it at a local server).
        retries: How many times a failed call is tried again (429 and 5xx included).
        backoff: Seconds before the first retry; doubled for each next one (max 60 s).
        timeout: Seconds one call may take before it counts as failed.
        queue_size: How many calls may wait; beyond that new ones are dropped.
    """

    def __init__(
        self,
        token: str,
        *,
        channel: str | None = None,
        channels: Mapping[str, str] | None = None,
        api_base: str = SLACK_API,
        retries: int = 5,
        backoff: float = 1.0,
        timeout: float = 5.0,
        queue_size: int = 1000,
    ) -> None:
        if not token or any(c in token for c in "\r\n"):
            raise ConfigurationError("a SlackNotifier needs the bot token (xoxb-…)")
        if not api_base.startswith(("https://", "http://")):
            raise ConfigurationError(f"Slack api_base {api_base!r} must be an http(s) URL")
        if channel is None and not channels:
            raise ConfigurationError("a SlackNotifier needs a channel, or channels by tool")
        if timeout <= 0:
            raise ConfigurationError(f"Slack timeout must be positive, not {timeout}")
        self._token = token
        self.channel = channel
        self.channels = dict(channels or {})
        self.api_base = api_base.rstrip("/")
        self.timeout = timeout
        super().__init__(
            kind="slack",
            target=self.api_base,
            log=_log,
            retries=retries,
            backoff=backoff,
            queue_size=queue_size,
        )

    def channel_of(self, tool_name: str) -> str | None:
        """The channel `tool_name`'s requests are posted to."""
        return self.channels.get(tool_name, self.channel)

    def __call__(self, request: ApprovalRequest) -> None:
        """Queue the message of a new request and return at once; never raises."""
        self._post(request, "approval.requested", reminder=False)

    def remind(self, request: ApprovalRequest) -> None:
        """Queue a reminder of a request still waiting; never raises."""
        self._post(request, "approval.reminder", reminder=True)

    def _post(self, request: ApprovalRequest, event: str, *, reminder: bool) -> None:
        try:
            channel = self.channel_of(request.tool_name)
            if channel is None:
                _log.warning("slack: no channel for tool %r", request.tool_name)
                return

            def body() -> dict[str, Any]:  # built on the sending thread, off the call's path
                return {"channel": channel, **request_message(request, reminder=reminder)}

            self.call(
                "chat.postMessage",
                body,
                event=event,
                saga_id=request.saga_id,
                request_id=request.request_id,
                tool_name=request.tool_name,
            )
        except Exception:  # a hook must never fail the call that asked for approval
            self._failed()
            _log.exception("slack: cannot queue request %s", request.request_id)

    def call(
        self,
        method: str,
        body: dict[str, Any] | Callable[[], dict[str, Any]],
        *,
        event: str,
        saga_id: str,
        request_id: str,
        tool_name: str,
    ) -> None:
        """Queue a Web API call (`chat.update`, `chat.postEphemeral`, ...) about a request.

        `body` is the JSON body, or a function that builds it on the sending thread.
        """
        self._queued(
            _ApiCall(
                method=method,
                body=body,
                event=event,
                saga_id=saga_id,
                request_id=request_id,
                tool_name=tool_name,
            )
        )

    def _detail(self, item: _ApiCall) -> str:
        return f", {item.method}"

    def _attempt(self, item: _ApiCall) -> str:
        """Call the Web API once; the problem, or "" when Slack answered ok."""
        post = urllib.request.Request(
            f"{self.api_base}/{item.method}",
            data=orjson.dumps(item.body() if callable(item.body) else item.body),
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "Authorization": f"Bearer {self._token}",
                "User-Agent": "sagacity-slack",
            },
            method="POST",
        )
        try:
            with _OPENER.open(post, timeout=self.timeout) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, text = error.code, b""
            error.close()
        except Exception as error:  # network errors of every kind: retried
            return f"{type(error).__name__}: {error}"
        if status != 200:
            return f"HTTP {status}"
        try:
            answer_json = orjson.loads(text)
        except orjson.JSONDecodeError:
            return "the answer is not JSON"
        if not isinstance(answer_json, dict) or answer_json.get("ok") is not True:
            why = answer_json.get("error") if isinstance(answer_json, dict) else None
            return f"Slack answered not ok: {why}"
        return ""
