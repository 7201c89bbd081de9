"""Canonical JSON (RFC 8785, JCS) and the SHA-256 digests built on it.

`rfc8785` is the reference. It costs about 23 µs per journal row, more than the whole
in-memory budget of a tool call, so values made only of strings, safe integers,
booleans, null, lists and objects whose keys sort the same by UTF-16 code unit as by
code point go through orjson with sorted keys, which emits the same bytes for them
(tests compare both on the RFC's vectors and on random values). Floats, and objects
with keys outside the Basic Multilingual Plane, take the reference path.
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeAlias

import orjson
import rfc8785

from sagacity.errors import SerializationError

__all__ = ["JsonValue", "canonical_bytes", "sha256_hex"]

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"

_MAX_SAFE_INT = 2**53 - 1
_LAST_BMP = "\uffff"


def _fast_path_is_exact(value: Any) -> bool:
    """Tell whether orjson's sorted output is byte-identical to JCS for `value`."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_MAX_SAFE_INT <= value <= _MAX_SAFE_INT)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and max(key) > _LAST_BMP):
                return False
            if not _fast_path_is_exact(item):
                return False
        return True
    if kind is list:
        return all(_fast_path_is_exact(item) for item in value)
    return False


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 encoding of a JSON value.

    Raises:
        SerializationError: `value` is not a JSON value JCS can encode (a NaN, an
            integer outside ±(2**53 - 1), a lone surrogate, a non-string key).
    """
    if _fast_path_is_exact(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass  # a lone surrogate, say: let the reference say what is wrong
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as error:
        raise SerializationError(f"not canonical JSON: {error}") from error


def sha256_hex(value: Any) -> str:
    """Return the lowercase hex SHA-256 of `value`'s canonical JSON."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()
