"""Ed25519 keys: generate, load, sign, verify (extra `signing`).

Signed approvals and signed checkpoints share these few functions. Keys are stored as
PEM files (PKCS#8 for the private key, SubjectPublicKeyInfo for the public one); a key
is named by its `key_id`, the first 16 hex digits of the SHA-256 of its 32 raw public
bytes. Signatures travel as lowercase hex.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sagacity.errors import ConfigurationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "PrivateKey",
    "PublicKey",
    "generate_key",
    "keys_by_id",
    "load_private_key",
    "load_public_key",
]

_EXTRA = "signing needs the 'signing' extra: pip install 'sagacity[signing]'"


def _ed25519() -> object:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as error:  # pragma: no cover - exercised with the extra blocked
        raise ImportError(_EXTRA) from error
    return ed25519


def _raw(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclasses.dataclass(frozen=True, slots=True)
class PublicKey:
    """An Ed25519 public key that verifies signatures."""

    key: Ed25519PublicKey
    """The key itself."""

    @property
    def key_id(self) -> str:
        """The first 16 hex digits of the SHA-256 of the raw public key."""
        return hashlib.sha256(_raw(self.key)).hexdigest()[:16]

    def verify(self, data: bytes, signature: str) -> bool:
        """Whether `signature` (hex) is this key's signature of `data`."""
        from cryptography.exceptions import InvalidSignature

        try:
            self.key.verify(bytes.fromhex(signature), data)
        except (InvalidSignature, ValueError):
            return False
        return True

    def pem(self) -> bytes:
        """The key as a SubjectPublicKeyInfo PEM file's bytes."""
        from cryptography.hazmat.primitives import serialization

        return self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PrivateKey:
    """An Ed25519 private key that signs."""

    key: Ed25519PrivateKey
    """The key itself."""

    @property
    def public(self) -> PublicKey:
        """The matching public key."""
        return PublicKey(self.key.public_key())

    @property
    def key_id(self) -> str:
        """The id of the matching public key."""
        return self.public.key_id

    def sign(self, data: bytes) -> str:
        """Sign `data`; return the signature as hex."""
        return self.key.sign(data).hex()

    def pem(self) -> bytes:
        """The key as an unencrypted PKCS#8 PEM file's bytes."""
        from cryptography.hazmat.primitives import serialization

        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def generate_key() -> PrivateKey:
    """Make a new Ed25519 private key."""
    _ed25519()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return PrivateKey(Ed25519PrivateKey.generate())


def load_private_key(path: str | Path) -> PrivateKey:
    """Read an Ed25519 private key from a PEM file that only its owner can read.

    Raises:
        ConfigurationError: The file is missing, unreadable, holds no Ed25519 private
            key, or (on POSIX) its group or others may read or write it: whoever can
            read the key can sign anything, so it is refused, as ssh refuses such a key.
    """
    _ed25519()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    _refuse_shared(path)
    data = _read(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise ConfigurationError(f"{path}: not a PEM private key ({error})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError(f"{path}: the private key is not an Ed25519 key")
    return PrivateKey(key)


def load_public_key(path: str | Path) -> PublicKey:
    """Read an Ed25519 public key from a PEM file (a private key file works too).

    Raises:
        ConfigurationError: The file is missing, unreadable or holds no Ed25519 key.
    """
    _ed25519()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read(path, "public key")
    if b"PRIVATE KEY" in data:
        return load_private_key(path).public
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as error:
        raise ConfigurationError(f"{path}: not a PEM public key ({error})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigurationError(f"{path}: the public key is not an Ed25519 key")
    return PublicKey(key)


def keys_by_id(keys: Iterable[PublicKey]) -> dict[str, PublicKey]:
    """Index public keys by their `key_id`."""
    return {key.key_id: key for key in keys}


def _refuse_shared(path: str | Path) -> None:
    """Refuse a private key file whose group or others have any permission on it."""
    if os.name != "posix":
        return  # Windows has ACLs, not mode bits: nothing to read here
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # `_read` says why it cannot be read
    if mode & 0o077:
        raise ConfigurationError(
            f"the private key {path} is readable or writable by others (mode "
            f"{stat.S_IMODE(mode):04o}): whoever reads it can sign anything. Make it the "
            f"owner's alone with: chmod 600 {path}"
        )


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ConfigurationError(f"cannot read the {what} {path}: {error.strerror}") from None
