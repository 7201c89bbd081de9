"""The `server` extra: a FastAPI router and app over a `Sagacity` (REST API, auth, events).

Install with `pip install 'sagacity[server]'`. See `docs/server.md`.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401  (probe for the extra)
    import uvicorn  # noqa: F401  (probe for the extra)
except ImportError as error:  # pragma: no cover - exercised with the extra blocked
    raise ImportError(
        "sagacity.server needs the 'server' extra: pip install 'sagacity[server]'"
    ) from error

from sagacity.server._app import create_app, router, serve
from sagacity.server._auth import (
    APPROVER,
    OPERATOR,
    VIEWER,
    Authenticator,
    Principal,
    TokenAuth,
    hash_token,
    new_token,
    require,
    sagacity_of,
)
from sagacity.server._email import EmailNotifier, SmtpSettings
from sagacity.server._errors import ErrorBody
from sagacity.server._links import ApprovalLinks
from sagacity.server._nonces import NonceStore
from sagacity.server._notify import WebhookNotifier, sign_body
from sagacity.server._slack import SlackNotifier, slack_signature
from sagacity.server._slack_clicks import SlackInteractions

__all__ = [
    "APPROVER",
    "OPERATOR",
    "VIEWER",
    "ApprovalLinks",
    "Authenticator",
    "EmailNotifier",
    "ErrorBody",
    "NonceStore",
    "Principal",
    "SlackInteractions",
    "SlackNotifier",
    "SmtpSettings",
    "TokenAuth",
    "WebhookNotifier",
    "create_app",
    "hash_token",
    "new_token",
    "require",
    "router",
    "sagacity_of",
    "serve",
    "sign_body",
    "slack_signature",
]
