"""The one conversion from Python values to the JSON that is journaled and hashed.

| Python value                         | JSON                                         |
|--------------------------------------|----------------------------------------------|
| `None`, `bool`, `str`                | itself                                       |
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
| mapping with `str`/`int`/enum keys   | object (keys as strings)                     |
| dataclass instance                   | object of its fields                         |
| pydantic model (`model_dump`)        | `model_dump(mode="json")`, converted         |

Anything else raises `SerializationError` naming where the value was found. Nothing is
ever pickled.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import pathlib
import uuid
from collections.abc import Mapping
from typing import Any

from sagacity.errors import SerializationError
from sagacity.journal._canonical import JsonValue, canonical_bytes

__all__ = ["to_json"]

_MAX_SAFE_INT = 2**53 - 1


def to_json(value: Any, *, where: str = "value") -> JsonValue:
    """Convert `value` to a JSON value by the table in this module's docstring.

    Args:
        value: What to convert.
        where: Names the value in an error, such as "tool 'charge_card' argument 'amount'".

    Raises:
        SerializationError: The value, or something inside it, has no conversion.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value  # type: ignore[no-any-return]  # Any narrowed by the exact type check
    if kind is int:
        return value if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT else str(value)
    if kind is dict:
        return {
            _key(key, where): to_json(item, where=f"{where}[{key!r}]")
            for key, item in value.items()
        }
    if kind is list or kind is tuple:
        return [to_json(item, where=f"{where}[{index}]") for index, item in enumerate(value)]
    return _convert_other(value, where)


def _convert_other(value: Any, where: str) -> JsonValue:
    if isinstance(value, enum.Enum):
        return to_json(value.value, where=where)
    if isinstance(value, bool | str):
        return bool(value) if isinstance(value, bool) else str(value)
    if isinstance(value, int):
        return to_json(int(value), where=where)
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
        return {
            _key(key, where): to_json(item, where=f"{where}[{key!r}]")
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [to_json(item, where=f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        items = [to_json(item, where=f"{where}{{…}}") for item in value]
        return sorted(items, key=canonical_bytes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: to_json(getattr(value, field.name), where=f"{where}.{field.name}")
            for field in dataclasses.fields(value)
        }
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        return to_json(model_dump(mode="json"), where=where)
    raise SerializationError(
        f"{where}: cannot convert a {type(value).__qualname__} to JSON; pass a JSON value, "
        "a dataclass or a pydantic model, or convert it in the tool"
    )


def _key(key: Any, where: str) -> str:
    if type(key) is str:
        return key
    if isinstance(key, enum.Enum):
        key = key.value
    if isinstance(key, str | int) and not isinstance(key, bool):
        return str(key)
    raise SerializationError(f"{where}: object key {key!r} is not a string")
