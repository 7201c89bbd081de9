"""The server's limit on a request body: refused on its `Content-Length`, or as it arrives.

A body over the limit gets 413 before it is parsed, and no more than the limit is ever
held: `BodyLimit` wraps the whole app, `limit_body` a route that authenticates first.
"""

from __future__ import annotations

import os

from fastapi import HTTPException
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagacity.errors import ConfigurationError
from sagacity.server._errors import error_response

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "BodyLimit",
    "declared_too_large",
    "limit_body",
    "max_body_bytes_of",
]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The largest request body read (1 MiB): far above any decision, edit or resolution."""

MAX_BODY_VARIABLE = "SAGACITY_MAX_BODY_BYTES"


def max_body_bytes_of(value: int | None) -> int:
    """`value`, else `SAGACITY_MAX_BODY_BYTES`, else `DEFAULT_MAX_BODY_BYTES`."""
    if value is None:
        text = os.environ.get(MAX_BODY_VARIABLE, "").strip()
        if not text:
            return DEFAULT_MAX_BODY_BYTES
        if not text.isdigit():
            raise ConfigurationError(f"{MAX_BODY_VARIABLE}={text!r} is not a number of bytes")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"max_body_bytes must be a positive number, not {value!r}")
    return value


def _too_large(limit: int) -> HTTPException:
    return HTTPException(
        413, detail=f"the request body is larger than the server's limit of {limit} bytes"
    )


def declared_too_large(scope: Scope, limit: int) -> HTTPException | None:
    """The 413 for a request whose `Content-Length` is over `limit` (or is not a number)."""
    declared = Headers(scope=scope).get("content-length")
    if declared is None:
        return None
    if not declared.strip().isdigit():
        return HTTPException(400, detail=f"Content-Length {declared!r} is not a number")
    return _too_large(limit) if int(declared) > limit else None


def limit_body(receive: Receive, limit: int) -> Receive:
    """`receive`, raising a 413 `HTTPException` once the body read passes `limit` bytes.

    For a body sent without `Content-Length` (chunked): it is cut off as it arrives, so
    no more than `limit` bytes are ever held.
    """
    read = 0

    async def limited() -> Message:
        nonlocal read
        message = await receive()
        if message["type"] == "http.request":
            read += len(message.get("body", b""))
            if read > limit:
                raise _too_large(limit)
        return message

    return limited


class BodyLimit:
    """ASGI middleware: a body over `max_body_bytes` gets 413, declared or as it arrives."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        """Wrap `app`."""
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse on `Content-Length`, else read the body through `limit_body`."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = declared_too_large(scope, self.max_body_bytes)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, limit_body(receive, self.max_body_bytes), send)
