"""Sessions of the approval inbox: who is signed in, their CSRF token, one-shot messages.

Sessions live in the server's memory, keyed by the SHA-256 of their id: the browser holds
the only copy of the id (an HttpOnly, SameSite=Strict cookie), a dump of the server's
memory does not yield a usable cookie, and signing out or restarting the server ends a
session at once (nothing to revoke, no signing secret to manage). The price: sessions
are per process, so several server processes behind one load balancer need sticky
sessions, and a restart signs everyone out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from sagacity.server._auth import Principal

__all__ = ["Session", "SessionStore"]


@dataclasses.dataclass(slots=True)
class Session:
    """One signed-in browser."""

    principal: Principal
    """Who signed in: the name journaled for every decision made in this session."""
    csrf: str
    """The token every form of this session must post back."""
    created: float
    """When it was opened (monotonic seconds)."""
    seen: float
    """When it was last used (monotonic seconds)."""
    flash: list[str] = dataclasses.field(default_factory=list)
    """Messages to show once, on the next page (what the last action did)."""
    warnings: list[str] = dataclasses.field(default_factory=list)
    """What the last action left undone, shown once on the next page as a warning."""
    channels: dict[str, str] = dataclasses.field(default_factory=dict)
    """The channel each request's page was opened from, by request id (`"email"` after
    a one-time e-mail link): a decision on that page is journaled as made through it."""

    def channel_of(self, request_id: str) -> str:
        """The channel a decision on `request_id`'s page comes through.

        `"inbox"`, unless its page was opened from an e-mail link in this session.
        """
        return self.channels.get(request_id, "inbox")

    def csrf_ok(self, token: str | None) -> bool:
        """Whether `token` is this session's CSRF token (compared in constant time)."""
        return token is not None and SessionStore.same(token, self.csrf)

    def take_flash(self) -> str | None:
        """The messages queued for the next page, joined, and forget them."""
        if not self.flash:
            return None
        text = " ".join(self.flash)
        self.flash.clear()
        return text

    def take_warnings(self) -> str | None:
        """The warnings queued for the next page, joined, and forget them."""
        if not self.warnings:
            return None
        text = " ".join(self.warnings)
        self.warnings.clear()
        return text


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


class SessionStore:
    """Sessions in memory, bounded in number and in time.

    Args:
        lifetime: Seconds a session lasts from sign-in, however active.
        idle: Seconds a session lasts without a request.
        limit: How many sessions are kept; opening one more ends the least recently used.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        lifetime: float = 8 * 3600.0,
        idle: float = 3600.0,
        limit: int = 10_000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.lifetime = lifetime
        self.idle = idle
        self.limit = limit
        self._clock: Callable[[], float] = clock or time.monotonic
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, principal: Principal) -> tuple[str, Session]:
        """Open a session for `principal`; return its id (for the cookie) and the session."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        session = Session(
            principal=principal, csrf=secrets.token_urlsafe(32), created=now, seen=now
        )
        with self._lock:
            self._sessions[_key(session_id)] = session
            while len(self._sessions) > self.limit:
                self._sessions.popitem(last=False)
        return session_id, session

    def get(self, session_id: str | None, *, touch: bool = True) -> Session | None:
        """The live session with this id, or None (unknown, expired or idle too long).

        `touch=False` looks without counting as activity (the live-update stream's look:
        an open tab alone does not keep a session from going idle).
        """
        if not session_id or len(session_id) > 200:
            return None
        key = _key(session_id)
        now = self._clock()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if now - session.created > self.lifetime or now - session.seen > self.idle:
                del self._sessions[key]
                return None
            if touch:
                session.seen = now
                self._sessions.move_to_end(key)
            return session

    def close(self, session_id: str | None) -> None:
        """End the session (sign-out); an unknown id is ignored."""
        if session_id:
            with self._lock:
                self._sessions.pop(_key(session_id), None)

    @staticmethod
    def new_nonce() -> str:
        """A random value for a form that has no session yet (the sign-in form)."""
        return secrets.token_urlsafe(24)

    @staticmethod
    def same(a: str, b: str) -> bool:
        """Compare two tokens in constant time."""
        return hmac.compare_digest(a.encode(), b.encode())

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
