"""Who is calling: principals, roles, bearer tokens and the `require(role)` dependency.

Roles (`VIEWER`, `APPROVER`, `OPERATOR`):

- `viewer` reads: sagas, journals, verification, pending approvals, doubts, export.
- `approver` approves, rejects and edits approval requests.
- `operator` resumes, compensates and resolves in-doubt calls.

`approver` and `operator` each imply `viewer`. `operator` does **not** imply
`approver`, nor the reverse: the person who can push a saga forward is not, by that
alone, a person who may say yes to an irreversible call (separation of duties). Give a
principal both roles to let it do both.

An `Authenticator` is any callable `(Request) -> Principal | None` (it may also be
async). `None` means "no credentials" (401); it may raise `HTTPException(403)` to
refuse a principal it recognised. `TokenAuth` is the default: bearer tokens from a
tokens file, stored only as SHA-256 hashes.

`sagacity.server.router()` binds its authenticator and its `Sagacity` to every request
it handles (including the routes of routers it includes), so any route under it can
declare `principal: Principal = Depends(require("approver"))` and read the facade with
`sagacity_of(request)`.

Tokens file (TOML; `SAGACITY_TOKENS` names it when no path is given)::

    [[token]]
    sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    principal = "alice"
    roles = ["approver"]

Make an entry's hash with `hash_token(token)` (or `sagacity tokens hash`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import inspect
import os
import secrets
import tomllib
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from sagacity._unicode import principal_key, principal_name_problem
from sagacity.errors import ConfigurationError

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = [
    "APPROVER",
    "AUTH_KEY",
    "OPERATOR",
    "ROLES",
    "VIEWER",
    "Authenticator",
    "Principal",
    "TokenAuth",
    "authenticate",
    "bind",
    "cross_site",
    "hash_token",
    "new_token",
    "require",
    "sagacity_of",
]

VIEWER = "viewer"
APPROVER = "approver"
OPERATOR = "operator"
ROLES: frozenset[str] = frozenset({VIEWER, APPROVER, OPERATOR})
"""Every role a principal may hold."""

_IMPLIED: Mapping[str, frozenset[str]] = {
    VIEWER: frozenset({VIEWER}),
    APPROVER: frozenset({APPROVER, VIEWER}),
    OPERATOR: frozenset({OPERATOR, VIEWER}),
}

AUTH_KEY = "sagacity_authenticator"
_SAGACITY_KEY = "sagacity_facade"
_PRINCIPAL_KEY = "sagacity_principal"


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: the name journaled as approver, and its roles."""

    name: str
    """The name recorded in the journal (approver, resolver, saga starter)."""

    roles: frozenset[str] = frozenset()
    """The roles granted, a subset of `ROLES` (see the module docstring)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError("a principal needs a non-empty name")
        problem = principal_name_problem(self.name)
        if problem is not None:
            raise ConfigurationError(f"principal name {self.name!r} is refused: {problem}")
        unknown = set(self.roles) - ROLES
        if unknown:
            raise ConfigurationError(
                f"principal {self.name!r}: unknown role(s) {sorted(unknown)};"
                f" known roles are {sorted(ROLES)}"
            )
        object.__setattr__(self, "roles", frozenset(self.roles))

    @property
    def effective_roles(self) -> frozenset[str]:
        """The roles granted plus the ones they imply (`viewer` for the others)."""
        implied: set[str] = set()
        for role in self.roles:
            implied |= _IMPLIED[role]
        return frozenset(implied)

    def can(self, role: str) -> bool:
        """Whether this principal holds `role`, directly or by implication."""
        return role in self.effective_roles


Authenticator = Callable[[Request], "Principal | Awaitable[Principal | None] | None"]
"""Maps a request to its principal; None means no credentials (401)."""


def hash_token(token: str) -> str:
    """The SHA-256 hex digest of `token`: what a tokens file stores for it."""
    if not token:
        raise ConfigurationError("an empty token cannot be hashed into a tokens file")
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


@dataclasses.dataclass(frozen=True, slots=True)
class _TokenEntry:
    sha256: bytes
    principal: Principal


class TokenAuth:
    """Bearer-token authentication: `Authorization: Bearer <token>`.

    Tokens are kept only as SHA-256 digests and compared in constant time against every
    entry (the lookup time does not reveal which entry, if any, was close).
    """

    def __init__(self, tokens: Mapping[str, Principal] | None = None) -> None:
        """Build from `{sha256_hex: Principal}`; see `from_file` and `from_tokens`."""
        self._entries: list[_TokenEntry] = []
        for digest, principal in (tokens or {}).items():
            self._add(digest, principal, where="TokenAuth()")

    def _add(self, digest: str, principal: Principal, *, where: str) -> None:
        text = digest.strip().lower()
        if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
            raise ConfigurationError(
                f"{where}: token hash for principal {principal.name!r} is not 64 hex"
                " digits; make one with sagacity.server.hash_token(token)"
            )
        raw = bytes.fromhex(text)
        if any(hmac.compare_digest(raw, entry.sha256) for entry in self._entries):
            raise ConfigurationError(f"{where}: the same token hash appears twice")
        key = principal_key(principal.name)
        for entry in self._entries:
            # Names are compared normalised (four eyes, distinct approvers): two spellings
            # of one name would be one approver under two names.
            other = entry.principal.name
            if principal_key(other) == key and other != principal.name:
                raise ConfigurationError(
                    f"{where}: principal {principal.name!r} is the same name as "
                    f"{other!r} once compared (NFKC, case-folded); spell it the same"
                )
        self._entries.append(_TokenEntry(raw, principal))

    @classmethod
    def from_tokens(cls, tokens: Mapping[str, Principal]) -> TokenAuth:
        """Build from clear tokens (tests, scripts): `{token: Principal}`; only hashes are kept."""
        return cls({hash_token(token): principal for token, principal in tokens.items()})

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None = None) -> TokenAuth:
        """Load a TOML tokens file (module docstring); `None` reads `SAGACITY_TOKENS`.

        Raises:
            ConfigurationError: no path and no `SAGACITY_TOKENS`, an unreadable file,
                or an entry without `sha256`, `principal` or with an unknown role.
        """
        if path is None:
            env = os.environ.get("SAGACITY_TOKENS")
            if not env:
                raise ConfigurationError(
                    "no tokens file: pass one or set SAGACITY_TOKENS to its path"
                )
            path = env
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except OSError as error:
            raise ConfigurationError(f"tokens file {str(file)!r}: {error}") from error
        except tomllib.TOMLDecodeError as error:
            raise ConfigurationError(f"tokens file {str(file)!r} is not TOML: {error}") from error
        entries = data.get("token", [])
        if not isinstance(entries, list):
            raise ConfigurationError(f"tokens file {str(file)!r}: use [[token]] tables")
        auth = cls()
        for index, entry in enumerate(entries, start=1):
            where = f"tokens file {str(file)!r}, token #{index}"
            if not isinstance(entry, dict):
                raise ConfigurationError(f"{where}: not a table")
            if "token" in entry:
                raise ConfigurationError(
                    f"{where}: holds a clear token; store only sha256 = hash_token(token)"
                )
            digest, name, roles = entry.get("sha256"), entry.get("principal"), entry.get("roles")
            if not isinstance(digest, str) or not isinstance(name, str):
                raise ConfigurationError(f"{where}: needs string fields sha256 and principal")
            if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
                raise ConfigurationError(f"{where}: roles must be a list of strings")
            try:
                principal = Principal(name, frozenset(roles))
            except ConfigurationError as error:
                raise ConfigurationError(f"{where}: {error}") from None
            auth._add(digest, principal, where=where)
        return auth

    @property
    def principals(self) -> list[Principal]:
        """The principals this authenticator knows, in file order."""
        return [entry.principal for entry in self._entries]

    def principal_for(self, token: str) -> Principal | None:
        """The principal whose token this is, or None."""
        if not token:
            return None
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        found: Principal | None = None
        # Compare against every entry, never stopping early, so timing says nothing.
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.sha256):
                found = entry.principal
        return found

    def __call__(self, request: Request) -> Principal | None:
        """The principal of the request's bearer token; None without one."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        principal = self.principal_for(token.strip())
        if principal is None:
            raise HTTPException(
                401,
                detail="the bearer token is not known",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return principal


def bind(authenticator: Authenticator, sagacity: Sagacity) -> Callable[[Request], None]:
    """A router-level dependency that attaches `authenticator` and `sagacity` to a request."""

    def _bind(request: Request) -> None:
        setattr(request.state, AUTH_KEY, authenticator)
        setattr(request.state, _SAGACITY_KEY, sagacity)

    return _bind


def sagacity_of(request: Request) -> Sagacity:
    """The `Sagacity` of the sagacity router handling this request."""
    facade = getattr(request.state, _SAGACITY_KEY, None)
    if facade is None:
        raise RuntimeError("this route is not under sagacity.server.router(...)")
    return facade  # type: ignore[no-any-return]


async def authenticate(request: Request) -> Principal | None:
    """Run the bound authenticator once per request (cached on the request)."""
    if hasattr(request.state, _PRINCIPAL_KEY):
        cached: Principal | None = getattr(request.state, _PRINCIPAL_KEY)
        return cached
    authenticator: Authenticator | None = getattr(request.state, AUTH_KEY, None)
    if authenticator is None:
        raise RuntimeError("require() is used on a route not under sagacity.server.router(...)")
    outcome: Any = authenticator(request)
    if inspect.isawaitable(outcome):
        outcome = await outcome
    if outcome is not None and not isinstance(outcome, Principal):
        raise TypeError(
            f"the authenticator returned {type(outcome).__name__}; it must return a"
            " sagacity.server.Principal or None"
        )
    setattr(request.state, _PRINCIPAL_KEY, outcome)
    return outcome


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def cross_site(request: Request) -> str | None:
    """Why a request looks sent by a page of another site, or None.

    A browser says so in `Sec-Fetch-Site`, or names the page's origin in `Origin`: an
    origin whose host is not the request's `Host` is another site. A request with
    neither header (a script, curl, an old browser) is not a browser's cross-site one.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"the browser says it was sent from another site ({site})"
    origin = request.headers.get("origin")
    if origin is not None and (
        origin == "null" or urlsplit(origin).netloc != request.headers.get("host")
    ):
        return f"it was sent from another origin ({origin})"
    return None


def require(role: str) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the request's principal, which must hold `role`.

    No principal → 401 with `WWW-Authenticate: Bearer`; a principal without the role → 403.
    A request that changes something (any method but GET, HEAD, OPTIONS) sent by a page
    of another site is 403 too: behind an SSO proxy, the browser's cookie authenticates
    whatever page makes it send the request, and `resume` or `compensate` need no body
    that would make the browser ask first.
    """
    if role not in ROLES:
        raise ConfigurationError(f"require({role!r}): known roles are {sorted(ROLES)}")

    async def _principal(request: Request) -> Principal:
        if request.method not in _SAFE_METHODS:
            why = cross_site(request)
            if why is not None:
                raise HTTPException(
                    403,
                    detail=f"refused: {why}; the API takes changes from its own origin and "
                    "from clients that are not browsers",
                )
        principal = await authenticate(request)
        if principal is None:
            raise HTTPException(
                401,
                detail="authentication required: send Authorization: Bearer <token>",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not principal.can(role):
            raise HTTPException(
                403,
                detail=f"principal {principal.name!r} lacks the {role!r} role for this route",
            )
        return principal

    _principal.__name__ = f"require_{role}"
    return _principal
