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

A value nested more than `MAX_DEPTH` arrays and objects deep is refused, on both paths:
orjson writes no deeper, and a fixed bound keeps the reference path's recursion (and the
reading back) from depending on how deep the caller's own stack is. Whatever the value,
encoding it either returns its bytes or raises `SerializationError`.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any, TypeAlias

import orjson
import rfc8785

from sagacity.errors import SerializationError

__all__ = [
    "MAX_DEPTH",
    "JsonValue",
    "canonical_bytes",
    "canonical_string",
    "copy_json",
    "decode_canonical",
    "sha256_hex",
]

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"

MAX_DEPTH = 254
"""The most arrays and objects a journaled JSON value may nest: orjson's own bound."""

_LAST_BMP = "\uffff"
_MAX_SAFE_INT = 2**53 - 1
# 2**53 has 16 digits: a number token with fewer cannot be out of the safe range. Runs
# of digits are found by mapping every digit to "0" and all else to " " (faster than re).
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_SIXTEEN_DIGITS = b"0" * 16
_SCALARS = frozenset((str, int, bool, type(None)))
_CONTAINERS = (dict, list, tuple)
_FAST_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_dumps = orjson.dumps
_loads = orjson.loads
_IMMUTABLE = frozenset((str, int, float, bool, type(None)))


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
            integer outside ±(2**53 - 1), a lone surrogate, a non-string key, a value
            nested more than `MAX_DEPTH` deep or holding itself), whatever its shape.
    """
    try:
        exact = _fast_path_is_exact(value)
    except RecursionError:
        exact = False  # nested too deeply, or holding itself: the reference path says so
    if exact:
        try:
            return _dumps(value, option=_FAST_OPTIONS)
        except orjson.JSONEncodeError:
            pass  # a lone surrogate, a huge integer, too deep: let the reference say what
    return _reference_bytes(value)


def _reference_bytes(value: Any) -> bytes:
    """Encode with `rfc8785`, turning every failure into a `SerializationError`."""
    try:
        if _nested_deeper_than(value, MAX_DEPTH):
            raise SerializationError(
                f"not canonical JSON: nested more than {MAX_DEPTH} arrays and objects deep, "
                "or holds itself; pass a shallower tree of JSON values"
            )
        return rfc8785.dumps(value)
    except SerializationError:
        raise
    except RecursionError:
        raise SerializationError(
            "not canonical JSON: nested too deeply for this thread's stack"
        ) from None
    except Exception as error:  # a value's own methods may raise anything: refuse it
        raise SerializationError(f"not canonical JSON: {error}") from error


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` arrays and objects (without recursing).

    A value that holds itself nests without end, so it is found too.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth == limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, _CONTAINERS))
    return False


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


def copy_json(value: JsonValue) -> JsonValue:
    """Return a copy of a JSON value that shares no list or object with it.

    What the journal hands out (an entry's payload, a replayed result) is copied, so
    that a caller who changes it changes its copy, never the journal.
    """
    if type(value) in _IMMUTABLE:
        return value
    try:
        # Exact for JSON values, and a third of the cost of a copy made in Python.
        return _loads(_dumps(value))  # type: ignore[no-any-return]  # a JSON value
    except orjson.JSONEncodeError:  # not a JSON value: copied as Python copies it
        return copy.deepcopy(value)


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
