"""Every error the server answers with, in one place: sagacity's exceptions → HTTP.

A `SagacityError` carries its own `status_code` (see `sagacity.errors`); this module
turns it, and the HTTP errors of authentication and validation, into one JSON shape::

    {"error": "ApprovalHashMismatchError", "message": "...", "saga_id": "...", "request_id": "..."}

The conversion is done by `SagacityRoute`, the route class of `sagacity.server.router()`,
so it works wherever the router is mounted (an app's exception handlers would only
cover the app that installed them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel

# FastAPI raises Starlette's own HTTPException for some errors (a body that cannot be
# parsed): catch the base class, of which FastAPI's is a subclass.
from starlette.exceptions import HTTPException

from sagacity.errors import ApprovalHashMismatchError, SagacityError

__all__ = ["ERROR_RESPONSES", "ErrorBody", "SagacityRoute", "error_response", "status_of"]

_log = logging.getLogger("sagacity.server")

_HTTP_NAMES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "ContentTooLarge",
    422: "ValidationError",
    501: "NotImplemented",
    503: "Unavailable",
}


class ErrorBody(BaseModel):
    """The JSON body of every error response."""

    error: str
    """The exception's class name (`ApprovalHashMismatchError`) or the HTTP error's name."""
    message: str
    """What happened, naming the saga, request or tool, and what to do."""
    saga_id: str | None = None
    """The saga concerned, when there is one."""
    request_id: str | None = None
    """The approval request concerned, when there is one."""
    detail: list[Any] | None = None
    """For a request that does not validate: FastAPI's list of what is wrong."""


_API_STATUS: dict[type[SagacityError], int] = {
    # Over HTTP a hash that differs from the one the approver was shown is a conflict:
    # the request changed under them (or they saw another one); reload and decide again.
    ApprovalHashMismatchError: 409,
}
"""Where the API answers with another status than the error's own `status_code`."""


def status_of(error: SagacityError) -> int:
    """The HTTP status the API answers `error` with."""
    for kind, status in _API_STATUS.items():
        if isinstance(error, kind):
            return status
    return error.status_code


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "The body cannot be parsed (not UTF-8 JSON)"),
        (401, "No credentials, or a bearer token that is not known"),
        (403, "The principal lacks the route's role, or an approval check refused"),
        (404, "No such saga or approval request"),
        (409, "The saga or request is not in a state that allows this"),
        (413, "The body is larger than the server's limit (max_body_bytes)"),
        (503, "The journal could not be read or written"),
    )
}
"""The error responses every route documents in the OpenAPI schema."""


def error_response(
    error: BaseException, *, saga_id: str | None = None, request_id: str | None = None
) -> JSONResponse:
    """The JSON response for `error`, a `SagacityError` or an HTTP/validation error."""
    headers: dict[str, str] | None = None
    detail: list[Any] | None = None
    if isinstance(error, SagacityError):
        status, name, message = status_of(error), type(error).__name__, str(error)
        if status >= 500:
            _log.error("saga %r request %r: %s", saga_id, request_id, message, exc_info=error)
    elif isinstance(error, RequestValidationError):
        status, name = 422, "ValidationError"
        detail = _renderable(jsonable_encoder(error.errors()))
        message = _renderable(
            "the request does not validate: "
            + "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                for e in error.errors()
            )
        )
    elif isinstance(error, HTTPException):
        status = error.status_code
        name = _HTTP_NAMES.get(status, f"HTTP{status}")
        message = str(error.detail)
        headers = dict(error.headers) if error.headers else None
    else:  # pragma: no cover - only the types above are passed in
        raise TypeError(f"not an error the server maps: {error!r}")
    body = ErrorBody(
        error=name, message=message, saga_id=saga_id, request_id=request_id, detail=detail
    )
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def _renderable(value: Any) -> Any:
    """`value` (an echo of the rejected input) as JSON can carry it.

    A body may parse to what JSON cannot render: `NaN` or `Infinity`, and strings with an
    escaped lone surrogate. Those come back as text (`'nan'`, the surrogate spelled out as
    a backslash escape), so that the answer is the 422 that names the field.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_renderable(key): _renderable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_renderable(item) for item in value]
    return value


class SagacityRoute(APIRoute):
    """An `APIRoute` that answers sagacity's errors as `ErrorBody` JSON.

    The saga and request ids are taken from the route's path (or query) parameters, so
    an error always comes with the ids it concerns.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap FastAPI's handler: sagacity, HTTP and validation errors become JSON."""
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except (SagacityError, HTTPException, RequestValidationError) as error:
                path, query = request.path_params, request.query_params
                saga_id = path.get("saga_id") or query.get("saga_id")
                request_id = path.get("request_id") or query.get("request_id")
                return error_response(error, saga_id=saga_id, request_id=request_id)

        return handle
