"""`router()` to mount in your app, `create_app()` for a ready one, `serve()` to run it.

Mount the router in the app where your tools are wrapped: resuming an approved call runs
the tool, and rejecting or compensating a saga runs its compensations, so they have to be
wrapped in the process that serves them (`serve(tools=...)`, `sagacity serve --tools`).
Where they are not, a rejection is journaled and the compensations are left, unjournaled,
to a process that has them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from sagacity._stores import default_url, open_stores
from sagacity.errors import ConfigurationError
from sagacity.saga import Sagacity
from sagacity.server._auth import Authenticator, TokenAuth, bind
from sagacity.server._body import BodyLimit, max_body_bytes_of
from sagacity.server._errors import error_response
from sagacity.server._events import events_router
from sagacity.server._grant_routes import grant_router
from sagacity.server._route import authenticated_route
from sagacity.server._routes import api_router
from sagacity.server._sweeping import Sweeping
from sagacity.server._workflow_routes import workflow_router

if TYPE_CHECKING:
    from sagacity.server._slack_clicks import SlackInteractions

__all__ = ["create_app", "router", "serve"]


class Health(BaseModel):
    """The health check's answer."""

    status: str
    """`ok` when the journal answers a read."""


def _authenticator(
    auth: Authenticator | None, tokens: str | os.PathLike[str] | None
) -> Authenticator:
    if auth is not None:
        if tokens is not None:
            raise ValueError("pass either auth= or tokens=, not both")
        return auth
    # Fail closed: no authenticator and no tokens file is a ConfigurationError, never an
    # open server.
    return TokenAuth.from_file(tokens)


def router(
    sagacity: Sagacity,
    auth: Authenticator | None = None,
    *,
    tokens: str | os.PathLike[str] | None = None,
    poll_interval: float = 1.0,
    ui: bool | Mapping[str, Any] = True,
    max_body_bytes: int | None = None,
    slack: SlackInteractions | None = None,
) -> APIRouter:
    """The sagacity routes over `sagacity`, to include in your FastAPI app.

    Args:
        sagacity: The facade whose journal and approvals are served.
        auth: Maps a request to its `Principal` (or None: 401); default bearer tokens
            from `tokens`, else from the file `SAGACITY_TOKENS` names.
        tokens: A tokens file (TOML, see `docs/server.md`) when `auth` is not given.
        poll_interval: Seconds between the event stream's looks at the stores.
        ui: Include the approval inbox at `/sagacity/ui`; a mapping is passed to its
            `ui_router(...)` as options (`session_lifetime`, `secure_cookies`, ...).
        max_body_bytes: The largest body the JSON API reads (413 beyond); None reads
            `SAGACITY_MAX_BODY_BYTES`, else 1 MiB.
        slack: Take the Approve and Reject clicks of Slack messages at
            `POST /sagacity/slack/interactions` (verified with Slack's signing secret).

    Raises:
        ConfigurationError: No `auth`, no `tokens` and no `SAGACITY_TOKENS`: the server
            never runs without authentication.

    Every route is under `/sagacity/`. Routers included here find the facade with
    `sagacity_of(request)` and the principal with `Depends(require(role))`.
    """
    authenticator = _authenticator(auth, tokens)
    top = APIRouter(dependencies=[Depends(bind(authenticator, sagacity))])

    @top.get("/sagacity/health", response_model=Health, tags=["health"])
    def health() -> Health:
        """Without authentication: whether the journal answers a read."""
        sagacity.journal.list_sagas(limit=1)
        return Health(status="ok")

    limit = max_body_bytes_of(max_body_bytes)
    top.include_router(
        api_router(sagacity, authenticator, max_body_bytes=limit), prefix="/sagacity"
    )
    top.include_router(events_router(sagacity, poll_interval=poll_interval), prefix="/sagacity")
    top.include_router(
        workflow_router(route_class=authenticated_route(sagacity, authenticator, limit))
    )
    top.include_router(grant_router(authenticated_route(sagacity, authenticator, limit)))
    if ui:
        from sagacity.server._ui import ui_router

        top.include_router(ui_router(**(ui if isinstance(ui, Mapping) else {})))
    if slack is not None:
        top.include_router(slack.router())
    return top


def create_app(
    sagacity_or_url: Sagacity | str | None = None,
    auth: Authenticator | None = None,
    *,
    tokens: str | os.PathLike[str] | None = None,
    options: Mapping[str, Any] | None = None,
    poll_interval: float = 1.0,
    ui: bool | Mapping[str, Any] = True,
    max_body_bytes: int | None = None,
    slack: SlackInteractions | None = None,
    sweep_interval: float | None = None,
) -> FastAPI:
    """A FastAPI app serving `router()`.

    Args:
        sagacity_or_url: A `Sagacity`, or a database URL to open one (closed when the
            app shuts down); None uses `SAGACITY_DATABASE_URL`, else `sqlite:///sagacity.db`.
        auth: See `router`.
        tokens: See `router`.
        options: Keyword options for `Sagacity.from_url` when a URL is given (approval
            signing keys, `approval_ttl`, ...).
        poll_interval: See `router`.
        ui: See `router`.
        max_body_bytes: See `router`; the app holds every route to it (the inbox's
            forms too).
        slack: See `router`.
        sweep_interval: Seconds between the app's sweeps of due reminders, escalations
            and denials (`sagacity.Escalator`), on a background thread while the app
            runs; None: no sweep here (a worker or the application runs it).
    """
    if sweep_interval is not None and not sweep_interval > 0:
        raise ConfigurationError(f"sweep_interval must be positive, not {sweep_interval}")
    owned = not isinstance(sagacity_or_url, Sagacity)
    if isinstance(sagacity_or_url, Sagacity):
        sagacity = sagacity_or_url
    else:
        sagacity = Sagacity.from_url(sagacity_or_url or default_url(), **dict(options or {}))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sweeping = None if sweep_interval is None else Sweeping(sagacity, sweep_interval)
        try:
            yield
        finally:
            if sweeping is not None:
                sweeping.stop()
            if owned:
                sagacity.close()

    try:
        limit = max_body_bytes_of(max_body_bytes)
        routes = router(
            sagacity,
            auth,
            tokens=tokens,
            poll_interval=poll_interval,
            ui=ui,
            max_body_bytes=limit,
            slack=slack,
        )
    except BaseException:
        if owned:
            sagacity.close()
        raise
    app = FastAPI(
        title="sagacity",
        summary="Sagas, approvals and the journal of AI agents' tool calls",
        lifespan=lifespan,
    )
    app.include_router(routes)
    app.add_middleware(BodyLimit, max_body_bytes=limit)
    app.state.sagacity = sagacity

    # Outside any route (a path that matches none, a method it does not take), errors
    # get the same JSON shape as the routes' own.
    async def http_error(request: Request, error: Exception) -> Response:
        return error_response(error)

    app.add_exception_handler(HTTPException, http_error)
    return app


def serve(
    database: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: str | os.PathLike[str] | None = None,
    *,
    approval_key: str | None = None,
    approval_public_keys: Sequence[str] | None = None,
    require_signed_approvals: bool = False,
    create: bool = False,
    tools: Iterable[object] = (),
    sweep_interval: float | None = 30.0,
) -> None:
    """Run `create_app` with uvicorn until interrupted (`sagacity serve`).

    Args:
        database: The database URL or SQLite path; None: `SAGACITY_DATABASE_URL`, else
            `sqlite:///sagacity.db`.
        host: The address to listen on.
        port: The port to listen on.
        tokens: The tokens file; None: `SAGACITY_TOKENS`.
        approval_key: The Ed25519 private key (PEM) that signs the approvals made here;
            None: `SAGACITY_APPROVAL_KEY`.
        approval_public_keys: PEM public keys whose approval signatures count; None:
            the files `SAGACITY_APPROVAL_PUBLIC_KEYS` lists.
        require_signed_approvals: Count only approvals signed with one of those keys (or
            the signing key); False leaves it to `SAGACITY_REQUIRE_SIGNED_APPROVALS`.
        create: Create the database's tables if they are missing (a first deployment).
            False: a database that does not exist, or holds no sagacity journal, is
            refused, so that a mistyped URL never serves an empty inbox.
        tools: Objects or functions to wrap (as `Sagacity.wrap` takes them): the server
            then runs their compensations when a saga is rejected or compensated, and
            resumes their approved calls.
        sweep_interval: Seconds between sweeps of due reminders, escalations and
            denials, in the background (see `create_app`); None: no sweep here.

    Raises:
        DatabaseNotFoundError: `create` is False and the database does not exist or holds
            no sagacity journal.
        ConfigurationError: A key cannot be loaded, or signatures are required and no
            key signs the approvals made here: they would never count.
    """
    import uvicorn

    from sagacity.audit._settings import APPROVAL_KEY_VARIABLE, approval_settings

    options = approval_settings(
        signing_key=approval_key,
        public_keys=approval_public_keys,
        require=require_signed_approvals,
    )
    if options.get("require_signed_approvals") and "approval_signing_key" not in options:
        raise ConfigurationError(
            "the server requires signed approvals, but no key signs the approvals made in "
            f"it, so none would count: set {APPROVAL_KEY_VARIABLE} (or --key) to the "
            "approval service's private key"
        )
    url = database if database is None or "://" in database else f"sqlite:///{database}"
    journal, approvals = open_stores(url or default_url(), create=create)
    try:
        sagacity = Sagacity(journal, approvals, **options)
    except BaseException:
        journal.close()
        approvals.close()
        raise
    try:
        sagacity.wrap(*tools)
        app = create_app(sagacity, tokens=tokens, sweep_interval=sweep_interval)
        uvicorn.run(app, host=host, port=port)
    finally:
        sagacity.close()
