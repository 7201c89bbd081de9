"""The inbox's HTTP side: who is asking, cookies, CSRF and cross-site checks, refusals.

Every page and form of the approval inbox goes through `InboxSite`: a page view finds
(or opens) its session, a form post must come from a live session, from the inbox's own
origin, with the session's CSRF token and the role its action needs. What it refuses is
a `Refusal`, shown as an error page with its status; nothing is journaled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
import markupsafe
from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from sagacity._unicode import escape_for_display
from sagacity.errors import SagacityError
from sagacity.server._auth import AUTH_KEY, VIEWER, Principal, TokenAuth, authenticate
from sagacity.server._ui_sessions import Session, SessionStore

__all__ = [
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "SIGNIN_COOKIE",
    "InboxSite",
    "Refusal",
    "form_field",
    "json_field",
    "next_path",
    "principal_of_token",
    "refusal_of",
    "secured",
    "security_headers",
]

_HERE = Path(__file__).parent
SESSION_COOKIE = "sagacity_session"
SIGNIN_COOKIE = "sagacity_signin"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        " connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: under it browsers send `Origin: null` on same-origin POSTs, which
    # the cross-site check must refuse.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}

_NEXT = re.compile(r"^/[A-Za-z0-9/_\-.~%?=&]*$")


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    environment.filters["exact"] = _exact
    return environment


def _shown(value: Any) -> Any:
    """Every `{{ value }}` a page shows: a bidi override or zero-width space as an escape.

    Done here, for every template, so no id, name or input reaches a page raw.
    """
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return escape_for_display(value)
    return value


def _exact(value: str) -> markupsafe.Markup:
    """A value a form posts back (a hidden input's saga or call id): HTML-escaped, not shown.

    Posted back escaped for display, an id holding a bidi character would name no saga.
    """
    return markupsafe.escape(value)


class Refusal(Exception):
    """A request the inbox refuses: shown as an error page with its status."""

    def __init__(self, status: int, message: str, *, heading: str = "Refused") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.heading = heading


def refusal_of(error: SagacityError) -> Refusal:
    """A sagacity error as the inbox shows it: its own status (a 4xx or 5xx), its message."""
    status = error.status_code if 400 <= error.status_code < 600 else 500
    return Refusal(status, str(error), heading=type(error).__name__)


class InboxSite:
    """The inbox's state: its templates, its sessions and its options."""

    def __init__(
        self,
        *,
        sessions: SessionStore,
        secure_cookies: bool | None,
        poll_interval: float,
        trusted_origins: frozenset[str],
    ) -> None:
        self.templates = _environment()
        self.sessions = sessions
        self.secure_cookies = secure_cookies
        self.poll_interval = poll_interval
        self.trusted_origins = trusted_origins

    # -- paths, cookies, pages -------------------------------------------------------

    @staticmethod
    def base(request: Request) -> str:
        return request.url_for("sagacity_ui_inbox").path.rstrip("/")

    def secure(self, request: Request) -> bool:
        if self.secure_cookies is not None:
            return self.secure_cookies
        return request.url.scheme == "https"

    def set_cookie(self, response: Response, request: Request, name: str, value: str) -> None:
        response.set_cookie(
            name,
            value,
            max_age=None if name == SESSION_COOKIE else 600,
            path=self.base(request) or "/",
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )

    def drop_cookie(self, response: Response, request: Request, name: str) -> None:
        response.delete_cookie(
            name,
            path=self.base(request) or "/",
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )

    def page(
        self,
        request: Request,
        template: str,
        *,
        session: Session | None,
        http_status: int = 200,
        **values: Any,
    ) -> Response:
        base = self.base(request)
        principal = session.principal if session is not None else None
        values.setdefault("error", None)
        values.setdefault("page", template.removesuffix(".html"))
        events = values.pop("events", None)
        html = self.templates.get_template(template).render(
            base=base,
            title=values.pop("title", "Inbox"),
            principal=principal,
            roles=", ".join(sorted(principal.effective_roles)) if principal else "",
            csrf=session.csrf if session is not None else "",
            flash=session.take_flash() if session is not None else None,
            warning=session.take_warnings() if session is not None else None,
            events_url=f"{base}/events?{events}" if events and session is not None else "",
            **values,
        )
        return secured(HTMLResponse(html, status_code=http_status))

    def refusal(self, request: Request, refusal: Refusal, session: Session | None) -> Response:
        return self.page(
            request,
            "error.html",
            session=session,
            http_status=refusal.status,
            title=refusal.heading,
            heading=refusal.heading,
            message=refusal.message,
            back=f"{self.base(request)}/",
        )

    # -- who is asking ----------------------------------------------------------------

    async def viewer(self, request: Request) -> tuple[Session | None, Response | None]:
        """The session of a page view; opens one for a principal the authenticator knows.

        An authenticator that recognises the browser's own request (an SSO proxy's
        header) signs it in without a token; otherwise the answer is the sign-in page.
        """
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        opened: str | None = None
        if session is None:
            try:
                principal = await authenticate(request)
            except HTTPException:
                principal = None
            if principal is not None:
                opened, session = self.sessions.open(principal)
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            location = f"{self.base(request)}/sign-in?next={quote(target, safe='')}"
            return None, secured(RedirectResponse(location, status_code=303))
        if not session.principal.can(VIEWER):
            refused = Refusal(403, f"principal {session.principal.name!r} lacks the 'viewer' role")
            return None, self.refusal(request, refused, None)
        if opened is not None:
            request.state.sagacity_ui_opened = opened
        return session, None

    def finish(self, request: Request, response: Response) -> Response:
        """Set the cookie of a session opened during this page view."""
        opened = getattr(request.state, "sagacity_ui_opened", None)
        if isinstance(opened, str):
            self.set_cookie(response, request, SESSION_COOKIE, opened)
        return response

    def cross_site(self, request: Request) -> str | None:
        """Why a POST looks cross-site (None when it does not): a second line behind CSRF."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"the browser says this form was sent from another site ({site})"
        origin = request.headers.get("origin")
        if origin is None:
            return None  # not a browser, or an old one: the CSRF token decides
        if origin in self.trusted_origins:
            return None
        if origin == "null" or urlsplit(origin).netloc != request.headers.get("host"):
            return f"this form was sent from another origin ({origin})"
        return None

    async def actor(self, request: Request, role: str) -> tuple[Session, FormData]:
        """The session and form of a POST: signed in, same-site, CSRF token, `role`."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            raise Refusal(401, "sign in first: this form needs a session", heading="Signed out")
        why = self.cross_site(request)
        if why is not None:
            raise Refusal(403, f"refused: {why}")
        form = await request.form()
        token = form.get("csrf")
        if not session.csrf_ok(token if isinstance(token, str) else None):
            raise Refusal(
                403, "refused: the form's CSRF token is missing or stale; reload the page"
            )
        if not session.principal.can(role):
            raise Refusal(
                403, f"principal {session.principal.name!r} lacks the {role!r} role for this"
            )
        return session, form


def secured(response: Response) -> Response:
    """`response` with the inbox's security headers (CSP, no framing, no caching)."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def form_field(form: FormData, name: str, *, required: bool = True) -> str:
    """The text of a form field; a required one that is missing or blank is a 422."""
    value = form.get(name)
    if isinstance(value, str) and (value.strip() or not required):
        return value
    if not required:
        return ""
    raise Refusal(422, f"the form field {name!r} is missing", heading="Incomplete form")


def json_field(form: FormData, name: str, *, empty: Any = None) -> Any:
    """A form field parsed as strict JSON (no NaN or Infinity); `empty` when left blank."""
    text = form_field(form, name, required=False).strip()
    if not text:
        return empty

    def refuse_constant(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    try:
        return json.loads(text, parse_constant=refuse_constant)
    except ValueError as error:
        raise Refusal(
            422, f"the form field {name!r} is not valid JSON: {error}", heading="Not JSON"
        ) from error


def next_path(raw: str, base: str) -> str:
    """Where to go after sign-in: a path inside the inbox, never another site."""
    if raw.startswith(base + "/") and _NEXT.match(raw) and "//" not in raw and "\\" not in raw:
        return raw
    return f"{base}/"


async def principal_of_token(request: Request, token: str) -> Principal | None:
    """The principal `token` authenticates as, asking the router's authenticator."""
    authenticator = getattr(request.state, AUTH_KEY, None)
    if isinstance(authenticator, TokenAuth):
        return authenticator.principal_for(token)
    if authenticator is None:
        raise RuntimeError("the inbox is used outside sagacity.server.router(...)")
    try:
        header = f"Bearer {token}".encode("latin-1")
    except UnicodeEncodeError:
        return None
    # Any other authenticator sees the token as a bearer header on a request of its own.
    scope = {
        "type": "http",
        "method": "GET",
        "path": request.url.path,
        "raw_path": request.url.path.encode(),
        "root_path": request.scope.get("root_path", ""),
        "scheme": request.url.scheme,
        "server": request.scope.get("server"),
        "client": request.scope.get("client"),
        "query_string": b"",
        "headers": [(b"authorization", header)],
        "state": {AUTH_KEY: authenticator},
    }
    try:
        return await authenticate(Request(scope))
    except HTTPException:
        return None


def security_headers() -> Mapping[str, str]:
    """The headers every inbox page carries (for tests and reverse-proxy set-ups)."""
    return dict(SECURITY_HEADERS)
