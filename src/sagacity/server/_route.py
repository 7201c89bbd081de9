"""How the JSON API's routes take ids and principals.

Each id is one raw path segment, and a request is authenticated (and its size checked)
before its body is read.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, unquote

from fastapi import Depends, HTTPException, Path, Query, Request
from starlette.convertors import Convertor, register_url_convertor
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from sagacity.saga import Sagacity
from sagacity.server._auth import (
    APPROVER,
    OPERATOR,
    VIEWER,
    Authenticator,
    Principal,
    bind,
    require,
)
from sagacity.server._body import DEFAULT_MAX_BODY_BYTES, declared_too_large, limit_body
from sagacity.server._errors import SagacityRoute, error_response

__all__ = [
    "ID_LIMITS",
    "ID_PATTERN",
    "Approver",
    "AuthenticatedRoute",
    "CallId",
    "IdRoute",
    "Operator",
    "RequestId",
    "SagaId",
    "SagaIdQuery",
    "Viewer",
    "authenticated_route",
]

# What `require_id` accepts, said in the schema: printable, not blank, at most 512
# characters (a client learns it from the OpenAPI document instead of from a 422).
_PRINTABLE = "[^\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]"
ID_PATTERN = f"^{_PRINTABLE}*[^\\s\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]{_PRINTABLE}*$"
ID_LIMITS = {"min_length": 1, "max_length": 512, "pattern": ID_PATTERN}
SagaId = Annotated[str, Path(description="the saga id", **ID_LIMITS)]
RequestId = Annotated[str, Path(description="the approval request id", **ID_LIMITS)]
CallId = Annotated[str, Path(description="the call id", **ID_LIMITS)]
SagaIdQuery = Annotated[str | None, Query(description="only this saga", **ID_LIMITS)]


class _IdConvertor(Convertor[str]):
    """One path segment, percent-decoded: the form `IdRoute` hands its routes ids in."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("sagacity_id", _IdConvertor())


def _segmented(scope: Scope) -> str:
    """The request's path with a `/` or `%` that came percent-encoded kept encoded.

    The server decodes `%2F` into the path before routing, so `sagas/A/calls/B%2Fcalls%2FC`
    would read as saga `A/calls/B`, call `C`. Split on the raw path's own `/` instead:
    each segment is one id, and an id holding `/` is reached only percent-encoded. Where
    the raw path is missing or does not match the path (a rewrite), the decoded path is
    used with its `%` kept: an id holding `/` then matches no route rather than another.
    """
    path: str = scope["path"]
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        segments = [unquote(part) for part in raw.decode("ascii", "replace").split("/")]
        decoded = "/".join(segments)
        if path.endswith(decoded):
            kept = "/".join(s.replace("%", "%25").replace("/", "%2F") for s in segments)
            return path[: len(path) - len(decoded)].replace("%", "%25") + kept
    return path.replace("%", "%25")


class AuthenticatedRoute(SagacityRoute):
    """A route whose request is authenticated, and its declared size checked, first.

    Only then is its body read, through `limit_body`. (FastAPI reads a body before it
    solves a route's dependencies, `require` among them.) Built with
    `authenticated_route`; without an authenticator it is a plain `SagacityRoute`.
    """

    authenticator: Authenticator | None = None
    sagacity: Sagacity | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.methods and scope["method"] not in self.methods):
            await super().handle(scope, receive, send)
            return
        refusal = None
        if self.authenticator is not None and self.sagacity is not None:
            request = Request(scope)
            bind(self.authenticator, self.sagacity)(request)
            try:
                # Every route here needs a principal; the route's own role is checked
                # after, by its dependency (the principal is cached on the request).
                await require(VIEWER)(request)
            except HTTPException as error:
                refusal = error
        refusal = refusal or declared_too_large(scope, self.max_body_bytes)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        await super().handle(scope, limit_body(receive, self.max_body_bytes), send)


class IdRoute(AuthenticatedRoute):
    """A route whose `{x:sagacity_id}` parameters are each one segment of the raw path."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return super().matches(scope)
        # A copy: the router goes on matching other routes against the real path.
        split: dict[str, Any] = {**scope, "path": _segmented(scope)}
        return super().matches(split)


def authenticated_route(
    sagacity: Sagacity,
    authenticator: Authenticator | None,
    max_body_bytes: int,
    base: type[AuthenticatedRoute] = AuthenticatedRoute,
) -> type[AuthenticatedRoute]:
    """A route class that authenticates with `authenticator` before reading a body."""
    return type(
        "SagacityApiRoute",
        (base,),
        {
            "authenticator": staticmethod(authenticator) if authenticator else None,
            "sagacity": sagacity,
            "max_body_bytes": max_body_bytes,
        },
    )


Viewer = Annotated[Principal, Depends(require(VIEWER))]
Approver = Annotated[Principal, Depends(require(APPROVER))]
Operator = Annotated[Principal, Depends(require(OPERATOR))]
