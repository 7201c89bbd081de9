"""The standing-approval routes: list grants with their budget, grant one, revoke one.

Granting and revoking are the approver's: the grantor (or revoker) journaled is the
request's principal, never a name from the body. Listing is the viewer's.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from sagacity.approval._grants import StandingGrant
from sagacity.server._auth import sagacity_of
from sagacity.server._errors import ERROR_RESPONSES, SagacityRoute
from sagacity.server._route import ID_LIMITS, Approver, Viewer

__all__ = ["GrantBody", "GrantModel", "RevokeBody", "grant_router"]

GrantId = Annotated[str, Path(description="the grant id", **ID_LIMITS)]
GrantState = Literal["active", "expired", "revoked", "exhausted", "unverifiable"]


class _Model(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class GrantModel(_Model):
    """A standing approval as its chain records it, with what is left of its budget."""

    grant_id: str
    tool_name: str
    grantor: str
    granted_at: str
    expires_at: str
    match: dict[str, dict[str, Any]]
    """The argument constraints: `{"equals": v}`, `{"one_of": [...]}` or `{"min", "max"}`."""
    max_calls: int
    max_amount: int | float | None
    amount_field: str | None
    started_by: str | None
    """Covers only sagas this principal starts; null: any saga not started by the grantor."""
    reason: str | None
    used_calls: int
    used_amount: str
    """The sum of the covered calls' amounts, as a decimal string."""
    remaining_calls: int
    remaining_amount: str | None
    """null without an amount limit."""
    revoked_at: str | None
    revoked_by: str | None
    state: GrantState
    problem: str | None
    """Why an unverifiable grant covers nothing."""

    @classmethod
    def of(cls, grant: StandingGrant) -> GrantModel:
        """The model of a grant."""
        return cls.model_validate(grant.to_json())


class GrantBody(_Model):
    """The terms of a new grant; the grantor is the request's principal."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    tool_name: str = Field(min_length=1, max_length=512)
    """The one tool it covers."""
    max_calls: int = Field(ge=1)
    """How many calls it covers at most."""
    expires_at: datetime.datetime | None = None
    """When it ends (with a time zone); or give ttl_seconds."""
    ttl_seconds: float | None = Field(default=None, gt=0)
    """How long from now it lasts; or give expires_at."""
    match: dict[str, dict[str, Any]] = Field(default_factory=dict)
    max_amount: int | float | None = None
    amount_field: str | None = None
    started_by: str | None = None
    reason: str | None = Field(default=None, max_length=2000)


class RevokeBody(_Model):
    """Why the grant is revoked; the revoker is the request's principal."""

    reason: str | None = Field(default=None, max_length=2000)


def grant_router(route_class: type[APIRoute] = SagacityRoute) -> APIRouter:
    """The grant routes, to include under `sagacity.server.router` (which binds auth)."""
    api = APIRouter(
        prefix="/sagacity",
        route_class=route_class,
        responses=ERROR_RESPONSES,
        tags=["grants"],
    )

    @api.get("/grants", response_model=list[GrantModel])
    def list_grants(
        request: Request,
        _: Viewer,
        tool: Annotated[str | None, Query(description="only this tool's grants")] = None,
        state: Annotated[GrantState | None, Query(description="only grants in this state")] = None,
    ) -> list[GrantModel]:
        """Every standing grant, newest first, with its state and remaining budget."""
        found = sagacity_of(request).grants(tool)
        return [GrantModel.of(g) for g in found if state is None or g.state == state]

    @api.post("/grants", response_model=GrantModel, status_code=201)
    def grant(request: Request, body: GrantBody, principal: Approver) -> GrantModel:
        """Grant a standing approval; refused (403) for sagas the grantor starts."""
        expiry: dict[str, Any] = (
            {"ttl": body.ttl_seconds} if body.ttl_seconds is not None else {}
        ) | ({"expires_at": body.expires_at} if body.expires_at is not None else {})
        made = sagacity_of(request).grant(
            body.tool_name,
            grantor=principal.name,
            max_calls=body.max_calls,
            match=body.match,
            max_amount=body.max_amount,
            amount_field=body.amount_field,
            started_by=body.started_by,
            reason=body.reason,
            via="api",
            **expiry,
        )
        return GrantModel.of(made)

    @api.get("/grants/{grant_id}", response_model=GrantModel)
    def grant_detail(request: Request, grant_id: GrantId, _: Viewer) -> GrantModel:
        """One grant, as its chain records it."""
        return GrantModel.of(sagacity_of(request).get_grant(grant_id))

    @api.post("/grants/{grant_id}/revoke", response_model=GrantModel)
    def revoke(
        request: Request, grant_id: GrantId, body: RevokeBody, principal: Approver
    ) -> GrantModel:
        """Revoke a grant: every call that would consume it afterwards asks a human."""
        made = sagacity_of(request).revoke(
            grant_id, revoked_by=principal.name, reason=body.reason, via="api"
        )
        return GrantModel.of(made)

    return api
