"""One-time signed links to an approval request's page: single use, expiring, hash-bound.

A link says which request (saga, request id), for which input (its sha256), until when,
and carries a random nonce; it is signed with HMAC-SHA256 under a secret the e-mail
notifier and the server share. The link decides nothing: mail scanners fetch links.
Opening it leads, after sign-in, to the inbox's page of the request, where the approver
decides as in the inbox (hash-bound, four eyes, signatures); a decision made there is
journaled with `via="email"`.

Opening a link (`GET {inbox}/links/{token}`) refuses, with a page saying why and
deciding nothing:

- a link altered or not made with this server's secret (403),
- an expired link (410),
- a link for a request that is no longer waiting (410), or whose input was edited since
  the link was sent, or no longer hashes to the link's sha256 (409),
- a link opened before (410): it is taken on its first opening by a signed-in approver
  whose approval would count, not before, so a scanner's fetch (which is sent to sign
  in) does not use it up, nor does the saga's starter, the input's editor or one
  outside the group the request escalated to (they reach the page, where their
  approval is refused, and the link stays for one who can).

The link's single use is a mark in `sagacity_channel_nonce` beside the approval
requests (`_nonces`): a security nonce, not a fact about the saga.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import hashlib
import hmac
import re
import secrets
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from sagacity.approval import ApprovalRequest
from sagacity.approval._policy import refuse_self_approval
from sagacity.errors import ApprovalError, ConfigurationError, SagacityError
from sagacity.journal import Phase
from sagacity.server._auth import APPROVER, sagacity_of
from sagacity.server._nonces import NonceStore, nonce_store_for
from sagacity.server._ui_http import InboxSite, Refusal, refusal_of, secured
from sagacity.server._ui_inbox import request_path

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["ApprovalLinks", "LinkClaim", "add_links"]

LINK_SCOPE = "email-link"
"""The scope of a link's single-use mark."""
_CONTEXT = b"sagacity-approval-link-v1."
# The longest payload names a saga and a request of 512 characters of 4 UTF-8 bytes each
# (under 4,300 bytes with the rest): under 5,800 base64 characters.
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{16,8192}\.[A-Za-z0-9_-]{43}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LinkClaim:
    """What a verified link says."""

    saga_id: str
    """The saga of the request."""
    request_id: str
    """The request whose page the link opens."""
    sha256: str
    """The input's hash the link was sent for."""
    expires_at: datetime.datetime
    """When the link stops opening anything (UTC)."""
    nonce: str
    """The random value that makes the link single-use."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ApprovalLinks:
    """Makes and checks the one-time signed links of approval e-mails.

    Args:
        secret: The HMAC-SHA256 key (at least 32 bytes; a str is taken as UTF-8), the
            same in the process that sends the e-mails and the server that opens them.
        inbox_url: The inbox's address as approvers reach it
            (`https://approvals.example.com/sagacity/ui`); links are `{inbox_url}/links/…`.
        lifetime: How long a link opens its request (seconds or a timedelta); a request
            that expires sooner makes its links expire with it.
        nonces: Where the single-use marks are taken; None: beside the approval requests
            of the server that opens the links (`sagacity_channel_nonce`).
        clock: The current UTC time (tests pass a fake clock's); None: the Sagacity's.
    """

    def __init__(
        self,
        secret: str | bytes,
        *,
        inbox_url: str,
        lifetime: float | datetime.timedelta = datetime.timedelta(hours=24),
        nonces: NonceStore | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        if len(key) < 32:
            raise ConfigurationError(
                "an approval link secret must be at least 32 bytes (make one with "
                "secrets.token_urlsafe(32)); a short one could be guessed"
            )
        if not inbox_url.startswith(("https://", "http://")):
            raise ConfigurationError(
                f"inbox_url {inbox_url!r} must be the inbox's http(s) address, such as "
                "https://approvals.example.com/sagacity/ui"
            )
        span = (
            lifetime
            if isinstance(lifetime, datetime.timedelta)
            else datetime.timedelta(seconds=lifetime)
        )
        if span <= datetime.timedelta(0):
            raise ConfigurationError(f"an approval link's lifetime must be positive, not {span}")
        self._key = key
        self.inbox_url = inbox_url.rstrip("/")
        self.lifetime = span
        self._nonces = nonces
        self._owned: NonceStore | None = None
        self._lock = threading.Lock()
        self._clock = clock

    # -- making --------------------------------------------------------------------

    def make(self, request: ApprovalRequest, *, now: datetime.datetime | None = None) -> str:
        """A new link to `request`'s page, with a nonce of its own.

        It expires at the earlier of the link's lifetime and the request's own expiry.
        """
        moment = now or self.now()
        expires = self.expiry(request, moment)
        payload = orjson.dumps(
            {
                "v": 1,
                "s": request.saga_id,
                "r": request.request_id,
                "h": request.input_sha256,
                "e": int(expires.timestamp()),
                "n": secrets.token_urlsafe(18),
            }
        )
        body = _b64(payload)
        return f"{self.inbox_url}/links/{body}.{self._sign(body)}"

    def expiry(self, request: ApprovalRequest, now: datetime.datetime) -> datetime.datetime:
        """When a link to `request` made at `now` expires (whole seconds, UTC)."""
        expires = now + self.lifetime
        if request.deadline is not None and request.deadline < expires:
            expires = request.deadline
        return datetime.datetime.fromtimestamp(int(expires.timestamp()), datetime.UTC)

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._key, _CONTEXT + body.encode("ascii"), hashlib.sha256).digest())

    # -- checking ------------------------------------------------------------------

    def read(self, token: str, now: datetime.datetime) -> LinkClaim:
        """The claim of a link's token, checked for its signature and its age.

        Raises:
            Refusal: 403 for a token altered or not signed with this secret, 410 for
                an expired one.
        """
        forged = Refusal(
            403,
            "This link is not valid: it was altered, cut short, or not made by this "
            "approval service. Open the inbox to find the request.",
            heading="Invalid link",
        )
        if not _TOKEN.match(token):
            raise forged
        body, _, signature = token.partition(".")
        if not hmac.compare_digest(signature, self._sign(body)):
            raise forged
        try:
            fields: Any = orjson.loads(_unb64(body))
            claim = LinkClaim(
                saga_id=_text(fields["s"]),
                request_id=_text(fields["r"]),
                sha256=_text(fields["h"]),
                expires_at=datetime.datetime.fromtimestamp(int(fields["e"]), datetime.UTC),
                nonce=_text(fields["n"]),
            )
        except (
            binascii.Error,
            orjson.JSONDecodeError,
            KeyError,
            TypeError,
            ValueError,
            OverflowError,
        ):
            raise forged from None  # signed by us, so this is a bug or a leaked key
        if fields.get("v") != 1 or not _HEX64.match(claim.sha256):
            raise forged
        if now >= claim.expires_at:
            raise Refusal(
                410,
                f"This link expired at {claim.expires_at.isoformat()}. Open the inbox to "
                "find the request, if it still waits.",
                heading="Link expired",
            )
        return claim

    def nonces_for(self, sagacity: Sagacity) -> NonceStore:
        """The mark store: the one given, else one beside `sagacity`'s approval requests."""
        if self._nonces is not None:
            return self._nonces
        with self._lock:
            if self._owned is None:
                self._owned = nonce_store_for(sagacity.approvals)
            return self._owned

    def now(self, sagacity: Sagacity | None = None) -> datetime.datetime:
        """The current UTC time: the clock given, else the Sagacity's, else the system's."""
        if self._clock is not None:
            return self._clock()
        if sagacity is not None:
            return sagacity.now()
        return datetime.datetime.now(datetime.UTC)

    def close(self) -> None:
        """Close the mark store this object opened (not one it was given)."""
        with self._lock:
            owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("not a string")
    return value


def _check_request(sagacity: Sagacity, claim: LinkClaim) -> ApprovalRequest:
    """The request a link opens; refused when it no longer waits, or for another input."""
    stored = sagacity.approvals.get(claim.request_id)
    if stored is None or stored.saga_id != claim.saga_id:
        edited_to = None
        for entry in sagacity.journal.entries(claim.saga_id):
            payload = entry.payload
            if (
                entry.phase is Phase.REJECTED
                and isinstance(payload, dict)
                and payload.get("request_id") == claim.request_id
                and isinstance(payload.get("edited_to"), str)
            ):
                edited_to = payload["edited_to"]
        if edited_to is not None:
            raise Refusal(
                409,
                f"The input of this request was edited after this link was sent (it was "
                f"sent for sha256 {claim.sha256}): the link opens nothing. The edited "
                f"request {edited_to} waits in the inbox, with its own hash.",
                heading="Input changed",
            )
        raise Refusal(
            410,
            f"Request {claim.request_id} of saga {claim.saga_id!r} no longer waits: it was "
            "decided, or its call ran. The saga's page in the inbox shows how it went on.",
            heading="No longer waiting",
        )
    shown = next(
        (r for r in sagacity.pending(claim.saga_id) if r.request_id == claim.request_id), None
    )
    hashes = {stored.input_sha256} | ({shown.input_sha256} if shown is not None else set())
    if hashes != {claim.sha256} or shown is None or shown.problem is not None:
        raise Refusal(
            409,
            f"Request {claim.request_id} of saga {claim.saga_id!r} no longer asks for the "
            f"input this link was sent for (sha256 {claim.sha256}); it now holds sha256 "
            f"{stored.input_sha256}. The link opens nothing: find the request in the inbox "
            "and check its input there.",
            heading="Input changed",
        )
    return shown


def _counts(request: ApprovalRequest, principal: str) -> str | None:
    """Why `principal`'s approval of `request` would not count; None when it would.

    Its starter and editor, and one outside the group it escalated to, do not use a
    link up: the link stays for one who can.
    """
    try:
        refuse_self_approval(request, principal)
    except ApprovalError as error:
        return str(error)
    return None


def add_links(router: APIRouter, inbox: InboxSite, links: ApprovalLinks) -> None:
    """Add `GET /links/{token}` to the inbox's `router`: a link opens its request's page."""

    @router.get("/links/{token}", name="sagacity_ui_link")
    async def open_link(request: Request, token: str) -> Response:
        sagacity = sagacity_of(request)
        try:
            claim = links.read(token, links.now(sagacity))
        except Refusal as refusal:
            return inbox.refusal(request, refusal, None)
        session, refused = await inbox.viewer(request)
        if session is None:  # sent to sign in: the link is not used up by this visit
            return refused or Response(status_code=500)
        principal = session.principal
        try:
            if not principal.can(APPROVER):
                raise Refusal(
                    403,
                    f"Principal {principal.name!r} cannot approve or reject requests: this "
                    "link was not used. Sign in as an approver to open it.",
                )
            shown = await run_in_threadpool(_check_request, sagacity, claim)
            cannot = _counts(shown, principal.name)
            if cannot is None and not await run_in_threadpool(
                links.nonces_for(sagacity).take,
                LINK_SCOPE,
                claim.nonce,
                by=principal.name,
                now=links.now(sagacity),
                until=claim.expires_at,
            ):
                raise Refusal(
                    410,
                    "This link was used already: each link opens its request once. Open "
                    "the inbox to find the request, if it still waits.",
                    heading="Link used",
                )
        except Refusal as refusal:
            return inbox.finish(request, inbox.refusal(request, refusal, session))
        except SagacityError as error:
            return inbox.finish(request, inbox.refusal(request, refusal_of(error), session))
        session.channels[claim.request_id] = "email"
        if cannot is not None:
            session.flash.append(
                f"Opened from an e-mail link for sha256 {claim.sha256[:12]}…, which stays "
                f"unused: your approval would not count ({cannot})."
            )
        else:
            session.flash.append(
                f"Opened from an e-mail link for sha256 {claim.sha256[:12]}…; decide below."
            )
        target = inbox.base(request) + request_path(claim.request_id)
        return inbox.finish(request, secured(RedirectResponse(target, status_code=303)))
