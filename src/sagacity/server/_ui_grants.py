"""The inbox's Grants page: standing approvals with their remaining budget, grant, revoke.

Listing is the viewer's; granting and revoking the approver's, journaled under the
session's principal (the forms carry no grantor). The constraints are typed as the REST
API takes them, a JSON object (`{"payee": {"one_of": ["ACME"]}}`).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from sagacity.approval._grants import StandingGrant
from sagacity.errors import SagacityError
from sagacity.saga import Sagacity
from sagacity.server._auth import APPROVER, sagacity_of
from sagacity.server._ui_http import (
    InboxSite,
    Refusal,
    form_field,
    json_field,
    refusal_of,
    secured,
)
from sagacity.server._ui_sessions import Session

__all__ = ["add_grants"]

GRANTS_PATH = "/grants"


GrantAction = Callable[[Sagacity, Session, FormData], None]


def _post(router: APIRouter, site: InboxSite, path: str) -> Callable[[GrantAction], GrantAction]:
    """Register a form post that runs `action` (in a thread) and returns to the Grants page."""

    def register(action: GrantAction) -> GrantAction:
        async def handler(request: Request) -> Response:
            session: Session | None = None
            try:
                session, form = await site.actor(request, APPROVER)
                await run_in_threadpool(action, sagacity_of(request), session, form)
            except Refusal as refusal:
                return site.refusal(request, refusal, session)
            except SagacityError as error:
                return site.refusal(request, refusal_of(error), session)
            target = site.base(request) + GRANTS_PATH
            return secured(RedirectResponse(target, status_code=303))

        name = f"sagacity_ui_{action.__name__}_grant"
        router.add_api_route(path, handler, methods=["POST"], name=name)
        return action

    return register


def _shown(grant: StandingGrant) -> dict[str, object]:
    return {
        **grant.to_json(),
        "covers": grant.describe(),
        "calls_left": f"{grant.remaining_calls} of {grant.max_calls}",
        "amount_left": (
            None
            if grant.max_amount is None
            else f"{grant.remaining_amount} of {grant.max_amount} ({grant.amount_field})"
        ),
    }


def _number(form: FormData, name: str) -> float | int | None:
    value = json_field(form, name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Refusal(422, f"the form field {name!r} must be a number", heading="Incomplete form")
    return value


def add_grants(router: APIRouter, site: InboxSite) -> None:
    """Register the Grants page and its two forms on `router`."""

    @router.get(GRANTS_PATH, name="sagacity_ui_grants")
    async def grants_page(request: Request) -> Response:
        session, refused = await site.viewer(request)
        if session is None:
            return refused or Response(status_code=500)
        sagacity = sagacity_of(request)
        try:
            found = await run_in_threadpool(sagacity.grants)
        except SagacityError as error:
            return site.finish(request, site.refusal(request, refusal_of(error), session))
        response = site.page(
            request,
            "grants.html",
            session=session,
            title="Standing approvals",
            grants=[_shown(g) for g in found],
            can_grant=session.principal.can(APPROVER),
        )
        return site.finish(request, response)

    @_post(router, site, GRANTS_PATH + "/grant")
    def grant(sagacity: Sagacity, session: Session, form: FormData) -> None:
        match = json_field(form, "match", empty={})
        if not isinstance(match, dict):
            raise Refusal(422, "the form field 'match' must be a JSON object of constraints")
        max_calls = _number(form, "max_calls")
        hours = _number(form, "ttl_hours")
        if not isinstance(max_calls, int) or hours is None:
            raise Refusal(
                422,
                "give the number of calls (a whole number) and the hours it lasts",
                heading="Incomplete form",
            )
        made = sagacity.grant(
            form_field(form, "tool_name").strip(),
            grantor=session.principal.name,
            max_calls=max_calls,
            ttl=hours * 3600,
            match=match,
            max_amount=_number(form, "max_amount"),
            amount_field=form_field(form, "amount_field", required=False).strip() or None,
            started_by=form_field(form, "started_by", required=False).strip() or None,
            reason=form_field(form, "reason", required=False).strip() or None,
            via="inbox",
        )
        session.flash.append(
            f"Granted by {session.principal.name}: {made.max_calls} call(s) of "
            f"{made.tool_name} until {made.expires_at} (grant {made.grant_id})."
        )

    @_post(router, site, GRANTS_PATH + "/revoke")
    def revoke(sagacity: Sagacity, session: Session, form: FormData) -> None:
        made = sagacity.revoke(
            form_field(form, "grant_id"),
            revoked_by=session.principal.name,
            reason=form_field(form, "reason", required=False).strip() or None,
            via="inbox",
        )
        session.flash.append(
            f"Revoked by {session.principal.name}: grant {made.grant_id} covers no more calls."
        )
