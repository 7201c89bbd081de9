"""The reverse of `to_json`: rebuild a tool's Python arguments from their journaled JSON.

An approved call may run in another process, from its journaled input alone. `from_json`
rebuilds each value `to_json` was given, guided by the parameter's annotation, and only
if converting it again gives the same JSON, which the approval's hash was taken of:

| Annotation                           | JSON it takes                                  |
|--------------------------------------|------------------------------------------------|
| none, `Any`, `object`                | anything, passed through unchanged             |
| `None`, `bool`, `str`                | itself                                         |
| `int`                                | number; decimal string outside ±(2**53 - 1)    |
| `float`                              | number (an integer becomes a float)            |
| `decimal.Decimal`                    | string, as `str(value)` writes it              |
| `datetime`, `date`, `time`           | ISO 8601 string, as `value.isoformat()` writes |
| `timedelta`                          | number of seconds, in whole microseconds       |
| `uuid.UUID`, `pathlib.PurePath`      | string, as `str(value)` writes it              |
| `enum.Enum` subclass                 | the JSON of exactly one member's value         |
| `bytes`, `bytearray`                 | standard base64 string                         |
| `list[T]`, `Sequence[T]`             | array, items by `T`                            |
| `tuple[T, ...]`, `tuple[A, B]`       | array (of that length), items by type          |
| `set[T]`, `frozenset[T]`             | array sorted by canonical JSON, no repeats     |
| `dict[str, T]`, `Mapping[str, T]`    | object, values by `T`                          |
| `T | None`, `A | B`, `Literal[...]`  | null, or what exactly one member fits          |
| `Annotated[T, ...]`                  | what `T` takes                                 |
| dataclass                            | object of all its fields, by their hints       |
| pydantic model (`model_validate`)    | object, `model_validate(value)`                |
| `TypedDict`                          | object of its keys, by their hints             |

Anything else raises `SerializationError` naming where the value was found, what was
found and what was expected: a value that does not fit, one that several members of a
union fit, and an annotation that cannot be resolved. Nothing is guessed; the one
preference is `int` over `float` for an integer, which JCS writes alike (`5.0` as `5`).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import enum
import inspect
import types
import typing
import weakref
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, MutableSet, Sequence
from collections.abc import Set as AbstractSet
from datetime import date, time, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any
from uuid import UUID

from sagacity.errors import SerializationError
from sagacity.journal._canonical import JsonValue, canonical_bytes
from sagacity.journal._convert import to_json

__all__ = ["from_json", "rebuild_arguments"]

_RESUME = "resume with the framework's own resume as `work`"
_ADVICE = f"annotate the parameter, or {_RESUME}"
_ONE_TYPE = f"annotate the parameter with one type, or {_RESUME}"
_LISTS = (list, Sequence, MutableSequence)
_SETS = (set, MutableSet, frozenset, AbstractSet)
_DICTS = (dict, Mapping, MutableMapping)
_SCALARS = (bool, int, float, str, Decimal, date, time, timedelta, UUID, PurePath, bytes, bytearray)


def from_json(value: JsonValue, annotation: Any, *, where: str) -> Any:
    """Rebuild the value `to_json` turned into `value`, by the table in the module docstring.

    Args:
        value: A journaled JSON value.
        annotation: The type hint of the parameter it is for.
        where: Names the value in an error, such as "tool 'wire' argument 'amount'".

    Raises:
        SerializationError: The value does not fit the annotation, fits it several ways,
            or would not be journaled as the same JSON once rebuilt.
    """
    try:
        result = _rebuild(value, annotation, where)
    except RecursionError:
        raise SerializationError(f"{where}: nested too deeply to rebuild; {_ADVICE}") from None
    if result is not value and not _same_json(result, value):  # set order, defaults...
        raise _unfit(where, value, f"the JSON of {_name(annotation)} (rebuilt, it differs)")
    return result


def rebuild_arguments(
    func: Callable[..., Any], arguments: Mapping[str, JsonValue], *, tool_name: str
) -> dict[str, Any]:
    """Rebuild a tool's journaled input as keyword arguments for `func(**result)`.

    Parameters absent from `arguments` are left out, so their defaults apply. Keys that
    name no parameter go to a `**kwargs` parameter, rebuilt by its value annotation.

    Args:
        func: The tool's function; a bound method's `self` is already bound.
        arguments: The journaled input, by parameter name.
        tool_name: Names the tool in an error.

    Raises:
        SerializationError: An argument cannot be rebuilt, or cannot be passed by name.
    """
    parameters, hints = _signature(func)
    spread = next((p for p in parameters.values() if p.kind is p.VAR_KEYWORD), None)
    result: dict[str, Any] = {}
    for name, value in arguments.items():
        where = f"tool {tool_name!r} argument {name!r}"
        parameter = parameters.get(name)
        if parameter is None or parameter.kind is parameter.VAR_KEYWORD:
            if spread is None:
                raise _unfit(where, value, f"one of {list(parameters)}", fix=_RESUME)
            parameter = spread
        elif parameter.kind is parameter.VAR_POSITIONAL and value == []:
            continue  # no positional arguments: binding journals an empty *args
        elif parameter.kind in (parameter.VAR_POSITIONAL, parameter.POSITIONAL_ONLY):
            raise _unfit(where, value, "a parameter passed by name", fix=_RESUME)
        result[name] = from_json(value, _hint(func, parameter, hints, where), where=where)
    return result


_SIGNATURES: weakref.WeakKeyDictionary[
    Callable[..., Any], tuple[Mapping[str, inspect.Parameter], dict[str, Any]]
] = weakref.WeakKeyDictionary()
"""Each tool function's parameters and resolved hints: resolving string annotations
compiles each one, a tenth of a millisecond a call for a tool of two parameters."""


def _signature(
    func: Callable[..., Any],
) -> tuple[Mapping[str, inspect.Parameter], dict[str, Any] | None]:
    """`func`'s parameters and hints; None for hints that do not all resolve (not kept)."""
    with contextlib.suppress(KeyError, TypeError):  # TypeError: no weak reference to it
        return _SIGNATURES[func]
    parameters = inspect.signature(func).parameters
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # resolved one by one by `_hint`, to name the parameter at fault
        return parameters, None
    with contextlib.suppress(TypeError):
        _SIGNATURES[func] = (parameters, hints)
    return parameters, hints


def _rebuild(value: JsonValue, annotation: Any, where: str) -> Any:
    if annotation is Any or annotation is object or annotation is inspect.Parameter.empty:
        return value
    if annotation is None or annotation is type(None):
        annotation = typing.Literal[None]
    origin, args = typing.get_origin(annotation) or annotation, typing.get_args(annotation)
    if origin is typing.Annotated:
        return _rebuild(value, args[0], where)
    if origin is typing.Union or origin is types.UnionType:
        return _union(value, args, where)
    if origin is typing.Literal:
        return _one([a for a in args if _same_json(a, value)], value, where, _name(annotation))
    if origin in _LISTS or origin in _SETS or origin is tuple:
        if not isinstance(value, list):
            raise _unfit(where, value, "an array")
        kinds = [args[0] if args else Any] * len(value)
        if origin is tuple and hasattr(annotation, "__args__") and args[-1:] != (Ellipsis,):
            kinds = list(args)  # tuple[A, B], or tuple[()]
        if len(kinds) != len(value):
            raise _unfit(where, value, f"an array of {len(kinds)} for {_name(annotation)}")
        items = [_rebuild(value[i], kind, f"{where}[{i}]") for i, kind in enumerate(kinds)]
        if origin in _LISTS or origin is tuple:
            return items if origin in _LISTS else tuple(items)
        try:
            return frozenset(items) if origin in (frozenset, AbstractSet) else set(items)
        except TypeError:  # an unhashable item
            raise _unfit(where, value, f"{_name(annotation)} of hashable items") from None
    if origin in _DICTS:
        if not isinstance(value, dict) or (args and args[0] not in (str, Any)):
            raise _unfit(where, value, f"an object, for {_name(annotation)} with str keys")
        item = args[1] if args else Any
        return {k: _rebuild(v, item, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(origin, type):
        return _class(value, origin, where)
    raise _unfit(where, value, f"a type it can be rebuilt as, not {annotation!r}")


def _class(value: JsonValue, cls: type, where: str) -> Any:
    if issubclass(cls, enum.Enum):
        matches = list(dict.fromkeys(m for m in cls.__members__.values() if _same_json(m, value)))
        return _one(matches, value, where, f"a value of {cls.__qualname__}")
    if dataclasses.is_dataclass(cls) or typing.is_typeddict(cls):
        return _fields(value, cls, where)
    validate = getattr(cls, "model_validate", None)
    if callable(validate):  # a pydantic model
        try:
            return validate(value)
        except ValueError as error:  # pydantic's ValidationError is a ValueError
            raise _unfit(where, value, f"a valid {cls.__qualname__} ({error})") from None
    if issubclass(cls, _SCALARS):
        with contextlib.suppress(TypeError, ValueError, ArithmeticError, AttributeError):
            result = _scalar(value, cls)
            if _same_json(result, value):  # refuses True for an int, "5" for a str...
                return result
        raise _unfit(where, value, f"the JSON to_json writes for {cls.__qualname__}")
    raise _unfit(where, value, f"a type it can be rebuilt as, not {cls.__qualname__}")


def _scalar(value: JsonValue, cls: Any) -> Any:
    """Build a scalar from its JSON; `_same_json` then tells whether it is the one."""
    if issubclass(cls, timedelta):
        return cls(seconds=value)
    if issubclass(cls, bytes | bytearray):
        return cls(base64.b64decode(value, validate=True))  # type: ignore[arg-type]
    return getattr(cls, "fromisoformat", cls)(value)  # dates and times; else the class


def _fields(value: JsonValue, cls: type, where: str) -> Any:
    """A dataclass or TypedDict: the object's keys are its fields, each rebuilt by its hint."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception as error:  # NameError, SyntaxError, TypeError: the class's own hints
        raise _unfit(where, value, f"{cls.__qualname__} with resolvable hints ({error})") from None
    dataclass = dataclasses.is_dataclass(cls)
    init = {f.name: f.init for f in dataclasses.fields(cls)} if dataclass else hints
    if not isinstance(value, dict) or not value.keys() <= init.keys():
        raise _unfit(where, value, f"an object of the fields of {cls.__qualname__}")
    if not dataclass:  # a TypedDict
        return {k: _rebuild(v, hints[k], f"{where}[{k!r}]") for k, v in value.items()}
    try:  # a field outside __init__ is left to it, and checked by its JSON in from_json
        return cls(
            **{k: _rebuild(v, hints[k], f"{where}.{k}") for k, v in value.items() if init[k]}
        )
    except (TypeError, ValueError) as error:
        raise _unfit(where, value, f"fields {cls.__qualname__} accepts ({error})") from None


def _union(value: JsonValue, members: tuple[Any, ...], where: str) -> Any:
    if value is None and type(None) in members:
        return None
    options = [m for m in members if m is not type(None)]
    if len(options) == 1:
        return _rebuild(value, options[0], where)
    fits: list[tuple[Any, Any]] = []
    for member in options:
        with contextlib.suppress(SerializationError):
            result = _rebuild(value, member, where)
            if result is value or _same_json(result, value):
                fits.append((member, result))
    if any(member is int for member, _ in fits):  # JCS writes 5.0 as 5: int takes it
        fits = [(member, result) for member, result in fits if member is not float]
    names = " | ".join(_name(m) for m in ([m for m, _ in fits] or options))
    return _one([result for _, result in fits], value, where, names)


def _one(matches: list[Any], value: JsonValue, where: str, expected: str) -> Any:
    """The one match; none is a misfit, several are ambiguous and refused all the same."""
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise _unfit(where, value, expected)
    raise _unfit(where, value, f"exactly one of {expected} to fit, not {len(matches)}", _ONE_TYPE)


def _hint(
    func: Callable[..., Any], parameter: inspect.Parameter, hints: dict[str, Any] | None, where: str
) -> Any:
    """The parameter's resolved hint; alone in `func`'s globals if not all of them resolve."""
    if hints is not None or parameter.annotation is parameter.empty:
        return (hints or {}).get(parameter.name, parameter.empty)
    namespace = getattr(inspect.unwrap(func), "__globals__", {})
    stand_in = types.FunctionType((lambda: None).__code__, namespace)
    stand_in.__annotations__ = {"hint": parameter.annotation}
    try:
        return typing.get_type_hints(stand_in, include_extras=True)["hint"]
    except Exception as error:  # NameError, SyntaxError, TypeError: the hint's own
        raise SerializationError(
            f"{where}: found the annotation {parameter.annotation!r}, which cannot be "
            f"resolved ({error}); expected a type; define or import it, or {_RESUME}"
        ) from None


def _same_json(result: Any, value: JsonValue) -> bool:
    """Whether `result` converts to `value` exactly, as the approval hash sees it."""
    try:
        return canonical_bytes(to_json(result)) == canonical_bytes(value)
    except SerializationError:
        return False


def _unfit(where: str, value: JsonValue, expected: str, fix: str = _ADVICE) -> SerializationError:
    return SerializationError(f"{where}: found {_found(value)}, expected {expected}; {fix}")


def _found(value: JsonValue) -> str:
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    kinds = {dict: "an object", bool: str(value).lower(), type(None): "null"}
    return kinds.get(type(value), f"the number {value!r}")


def _name(annotation: Any) -> str:
    name = annotation.__qualname__ if isinstance(annotation, type) else repr(annotation)
    return name.replace("typing.", "")
