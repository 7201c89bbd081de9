"""Canonical JSON (RFC 8785, JCS) and the SHA-256 digests built on it.

`rfc8785` is the reference. It costs about 23 µs per journal row, more than the whole
in-memory budget of a tool call, so values made only of strings, integers, booleans,
null, lists and objects whose keys sort the same by UTF-16 code unit as by code point
go through orjson with sorted keys, which emits the same bytes for them: orjson escapes
strings exactly as JCS does, sorts keys by code point (the same order as UTF-16 code
units inside the Basic Multilingual Plane), and with `OPT_STRICT_INTEGER` refuses the
integers JCS cannot represent. Floats, whose shortest form orjson writes differently
(`1.0`, `1e+16`), and objects with keys outside the Basic Multilingual Plane take the
reference path. Tests compare both paths on the RFC's vectors and on random values.
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeAlias

import orjson
import rfc8785

from sagacity.errors import SerializationError

__all__ = ["JsonValue", "canonical_bytes", "canonical_string", "decode_canonical", "sha256_hex"]

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"

_LAST_BMP = "\uffff"
_MAX_SAFE_INT = 2**53 - 1
# 2**53 has 16 digits: a number token with fewer cannot be out of the safe range. Runs
# of digits are found by mapping every digit to "0" and all else to " " (faster than re).
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_SIXTEEN_DIGITS = b"0" * 16
_SCALARS = frozenset((str, int, bool, type(None)))
_FAST_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_dumps = orjson.dumps


def _fast_path_is_exact(value: Any) -> bool:
    """Tell whether orjson's sorted output is byte-identical to JCS for `value`.

    Integers out of JCS's range and lone surrogates are not looked for here: orjson
    refuses them, and the reference path then says what is wrong.
    """
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and max(key) > _LAST_BMP):
                return False
            if type(item) not in _SCALARS and not _fast_path_is_exact(item):
                return False
        return True
    if kind is list:
        for item in value:
            if type(item) not in _SCALARS and not _fast_path_is_exact(item):
                return False
        return True
    return kind in _SCALARS


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 encoding of a JSON value.

    Raises:
        SerializationError: `value` is not a JSON value JCS can encode (a NaN, an
            integer outside ±(2**53 - 1), a lone surrogate, a non-string key).
    """
    if _fast_path_is_exact(value):
        try:
            return _dumps(value, option=_FAST_OPTIONS)
        except orjson.JSONEncodeError:
            pass  # a lone surrogate or a huge integer: let the reference say what is wrong
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as error:
        raise SerializationError(f"not canonical JSON: {error}") from error


def canonical_string(value: str | None) -> bytes:
    """Return the canonical JSON of a string or None: the quoted, escaped string or `null`.

    Raises:
        SerializationError: The string holds a lone surrogate, which has no UTF-8 form.
    """
    try:
        return _dumps(value)
    except orjson.JSONEncodeError as error:
        raise SerializationError(f"not canonical JSON: {value!r}: {error}") from error


def sha256_hex(value: Any) -> str:
    """Return the lowercase hex SHA-256 of `value`'s canonical JSON."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def decode_canonical(data: bytes | str) -> JsonValue:
    """Parse canonical JSON back into the value whose encoding it is.

    JCS numbers are IEEE doubles, written without exponent below 1e21: a double such as
    `2.0**60` is written `1152921504606846976`, which a JSON parser returns as an
    integer, and an integer that large has no canonical form. Integers outside
    ±(2**53 - 1) are refused when written, so such a number can only have been a
    double: it is read back as that (exact) float, and hashes as it did.
    """
    value: JsonValue = orjson.loads(data)
    raw = data if isinstance(data, bytes) else data.encode()
    if _SIXTEEN_DIGITS in raw.translate(_DIGITS_TO_ZERO):
        return _restore_doubles(value)
    return value


def _restore_doubles(value: JsonValue) -> JsonValue:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT else float(value)
    if isinstance(value, dict):
        return {key: _restore_doubles(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_restore_doubles(item) for item in value]
    return value
