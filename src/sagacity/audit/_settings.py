"""A deployment's signed-approval settings, from options or the environment.

Every process that acts on approvals (the worker, `sagacity serve`, the CLI's `approve`,
`resume`, `reject`, `compensate`, `pending`, `show`, `verify`) must count the same
approvals, so they all read the same three settings the same way:

| environment variable | option | meaning |
|---|---|---|
| `SAGACITY_APPROVAL_KEY` | `--key` (approve), `approval_key=` | the private key that signs |
| `SAGACITY_APPROVAL_PUBLIC_KEYS` | `--approval-public-key` | PEM files of the keys that verify |
| `SAGACITY_REQUIRE_SIGNED_APPROVALS` | `--require-signed-approvals` | count only signed ones |

An option given replaces the variable; a requirement can only be turned on by an
option, never off (fail closed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sagacity.errors import ConfigurationError

__all__ = [
    "APPROVAL_KEY_VARIABLE",
    "PUBLIC_KEYS_VARIABLE",
    "REQUIRE_VARIABLE",
    "approval_settings",
    "require_from",
]

APPROVAL_KEY_VARIABLE = "SAGACITY_APPROVAL_KEY"
PUBLIC_KEYS_VARIABLE = "SAGACITY_APPROVAL_PUBLIC_KEYS"
REQUIRE_VARIABLE = "SAGACITY_REQUIRE_SIGNED_APPROVALS"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def require_from(environ: Mapping[str, str]) -> bool:
    """`SAGACITY_REQUIRE_SIGNED_APPROVALS` as a bool; unset or empty is False.

    Raises:
        ConfigurationError: The value is not one of 1, true, yes, on, 0, false, no, off.
    """
    value = environ.get(REQUIRE_VARIABLE, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigurationError(
        f"{REQUIRE_VARIABLE}={environ[REQUIRE_VARIABLE]!r}: give 1 (or true, yes, on) to "
        "require signed approvals, 0 (or false, no, off) not to"
    )


def approval_settings(
    *,
    signing_key: str | Path | None = None,
    public_keys: Sequence[str | Path] | None = None,
    require: bool = False,
    sign: bool = True,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The `Sagacity(...)` options of signed approvals: keys loaded, requirement read.

    Args:
        signing_key: The private key PEM that signs; None: `SAGACITY_APPROVAL_KEY`.
        public_keys: Public key PEMs whose signatures count; None:
            `SAGACITY_APPROVAL_PUBLIC_KEYS` (paths separated by `os.pathsep`).
        require: Require signed approvals; False leaves it to
            `SAGACITY_REQUIRE_SIGNED_APPROVALS`.
        sign: Load the signing key to sign with; False: only its public key is trusted
            (a process that shows or checks approvals but does not approve).
        environ: The environment to read (default `os.environ`).

    Raises:
        ConfigurationError: A key file is missing, not an Ed25519 key, or a private key
            others can read; the variable holds no yes or no; or signatures are required
            with no key to verify them.
    """
    from sagacity.audit._keys import load_private_key, load_public_key

    env = os.environ if environ is None else environ
    if signing_key is None:
        signing_key = env.get(APPROVAL_KEY_VARIABLE) or None
    if public_keys is None:
        listed = env.get(PUBLIC_KEYS_VARIABLE, "")
        public_keys = [path for path in listed.split(os.pathsep) if path.strip()]
    required = require or require_from(env)
    options: dict[str, Any] = {}
    trusted = [load_public_key(path) for path in public_keys]
    if signing_key is not None:
        key = load_private_key(signing_key)
        if sign:
            options["approval_signing_key"] = key
        else:
            trusted.append(key.public)
    if trusted:
        options["approval_public_keys"] = trusted
    if required:
        if not trusted and signing_key is None:
            raise ConfigurationError(
                "signed approvals are required, but no key is given to verify them with: "
                f"set {PUBLIC_KEYS_VARIABLE} (or --approval-public-key) to the approval "
                "service's public key"
            )
        options["require_signed_approvals"] = True
    return options
