"""The one conversion from Python values to the JSON that is journaled and hashed.

| Python value                         | JSON                                         |
|--------------------------------------|----------------------------------------------|
| `None`, `bool`, `str`                | itself (a lone surrogate is refused)         |
| `int` within ±(2**53 - 1)            | number                                       |
| `int` outside that range             | decimal string (JCS numbers are IEEE doubles) |
| `float` (finite)                     | number (NaN and infinities are refused)      |
| `decimal.Decimal`                    | string, `str(value)`: no precision is lost   |
| `datetime`, `date`, `time`           | ISO 8601 string, `value.isoformat()`         |
| `timedelta`                          | number of seconds                            |
| `uuid.UUID`, `pathlib.PurePath`      | string                                       |
| `enum.Enum`                          | its value, converted                         |
| `bytes`, `bytearray`, `memoryview`   | standard base64 string                       |
| `list`, `tuple`                      | array                                        |
| `set`, `frozenset`                   | array sorted by canonical JSON               |
| mapping with `str`/`int`/enum keys   | object (keys as strings; two keys that       |
|                                      | become one string are refused)               |
| dataclass instance                   | object of its fields                         |
| pydantic model (`model_dump`)        | `model_dump(mode="json")`, converted         |

Anything else, and a value nested too deeply or holding itself, raises
`SerializationError` naming where the value was found. Nothing is ever pickled.
The reverse, guided by type annotations, is `from_json` in `sagacity.journal._rebuild`.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import pathlib
import re
import uuid
from collections.abc import Mapping
from typing import Any

from sagacity.errors import SerializationError
from sagacity.journal._canonical import JsonValue, canonical_bytes

__all__ = ["to_json"]

_MAX_SAFE_INT = 2**53 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


def to_json(value: Any, *, where: str = "value") -> JsonValue:
    """Convert `value` to a JSON value by the table in this module's docstring.

    Args:
        value: What to convert.
        where: Names the value in an error, such as "tool 'charge_card' argument 'amount'".

    Raises:
        SerializationError: The value, or something inside it, has no conversion.
    """
    try:
        return _plain(value)
    except _NotPlain:
        pass  # something to convert, or to refuse: the full conversion says where
    except RecursionError:
        pass
    try:
        return _convert(value, where)
    except RecursionError:
        raise SerializationError(
            f"{where}: nested too deeply, or holds itself; pass a tree of JSON values"
        ) from None


class _NotPlain(Exception):
    """`_plain` met a value it leaves to `_convert`."""


def _plain(value: Any) -> JsonValue:
    """Copy a value made only of plain JSON types, without tracking where anything is.

    Most tool inputs and results are plain; building the location of every item, as
    `_convert` does for its messages, would cost more than the conversion.
    """
    kind = type(value)
    if kind is str:
        if value.isascii() or _SURROGATE.search(value) is None:
            return value  # type: ignore[no-any-return]  # Any narrowed by the exact type check
        raise _NotPlain
    if kind is int:
        return _integer(value)
    if kind is bool or value is None:
        return value  # type: ignore[no-any-return]
    if kind is float:
        if value - value == 0.0:  # false for NaN and the infinities
            return value  # type: ignore[no-any-return]
        raise _NotPlain
    if kind is dict:
        result: dict[str, JsonValue] = {}
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _SURROGATE.search(key) is None):
                raise _NotPlain
            result[key] = _plain(item)
        return result
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    raise _NotPlain


def _convert(value: Any, where: str) -> JsonValue:
    kind = type(value)
    if kind is str:
        return _string(value, where)
    if kind is bool or value is None:
        return value  # type: ignore[no-any-return]  # Any narrowed by the exact type check
    if kind is int:
        return _integer(value)
    if kind is dict:
        return _object(value, where)
    if kind is list or kind is tuple:
        return [_convert(item, f"{where}[{index}]") for index, item in enumerate(value)]
    return _convert_other(value, where)


def _convert_other(value: Any, where: str) -> JsonValue:
    if isinstance(value, enum.Enum):
        return _convert(value.value, where)
    if isinstance(value, bool | str):
        return bool(value) if isinstance(value, bool) else _string(str(value), where)
    if isinstance(value, int):
        return _convert(int(value), where)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise SerializationError(f"{where}: {value!r} has no JSON form")
        return float(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise SerializationError(f"{where}: {value!r} has no JSON form")
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID | pathlib.PurePath):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return _object(value, where)
    if isinstance(value, list | tuple):
        return [_convert(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        items = [_convert(item, f"{where}{{…}}") for item in value]
        return sorted(items, key=canonical_bytes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _convert(getattr(value, field.name), f"{where}.{field.name}")
            for field in dataclasses.fields(value)
        }
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        return _convert(model_dump(mode="json"), where)
    raise SerializationError(
        f"{where}: cannot convert a {type(value).__qualname__} to JSON; pass a JSON value, "
        "a dataclass or a pydantic model, or convert it in the tool"
    )


def _object(value: Mapping[Any, Any], where: str) -> dict[str, JsonValue]:
    result: dict[str, JsonValue] = {}
    for key, item in value.items():
        name = _key(key, where)
        if name in result:
            raise SerializationError(
                f"{where}: two keys become the JSON key {name!r}; use distinct string keys"
            )
        result[name] = _convert(item, f"{where}[{key!r}]")
    return result


def _integer(value: int) -> int | str:
    """JCS numbers are IEEE doubles: an integer they cannot hold exactly becomes a string."""
    return value if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT else str(value)


def _string(value: str, where: str) -> str:
    if not value.isascii() and _SURROGATE.search(value) is not None:
        raise SerializationError(
            f"{where}: the string {value[:40]!r} holds a lone surrogate, which has no UTF-8 "
            "form; decode the text properly or pass bytes"
        )
    return value


def _key(key: Any, where: str) -> str:
    if type(key) is str:
        return _string(key, where)
    if isinstance(key, enum.Enum):
        key = key.value
    if isinstance(key, str | int) and not isinstance(key, bool):
        return _string(str(key), where)
    raise SerializationError(f"{where}: object key {key!r} is not a string")
