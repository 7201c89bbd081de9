"""The one conversion from Python values to the JSON that is journaled and hashed.

| Python value                         | JSON                                         |
|--------------------------------------|----------------------------------------------|
| `None`, `bool`, `str`                | itself (a lone surrogate is refused)         |
| `int` within ±(2**53 - 1)            | number                                       |
| `int` outside that range             | decimal string (JCS numbers are IEEE doubles) |
| `float` (finite)                     | number (NaN and infinities are refused)      |
| `decimal.Decimal`                    | string, `str(value)`: no precision is lost   |
| `datetime`, `date`, `time`           | ISO 8601 string, `value.isoformat()`         |
| `timedelta`                          | number of seconds, when that double is exact |
| `uuid.UUID`, `pathlib.PurePath`      | string                                       |
| `enum.Enum`                          | its value, converted                         |
| `bytes`, `bytearray`, `memoryview`   | standard base64 string                       |
| `list`, `tuple`                      | array                                        |
| `set`, `frozenset`                   | array sorted by canonical JSON               |
| mapping with `str`/`int`/enum keys   | object (keys as strings; two keys that       |
|                                      | become one string are refused)               |
| dataclass instance                   | object of its fields                         |
| pydantic model (`model_dump`)        | `model_dump(mode="json")`, converted         |

Subclasses of `str`, `int` and `float` convert as their base type: their characters or
their number. What has no faithful JSON form is refused rather than projected, since
two inputs that a tool treats differently must never be journaled, hashed and approved
as one: a secret (pydantic's `SecretStr`, `SecretBytes`: dumped masked), a pydantic
field left out of the dump (`exclude=True`, `exclude_if`), a subclass whose `str()`,
`int()` or `float()` says otherwise than its value, a `timedelta` whose seconds a double
cannot hold to the microsecond. Anything else, and a value nested too deeply or holding
itself, raises `SerializationError` naming where the value was found. Nothing is ever
pickled.
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
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return _string(_base_value(value, str, where), where)
    if isinstance(value, int):
        return _convert(_base_value(value, int, where), where)
    if isinstance(value, float):
        number: float = _base_value(value, float, where)
        if number != number or number in (float("inf"), float("-inf")):
            raise SerializationError(f"{where}: {value!r} has no JSON form")
        return number
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise SerializationError(f"{where}: {value!r} has no JSON form")
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _seconds(value, where)
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
    if _is_secret(value):
        raise _secret(value, where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _convert(getattr(value, field.name), f"{where}.{field.name}")
            for field in dataclasses.fields(value)
        }
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        _refuse_lossy_fields(value, where)
        return _convert(model_dump(mode="json"), where)
    raise SerializationError(
        f"{where}: cannot convert a {type(value).__qualname__} to JSON; pass a JSON value, "
        "a dataclass or a pydantic model, or convert it in the tool"
    )


_BASE_CONVERSIONS = {str: "__str__", int: "__int__", float: "__float__"}


def _base_value(value: Any, base: type[Any], where: str) -> Any:
    """The characters or number of a `str`, `int` or `float` subclass, as its base type.

    A subclass whose own `str()`, `int()` or `float()` gives something else has two
    readings, and a tool may use either: refused.
    """
    own = getattr(base, _BASE_CONVERSIONS[base])(value)  # the value itself, not an override
    if getattr(type(value), _BASE_CONVERSIONS[base]) is getattr(base, _BASE_CONVERSIONS[base]):
        return own
    try:
        shown = base(value)
    except Exception as error:  # its own conversion raises: it has no one reading
        shown = error
    if type(shown) is base and shown == own:
        return own
    kind, reading = type(value).__qualname__, f"{base.__name__}()"
    raise SerializationError(
        f"{where}: a {kind} whose {reading} gives {str(shown)[:40]!r} but whose value is "
        f"{str(own)[:40]!r} has no one JSON form; pass {reading} of it, or the plain "
        f"{base.__name__}"
    )


def _seconds(value: datetime.timedelta, where: str) -> float:
    """The seconds of a timedelta, refused unless the double gives it back exactly.

    A double holds about 15 significant digits: from about 270 years on, a timedelta's
    microseconds no longer fit, and two timedeltas would give one number.
    """
    seconds = value.total_seconds()
    try:
        exact = datetime.timedelta(seconds=seconds) == value
    except OverflowError:  # rounded up past timedelta.max
        exact = False
    if not exact:
        raise SerializationError(
            f"{where}: {value!r} has no exact number of seconds in JSON: the nearest "
            f"double, {seconds!r}, is another timedelta; pass its days, seconds and "
            "microseconds as integers, or round it"
        )
    return seconds


def _is_secret(value: Any) -> bool:
    """A pydantic `SecretStr` or `SecretBytes`: a value whose secret hides behind a mask."""
    return not isinstance(value, type) and callable(getattr(value, "get_secret_value", None))


def _secret(value: Any, where: str) -> SerializationError:
    return SerializationError(
        f"{where}: a {type(value).__qualname__} is dumped masked, so two different secrets "
        "would be journaled, hashed and approved as one (and a secret has no place in the "
        "journal); pass a reference to it (a vault key, a setting's name) and read the "
        "secret in the tool"
    )


def _refuse_lossy_fields(model: Any, where: str) -> None:
    """Refuse a pydantic model whose dump leaves out or masks part of its value.

    `model_dump` drops a field declared with `exclude=True` (or whose `exclude_if` says
    so) and masks secrets: two models that differ only there would dump, hash and be
    approved as one. The model's fields are walked for both, nested models, containers
    and dataclasses included, before its dump is taken.
    """
    fields = getattr(type(model), "model_fields", None)
    if not isinstance(fields, Mapping):
        return  # not a pydantic v2 model: its `model_dump` is all there is to go on
    for name, info in fields.items():
        here = f"{where}.{name}"
        if getattr(info, "exclude", None) is True or getattr(info, "exclude_if", None):
            raise SerializationError(
                f"{here}: field {name!r} of {type(model).__qualname__} is left out of its "
                "dump (exclude), so two inputs that differ only there would be journaled, "
                "hashed and approved as one; drop the exclusion, or pass the field as an "
                "argument of its own"
            )
        _refuse_lossy_parts(getattr(model, name, None), here)


def _refuse_lossy_parts(value: Any, where: str) -> None:
    """Refuse a secret or a lossy model anywhere inside a model's field."""
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return
    if _is_secret(value):
        raise _secret(value, where)
    if callable(getattr(value, "model_dump", None)) and not isinstance(value, type):
        _refuse_lossy_fields(value, where)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _refuse_lossy_parts(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _refuse_lossy_parts(item, f"{where}[{index}]")
    elif isinstance(value, set | frozenset):
        for item in value:
            _refuse_lossy_parts(item, f"{where}{{…}}")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _refuse_lossy_parts(getattr(value, field.name), f"{where}.{field.name}")


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
    if isinstance(key, str):
        return _string(_base_value(key, str, where), where)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(_base_value(key, int, where))
    raise SerializationError(f"{where}: object key {key!r} is not a string")
