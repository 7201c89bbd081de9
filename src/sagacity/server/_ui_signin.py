"""The inbox's sign-in and sign-out: a token exchanged for a session cookie.

The sign-in form carries a nonce also set as a cookie, so a form posted from another
site, or an old one, is refused; signing in closes the session the browser had.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from sagacity.server._auth import VIEWER
from sagacity.server._ui_http import (
    SESSION_COOKIE,
    SIGNIN_COOKIE,
    InboxSite,
    Refusal,
    form_field,
    next_path,
    principal_of_token,
    secured,
)
from sagacity.server._ui_sessions import SessionStore

__all__ = ["add_sign_in"]


def add_sign_in(router: APIRouter, inbox: InboxSite) -> None:
    """Add the sign-in form, its post and the sign-out post to the inbox's `router`."""

    @router.get("/sign-in", name="sagacity_ui_sign_in")
    async def sign_in_form(request: Request, next: str = "") -> Response:
        nonce = SessionStore.new_nonce()
        base = inbox.base(request)
        response = inbox.page(
            request,
            "sign_in.html",
            session=None,
            title="Sign in",
            signin_nonce=nonce,
            next=next_path(next, base),
        )
        inbox.set_cookie(response, request, SIGNIN_COOKIE, nonce)
        return response

    @router.post("/sign-in", name="sagacity_ui_sign_in_post")
    async def sign_in(request: Request) -> Response:
        base = inbox.base(request)
        why = inbox.cross_site(request)
        form = await request.form()
        nonce, cookie = form.get("csrf"), request.cookies.get(SIGNIN_COOKIE)
        if why is None and not (
            isinstance(nonce, str) and cookie and SessionStore.same(nonce, cookie)
        ):
            why = "the sign-in form is stale; open the sign-in page again"
        if why is not None:
            return inbox.refusal(request, Refusal(403, f"refused: {why}"), None)
        token = form.get("token")
        principal = None
        if isinstance(token, str) and token.strip():
            principal = await principal_of_token(request, token.strip())
        if principal is None:
            fresh = SessionStore.new_nonce()
            response = inbox.page(
                request,
                "sign_in.html",
                session=None,
                http_status=401,
                title="Sign in",
                error="That token is not known.",
                signin_nonce=fresh,
                next=next_path(form_field(form, "next", required=False), base),
            )
            inbox.set_cookie(response, request, SIGNIN_COOKIE, fresh)
            return response
        inbox.sessions.close(request.cookies.get(SESSION_COOKIE))
        session_id, session = inbox.sessions.open(principal)
        session.flash.append(f"Signed in as {principal.name}.")
        target = next_path(form_field(form, "next", required=False), base)
        response = secured(RedirectResponse(target, status_code=303))
        inbox.set_cookie(response, request, SESSION_COOKIE, session_id)
        inbox.drop_cookie(response, request, SIGNIN_COOKIE)
        return response

    @router.post("/sign-out", name="sagacity_ui_sign_out")
    async def sign_out(request: Request) -> Response:
        try:
            await inbox.actor(request, VIEWER)
        except Refusal as refusal:
            if refusal.status != 401:
                return inbox.refusal(request, refusal, None)
        inbox.sessions.close(request.cookies.get(SESSION_COOKIE))
        base = inbox.base(request)
        response = secured(RedirectResponse(f"{base}/sign-in", status_code=303))
        inbox.drop_cookie(response, request, SESSION_COOKIE)
        return response
