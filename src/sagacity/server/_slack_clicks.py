"""The clicks on `SlackNotifier`'s buttons: verified as Slack documents, decided as the inbox.

`SlackInteractions` takes the buttons' clicks at `POST /sagacity/slack/interactions`
(Slack's "Interactivity Request URL"). Each request is verified as Slack documents
(https://api.slack.com/authentication/verifying-requests-from-slack): the
`X-Slack-Signature` header must be `v0=` and the hex HMAC-SHA256, under the app's signing
secret, of `v0:{X-Slack-Request-Timestamp}:{raw body}`, compared in constant time; a
timestamp more than five minutes from now is refused, and so is a request already taken
(a replay: its body's hash is a single-use mark, `_nonces`). The Slack user must be in
the configured table, which maps Slack user ids to principals, and the principal must
hold the `approver` role. The decision is then the inbox's: `Sagacity.approve` bound to
the button's hash (four eyes, N approvers, signed with the server's key when signatures
are required) or `Sagacity.reject` (refused when the input no longer hashes to the
button's), journaled with `via="slack"`. The message is then updated (`chat.update`) to
say who decided; a refusal is told to the clicker alone (`chat.postEphemeral`), and in
the HTTP answer's status. A click on a message whose request no longer waits for the
input it shows (decided, edited or changed elsewhere) also replaces that message with
one that says so, without buttons; one approved elsewhere is updated to say by whom.
Approve is refused for an input too long for the message to show whole
(`shows_whole_input`): it is approved in the inbox.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError, SagacityError
from sagacity.server._auth import APPROVER, Principal, sagacity_of
from sagacity.server._nonces import NonceStore, nonce_store_for
from sagacity.server._shown import one_line
from sagacity.server._slack import (
    APPROVE_ACTION,
    REJECT_ACTION,
    SlackNotifier,
    request_message,
    shows_whole_input,
    slack_signature,
)

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["REPLAY_SCOPE", "TOLERANCE", "SlackInteractions"]

REPLAY_SCOPE = "slack-request"
"""The scope of a verified request's single-use mark (its body's sha256)."""
TOLERANCE = 300
"""Seconds a signed request's timestamp may be from now, as Slack's documentation says."""
_MAX_BODY = 64 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class _Refused(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Click:
    user_id: str
    action: str
    request_id: str
    saga_id: str
    sha256: str
    channel: str | None
    message_ts: str | None


class SlackInteractions:
    """Takes the Approve and Reject clicks of `SlackNotifier`'s messages.

    Args:
        signing_secret: The Slack app's signing secret (Basic Information, App Credentials).
        users: Principals by Slack user id (`U…`): who a click is journaled as. A user
            not in it, or whose principal lacks the `approver` role, decides nothing.
        notifier: Sends the message updates and the refusals (its token and API base).
        nonces: Where replays are refused; None: beside the approval requests.
        tolerance: Seconds a request's timestamp may be from now (Slack says five minutes).
        clock: Unix seconds now (tests pass their own).
    """

    def __init__(
        self,
        signing_secret: str,
        *,
        users: Mapping[str, Principal],
        notifier: SlackNotifier,
        nonces: NonceStore | None = None,
        tolerance: int = TOLERANCE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not signing_secret:
            raise ConfigurationError("SlackInteractions needs the app's signing secret")
        for user_id, principal in users.items():
            if not isinstance(principal, Principal) or not re.fullmatch(r"[A-Z0-9]{2,32}", user_id):
                raise ConfigurationError(
                    f"Slack users table: {user_id!r} must be a Slack user id (U…) mapped to "
                    "a sagacity.server.Principal"
                )
        self._secret = signing_secret.encode("utf-8")
        self.users = dict(users)
        self.notifier = notifier
        self.tolerance = tolerance
        self._nonces = nonces
        self._owned: NonceStore | None = None
        self._clock = clock

    # -- verifying -------------------------------------------------------------------

    def verify(self, timestamp: str | None, signature: str | None, body: bytes) -> float:
        """Check a request's timestamp and signature as Slack documents; its time.

        Raises:
            _Refused: 401 for a missing, stale or future timestamp or a bad signature.
        """
        if not timestamp or not signature:
            raise _Refused(401, "missing X-Slack-Request-Timestamp or X-Slack-Signature")
        try:
            sent = int(timestamp)
        except ValueError:
            raise _Refused(401, "X-Slack-Request-Timestamp is not a Unix time") from None
        now = self._clock()
        if abs(now - sent) > self.tolerance:
            raise _Refused(
                401,
                f"the request's timestamp is {int(now - sent)} s from now: older (or newer) "
                f"than {self.tolerance} s is refused as a possible replay",
            )
        expected = slack_signature(self._secret, timestamp, body)
        if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
            raise _Refused(401, "the request's X-Slack-Signature does not verify")
        return now

    def _nonce_store(self, sagacity: Sagacity) -> NonceStore:
        if self._nonces is not None:
            return self._nonces
        if self._owned is None:
            self._owned = nonce_store_for(sagacity.approvals)
        return self._owned

    def close(self) -> None:
        """Close the mark store this object opened (not one it was given)."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()

    # -- deciding --------------------------------------------------------------------

    def router(self, path: str = "/sagacity/slack/interactions") -> APIRouter:
        """The interaction route, for `sagacity.server.router(slack=...)` to include."""
        api = APIRouter(include_in_schema=False)

        @api.post(path, name="sagacity_slack_interactions")
        async def interactions(request: Request) -> JSONResponse:
            sagacity = sagacity_of(request)
            try:
                body = await _body(request)
                now = self.verify(
                    request.headers.get("x-slack-request-timestamp"),
                    request.headers.get("x-slack-signature"),
                    body,
                )
                click = _click_of(body)
                moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
                taken = await run_in_threadpool(
                    self._nonce_store(sagacity).take,
                    REPLAY_SCOPE,
                    hashlib.sha256(body).hexdigest(),
                    by=click.user_id,
                    now=moment,
                    until=moment + datetime.timedelta(seconds=2 * self.tolerance),
                )
                if not taken:
                    raise _Refused(409, "this interaction was taken already (a replay)")
                text = await run_in_threadpool(self._decide, sagacity, click)
            except _Refused as refused:
                return JSONResponse({"ok": False, "error": refused.text}, refused.status)
            return JSONResponse({"ok": True, "text": text})

        return api

    def _decide(self, sagacity: Sagacity, click: _Click) -> str:
        """Decide a verified click through the inbox's path; tell Slack what happened."""
        shown: ApprovalRequest | None = None
        stale = False  # the message no longer shows a request that waits for its input
        try:
            principal = self.users.get(click.user_id)
            if principal is None:
                raise _Refused(
                    403,
                    f"Slack user {click.user_id} is not in sagacity's table of Slack users: "
                    "nothing was decided",
                )
            if not principal.can(APPROVER):
                raise _Refused(
                    403,
                    f"principal {principal.name!r} (Slack user {click.user_id}) lacks the "
                    "'approver' role: nothing was decided",
                )
            try:
                shown = _pending(sagacity, click)
            except SagacityError as error:
                raise _Refused(error.status_code, str(error)) from None
            stale = shown is None or shown.input_sha256 != click.sha256 or bool(shown.problem)
            if shown is None:
                raise _Refused(
                    410,
                    f"request {click.request_id} of saga {click.saga_id!r} no longer waits",
                )
            if shown.input_sha256 != click.sha256:
                raise _Refused(
                    409,
                    f"request {click.request_id} of saga {click.saga_id!r} now holds sha256 "
                    f"{shown.input_sha256}, not the {click.sha256} this message showed",
                )
            if shown.problem is not None:
                raise _Refused(
                    409, f"request {click.request_id} cannot be decided here: {shown.problem}"
                )
            if click.action == APPROVE_ACTION and not shows_whole_input(shown):
                raise _Refused(
                    409,
                    f"request {click.request_id} of saga {click.saga_id!r} has an input too "
                    "long to show in Slack whole: what was not shown is not approved here; "
                    "approve it in the inbox, which shows all of it",
                )
            name = principal.name
            try:
                if click.action == APPROVE_ACTION:
                    sagacity.approve(
                        click.saga_id,
                        approver=name,
                        request_id=click.request_id,
                        expected_sha256=click.sha256,
                        via="slack",
                    )
                    what = f"Approved by {name} in Slack"
                else:
                    sagacity.reject(
                        click.saga_id,
                        approver=name,
                        reason=f"rejected in Slack by {name}",
                        request_id=click.request_id,
                        via="slack",
                    )
                    what = f"Rejected by {name} in Slack"
            except SagacityError as error:
                raise _Refused(error.status_code, str(error)) from None
        except _Refused as refused:
            if click.channel is not None:
                tool_name = "" if shown is None else shown.tool_name
                self.notifier.call(
                    "chat.postEphemeral",
                    {
                        "channel": click.channel,
                        "user": click.user_id,
                        "text": one_line("Refused: " + refused.text, 3000),
                    },
                    event="approval.refused",
                    saga_id=click.saga_id,
                    request_id=click.request_id,
                    tool_name=tool_name,
                )
                if click.message_ts is not None:
                    self._refresh(sagacity, click, refused, stale=stale, tool_name=tool_name)
            raise
        after = _pending(sagacity, click) or shown
        decided = f"{what} (sha256 {click.sha256[:12]}…)"
        if click.action == APPROVE_ACTION and after.state == "waiting":
            decided += f"; {len(after.approvals)} of {after.approvers_required} approvals"
        if click.channel is not None and click.message_ts is not None:
            body = {
                "channel": click.channel,
                "ts": click.message_ts,
                **request_message(
                    after if click.action == APPROVE_ACTION else shown,
                    decided=decided,
                ),
            }
            if click.action == REJECT_ACTION:
                body["blocks"] = [b for b in body["blocks"] if b["type"] != "actions"]
            self.notifier.call(
                "chat.update",
                body,
                event="approval.decided",
                saga_id=shown.saga_id,
                request_id=shown.request_id,
                tool_name=shown.tool_name,
            )
        return decided

    def _refresh(
        self, sagacity: Sagacity, click: _Click, refused: _Refused, *, stale: bool, tool_name: str
    ) -> None:
        """Update a message a refused click found out of date, for everyone in the channel.

        A message whose request no longer waits for the input it shows loses its buttons
        and says so; one whose request was approved elsewhere says by whom. A refusal
        about the clicker (a stranger, the starter) changes nothing.
        """
        body: dict[str, Any] | None = None
        if stale:
            body = _stale_message(click, refused.text)
        elif refused.status == 409:
            try:
                current = _pending(sagacity, click)
            except SagacityError:
                current = None
            if current is not None and current.state == "approved":
                names = ", ".join(a.approver for a in current.approvals)
                body = request_message(
                    current,
                    decided=f"Approved by {names} ({len(current.approvals)} of "
                    f"{current.approvers_required}): it no longer waits for approval",
                )
        if body is not None and click.channel is not None:
            self.notifier.call(
                "chat.update",
                {"channel": click.channel, "ts": click.message_ts, **body},
                event="approval.stale",
                saga_id=click.saga_id,
                request_id=click.request_id,
                tool_name=tool_name,
            )


def _stale_message(click: _Click, why: str) -> dict[str, Any]:
    """The message that replaces one whose request no longer waits for the input it shows."""
    text = (
        f"Request {click.request_id} of saga {click.saga_id} (sha256 {click.sha256[:12]}…) "
        "no longer waits for the input this message showed"
    )
    blocks = [
        {"type": "section", "text": {"type": "plain_text", "text": one_line(text, 3000)}},
        {
            "type": "context",
            "elements": [
                {
                    "type": "plain_text",
                    "text": one_line(
                        f"{why}. Its buttons were removed; the inbox shows how the saga went on.",
                        3000,
                    ),
                }
            ],
        },
    ]
    return {"text": one_line(text, 3000), "blocks": blocks}


def _pending(sagacity: Sagacity, click: _Click) -> ApprovalRequest | None:
    return next(
        (r for r in sagacity.pending(click.saga_id) if r.request_id == click.request_id), None
    )


async def _body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_BODY:
            raise _Refused(413, f"an interaction body is at most {_MAX_BODY} bytes")
    return body


def _click_of(body: bytes) -> _Click:
    """The button click a verified body holds (`payload=` JSON, form-encoded)."""
    try:
        form = urllib.parse.parse_qs(body.decode("utf-8"), strict_parsing=True)
        (raw,) = form["payload"]
        payload = orjson.loads(raw)
        if payload.get("type") != "block_actions":
            raise _Refused(400, f"interactions of type {payload.get('type')!r} are not taken")
        (action,) = payload["actions"]
        action_id = action["action_id"]
        if action_id not in (APPROVE_ACTION, REJECT_ACTION):
            raise _Refused(400, f"unknown action {action_id!r}")
        value = orjson.loads(action["value"])
        container = payload.get("container") or {}
        channel = (payload.get("channel") or {}).get("id") or container.get("channel_id")
        message_ts = (payload.get("message") or {}).get("ts") or container.get("message_ts")
        click = _Click(
            user_id=str(payload["user"]["id"]),
            action=action_id,
            request_id=str(value["request_id"]),
            saga_id=str(value["saga_id"]),
            sha256=str(value["sha256"]),
            channel=None if channel is None else str(channel),
            message_ts=None if message_ts is None else str(message_ts),
        )
    except _Refused:
        raise
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise _Refused(400, "the body is not a Slack block_actions payload") from None
    if not _HEX64.match(click.sha256):
        raise _Refused(400, "the button's value holds no sha256")
    return click
