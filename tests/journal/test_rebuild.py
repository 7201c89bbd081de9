"""`from_json` and `rebuild_arguments`: the reverse of `to_json`, and what they refuse."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import pathlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Optional, TypedDict

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sagacity import SerializationError
from sagacity.journal import canonical_bytes
from sagacity.journal._canonical import decode_canonical
from sagacity.journal._convert import to_json
from sagacity.journal._rebuild import from_json, rebuild_arguments
from tests.journal.strategies import characters, floats, json_values, texts

Decimal = decimal.Decimal
ZERO = Decimal("0")


class Colour(enum.Enum):
    RED = "red"
    BLUE = 2


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 3


@dataclasses.dataclass
class Address:
    street: str
    number: int


@dataclasses.dataclass
class Order:
    sku: str
    placed: datetime.date
    ship_to: Address
    tags: frozenset[str]
    total: Decimal = ZERO


class Customer(pydantic.BaseModel):
    name: str
    since: datetime.datetime
    credit: Decimal


class Parcel(TypedDict, total=False):
    weight: Decimal
    sent: datetime.datetime


def journaled(value: Any) -> Any:
    """What the journal gives back for `value`: its JSON, written canonically and read."""
    return decode_canonical(canonical_bytes(to_json(value)))


def rebuilt(value: Any, annotation: Any) -> Any:
    """`value` journaled, then rebuilt by `annotation`."""
    return from_json(journaled(value), annotation, where="value")


# Offsets in whole seconds: Python 3.11's fromisoformat drops an offset's microseconds,
# which from_json then refuses (the rebuilt value would journal otherwise).
offsets = st.integers(-86_399, 86_399).map(
    lambda seconds: datetime.timezone(datetime.timedelta(seconds=seconds))
)
zones = st.one_of(st.none(), offsets)
decimals = st.decimals(allow_nan=False, allow_infinity=False)
datetimes = st.datetimes(timezones=zones)
segments = st.text(characters.filter(lambda c: c not in "/\x00"), min_size=1, max_size=6)
paths = st.lists(segments, max_size=4).map(lambda parts: pathlib.PurePosixPath("/", *parts))

ROUND_TRIPS: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (None, st.none()),
    (bool, st.booleans()),
    (int, st.integers()),  # beyond ±(2**53 - 1), journaled as decimal strings
    (float, floats),  # 5.0 comes back from the journal as the integer 5
    (str, texts),
    (Decimal, decimals),
    (datetime.datetime, datetimes),
    (datetime.date, st.dates()),
    (datetime.time, st.times(timezones=zones)),
    (
        datetime.timedelta,
        st.timedeltas(-datetime.timedelta(days=20_000), datetime.timedelta(days=20_000)),
    ),
    (uuid.UUID, st.uuids()),
    (pathlib.PurePosixPath, paths),
    (pathlib.Path, paths.map(pathlib.Path)),
    (Colour, st.sampled_from(Colour)),
    (Size, st.sampled_from(Size)),
    (bytes, st.binary()),
    (bytearray, st.binary().map(bytearray)),
    (list[int], st.lists(st.integers())),
    (Sequence[Decimal], st.lists(decimals)),
    (tuple[int, ...], st.lists(st.integers()).map(tuple)),
    (tuple[int, str, bytes], st.tuples(st.integers(), texts, st.binary())),
    (set[int], st.sets(st.integers())),
    (frozenset[str], st.frozensets(texts)),
    (dict[str, Decimal], st.dictionaries(texts, decimals)),
    (Mapping[str, list[datetime.date]], st.dictionaries(texts, st.lists(st.dates()))),
    (Optional[datetime.datetime], st.none() | datetimes),  # noqa: UP045  # Optional as written
    (Annotated[Colour | None, "note"], st.none() | st.sampled_from(Colour)),
    (list[tuple[Size, bytes]], st.lists(st.tuples(st.sampled_from(Size), st.binary()))),
]


class TestRoundTrips:
    @pytest.mark.parametrize(
        ("annotation", "values"), ROUND_TRIPS, ids=[repr(hint) for hint, _ in ROUND_TRIPS]
    )
    @given(data=st.data())
    def test_rebuilt_values_equal_the_originals(
        self, annotation: Any, values: st.SearchStrategy[Any], data: st.DataObject
    ) -> None:
        """from_json(journaled x) == x, of x's type, and it journals as x did."""
        value = data.draw(values)
        result = rebuilt(value, annotation)
        assert result == value
        assert type(result) is type(value)
        assert canonical_bytes(to_json(result)) == canonical_bytes(to_json(value))

    @given(json_values())
    def test_json_passes_through_where_anything_is_accepted(self, value: Any) -> None:
        """Under `Any`, `object` or no annotation, the JSON value is the argument."""
        for annotation in (Any, object, inspect.Parameter.empty):
            assert from_json(value, annotation, where="value") is value


class TestValues:
    def test_decimal_comes_back_as_a_number(self) -> None:
        """Decimal('900.10') is journaled "900.10" and rebuilt for arithmetic, not concatenation."""
        amount = rebuilt(Decimal("900.10"), Decimal)
        assert amount == Decimal("900.10")
        assert str(amount) == "900.10"
        assert amount + amount == Decimal("1800.20")

    @pytest.mark.parametrize(
        "moment",
        [
            datetime.datetime(2026, 3, 2, 9, 15, 27, 104233, tzinfo=datetime.UTC),
            datetime.datetime(
                2026, 3, 2, 9, 15, tzinfo=datetime.timezone(datetime.timedelta(hours=-5))
            ),
            datetime.datetime(2026, 3, 2, 9, 15),
        ],
    )
    def test_datetime_keeps_its_offset_or_its_absence(self, moment: datetime.datetime) -> None:
        """An aware datetime comes back aware at the same offset; a naive one stays naive."""
        result = rebuilt(moment, datetime.datetime)
        assert result == moment
        assert result.utcoffset() == moment.utcoffset()

    def test_big_int_journaled_as_a_string(self) -> None:
        """2**70 is journaled as a decimal string and rebuilt as the int."""
        assert to_json(2**70) == "1180591620717411303424"
        assert rebuilt(2**70, int) == 2**70

    def test_json_integer_for_a_float_parameter(self) -> None:
        """A float parameter given a JSON integer (JCS writes 5.0 as 5) gets a float."""
        result = from_json(5, float, where="value")
        assert result == 5.0
        assert type(result) is float

    def test_tuple_of_an_int_and_a_str(self) -> None:
        """tuple[int, str] rebuilds a two-item array as a tuple, each item by its type."""
        assert from_json([7, "seven"], tuple[int, str], where="value") == (7, "seven")

    def test_nested_dataclass(self) -> None:
        """A dataclass is rebuilt field by field, by the class's hints, nested ones too."""
        order = Order(
            sku="SKU-1",
            placed=datetime.date(2026, 1, 31),
            ship_to=Address(street="Main St", number=5),
            tags=frozenset({"gift", "fragile"}),
            total=Decimal("12.50"),
        )
        result = rebuilt(order, Order)
        assert result == order
        assert isinstance(result.ship_to, Address)
        assert result.total + result.total == Decimal("25.00")

    def test_pydantic_model(self) -> None:
        """A pydantic model is rebuilt by its own `model_validate`."""
        customer = Customer(
            name="Ada",
            since=datetime.datetime(2020, 5, 1, tzinfo=datetime.UTC),
            credit=Decimal("10.50"),
        )
        result = rebuilt(customer, Customer)
        assert result == customer
        assert result.credit == Decimal("10.50")

    def test_typed_dict(self) -> None:
        """A TypedDict is a dict whose values are rebuilt by its hints; absent keys stay so."""
        assert from_json({"weight": "1.25"}, Parcel, where="value") == {"weight": Decimal("1.25")}

    def test_enum_by_value(self) -> None:
        """An enum member is found by its value's JSON."""
        assert from_json("red", Colour, where="value") is Colour.RED
        assert from_json(2, Colour, where="value") is Colour.BLUE

    def test_bytes_from_base64(self) -> None:
        """Bytes are rebuilt from their standard base64."""
        assert from_json("AP9zYWdhY2l0eQ==", bytes, where="value") == b"\x00\xffsagacity"

    def test_literal(self) -> None:
        """A Literal takes the one literal whose JSON is the value."""
        assert from_json("red", Literal["red", "blue"], where="value") == "red"
        assert from_json("red", Literal[Colour.RED, 3], where="value") is Colour.RED


class TestUnions:
    def test_optional(self) -> None:
        """Optional[T] takes null as None, and anything else as T."""
        assert from_json(None, Decimal | None, where="value") is None
        assert from_json("1.5", Optional[Decimal], where="value") == Decimal("1.5")  # noqa: UP045

    def test_the_one_member_that_fits_is_used(self) -> None:
        """A union takes the value as the only member it fits."""
        assert from_json("1.5", Decimal | int, where="value") == Decimal("1.5")
        assert from_json(3, Decimal | int, where="value") == 3
        assert from_json("hello", Decimal | str, where="value") == "hello"

    def test_an_integer_is_an_int_before_a_float(self) -> None:
        """Given an integer, int | float takes the int: both journal it the same."""
        assert type(from_json(5, int | float, where="value")) is int
        assert type(from_json(5.5, int | float, where="value")) is float

    def test_an_ambiguous_union_is_refused_naming_the_parameter(self) -> None:
        """Decimal | str given a decimal string could be either: refused, not guessed."""

        def book(amount: Decimal | str) -> None:
            pass

        with pytest.raises(SerializationError) as raised:
            rebuild_arguments(book, {"amount": "900.10"}, tool_name="book")
        message = str(raised.value)
        assert message.startswith("tool 'book' argument 'amount': found the string '900.10'")
        assert "expected exactly one of Decimal | str to fit, not 2" in message
        assert "resume with the framework's own resume as `work`" in message


class TestRefusals:
    @pytest.mark.parametrize(
        ("value", "annotation", "expected"),
        [
            (
                "ten",
                Decimal,
                "found the string 'ten', expected the JSON to_json writes for Decimal",
            ),
            ("NaN", Decimal, "found the string 'NaN'"),
            (" 1.5", Decimal, "found the string ' 1.5'"),  # Decimal() reads it; str() differs
            ([1], int, "found an array of 1, expected the JSON to_json writes for int"),
            ("5", int, "found the string '5'"),  # a small int is journaled as a number
            (True, int, "found true"),
            (1, bool, "found the number 1"),
            (5.5, int, "found the number 5.5"),
            (5, str, "found the number 5"),
            ("2026-03-02T09:15:00Z", datetime.datetime, "found the string '2026-03-02T09:15:00Z'"),
            ("2026-03-02", datetime.datetime, "found the string '2026-03-02'"),
            (0.1234567, datetime.timedelta, "found the number 0.1234567"),
            ("YWJ=", bytes, "found the string 'YWJ='"),  # not the base64 b"ab" is written as
            ("{12345678-1234-5678-1234-567812345678}", uuid.UUID, "found the string"),
            ("/a//b", pathlib.PurePosixPath, "found the string '/a//b'"),
            ("green", Colour, "expected a value of Colour"),
            ("green", Literal["red"], "expected Literal['red']"),
            ({"a": 1}, list[int], "found an object, expected an array"),
            ([1], tuple[int, str], "expected an array of 2 for tuple[int, str]"),
            ([2, 1], set[int], "expected the JSON of set[int]"),  # to_json sorts sets
            ([1, 1], set[int], "expected the JSON of set[int]"),
            ({"1": 2}, dict[int, int], "with str keys"),
            ({"street": "x"}, Address, "found an object"),  # a field is missing
            ({"street": "x", "number": 1, "floor": 2}, Address, "the fields of Address"),
            ({"name": "Ada"}, Customer, "expected a valid Customer"),
            ({"weight": "heavy"}, Parcel, "value['weight']: found the string 'heavy'"),
            ([1.5], list[int | None], "value[0]: found the number 1.5"),
            (None, int, "found null"),
            ("x", complex, "expected a type it can be rebuilt as, not complex"),
        ],
    )
    def test_what_does_not_fit_is_refused(self, value: Any, annotation: Any, expected: str) -> None:
        """A value that does not fit, or would journal differently, raises naming where."""
        with pytest.raises(SerializationError) as raised:
            from_json(value, annotation, where="value")
        message = str(raised.value)
        assert message.startswith("value")
        assert expected in message
        assert "resume with the framework's own resume as `work`" in message

    def test_a_bad_value_is_refused_naming_the_parameter(self) -> None:
        """A string that is not a Decimal, for a Decimal parameter, names tool and argument."""

        def wire(amount: Decimal, to: str) -> None:
            pass

        with pytest.raises(SerializationError) as raised:
            rebuild_arguments(wire, {"amount": "lots", "to": "acct-1"}, tool_name="wire")
        assert str(raised.value).startswith(
            "tool 'wire' argument 'amount': found the string 'lots', expected the JSON to_json "
            "writes for Decimal; annotate the parameter, or resume with"
        )

    def test_a_nested_bad_value_is_named_by_its_path(self) -> None:
        """The error points inside the argument, as to_json's do."""
        value = {"sku": "S", "placed": "2026-01-31", "ship_to": {"street": "x", "number": "5"}}
        value |= {"tags": [], "total": "0"}
        with pytest.raises(SerializationError, match=r"^value\.ship_to\.number: found the string"):
            from_json(value, Order, where="value")


class Bank:
    def __init__(self) -> None:
        self.sent: list[tuple[Decimal, str]] = []

    def wire(self, amount: Decimal, to: str, note: str = "") -> Decimal:
        self.sent.append((amount, to))
        return amount + amount


def wire(amount: Decimal, to: str, when: datetime.datetime | None = None) -> Decimal:
    return amount + amount


def tag(sku: str, **labels: Colour) -> dict[str, Colour]:
    return labels


def anything(payload, count=1, *rest):  # unannotated on purpose
    return payload


def unresolvable(to: str, amount: NoSuchAmount) -> None:  # noqa: F821  # on purpose
    pass


class TestRebuildArguments:
    def test_a_journaled_wire_runs_with_decimals(self) -> None:
        """The journaled input of `wire` rebuilds to arguments the tool computes with."""
        stored = journaled({"amount": Decimal("900.10"), "to": "acct-1", "when": None})
        arguments = rebuild_arguments(wire, stored, tool_name="wire")
        assert arguments == {"amount": Decimal("900.10"), "to": "acct-1", "when": None}
        assert wire(**arguments) == Decimal("1800.20")

    def test_absent_parameters_are_left_to_their_defaults(self) -> None:
        """A parameter missing from the input is missing from the result."""
        assert rebuild_arguments(wire, {"amount": "1", "to": "x"}, tool_name="wire") == {
            "amount": Decimal("1"),
            "to": "x",
        }

    def test_a_bound_method(self) -> None:
        """`self` is bound already: only the journaled parameters are rebuilt."""
        bank = Bank()
        stored = {"amount": "900.10", "to": "acct-1", "note": ""}
        arguments = rebuild_arguments(bank.wire, stored, tool_name="wire")
        assert "self" not in arguments
        assert bank.wire(**arguments) == Decimal("1800.20")
        assert bank.sent == [(Decimal("900.10"), "acct-1")]

    def test_kwargs_take_the_other_keys_by_their_value_annotation(self) -> None:
        """Keys naming no parameter go to **labels, each rebuilt as a Colour."""
        stored = journaled({"sku": "S-1", "front": Colour.RED, "back": Colour.BLUE})
        arguments = rebuild_arguments(tag, stored, tool_name="tag")
        assert arguments == {"sku": "S-1", "front": Colour.RED, "back": Colour.BLUE}
        assert tag(**arguments) == {"front": Colour.RED, "back": Colour.BLUE}

    def test_unannotated_parameters_pass_through(self) -> None:
        """Without annotations the JSON values are the arguments; an empty *rest is left out."""
        stored = {"payload": {"a": ["1.5", 2]}, "count": 3, "rest": []}
        arguments = rebuild_arguments(anything, stored, tool_name="anything")
        assert arguments == {"payload": {"a": ["1.5", 2]}, "count": 3}
        assert arguments["payload"] is stored["payload"]

    def test_an_unresolvable_forward_reference_names_the_parameter(self) -> None:
        """A hint naming nothing is a SerializationError for that parameter, not a NameError."""
        with pytest.raises(SerializationError) as raised:
            rebuild_arguments(unresolvable, {"to": "x", "amount": "1"}, tool_name="pay")
        message = str(raised.value)
        assert message.startswith("tool 'pay' argument 'amount': found the annotation")
        assert "NoSuchAmount" in message
        assert "resume with the framework's own resume as `work`" in message

    def test_the_resolvable_parameters_of_such_a_tool_still_rebuild(self) -> None:
        """Only the parameter whose hint cannot be resolved is refused."""
        assert rebuild_arguments(unresolvable, {"to": "x"}, tool_name="pay") == {"to": "x"}

    def test_a_hint_defined_after_a_first_refusal_is_resolved(self) -> None:
        """What a tool's hints resolve to is kept once they all resolve, never a failure."""

        def pay(amount: LaterAmount) -> None:  # type: ignore[name-defined]  # noqa: F821
            """Defined before its hint's class, as in a module that imports late."""

        with pytest.raises(SerializationError, match="'amount': found the annotation"):
            rebuild_arguments(pay, {"amount": "1.5"}, tool_name="pay")
        globals()["LaterAmount"] = decimal.Decimal
        try:
            for _ in range(2):  # resolved, then kept
                arguments = rebuild_arguments(pay, {"amount": "1.5"}, tool_name="pay")
                assert arguments == {"amount": decimal.Decimal("1.5")}
        finally:
            del globals()["LaterAmount"]

    @pytest.mark.parametrize(
        ("arguments", "expected"),
        [
            (
                {"amount": "1", "to": "x", "fee": 2},
                "tool 'wire' argument 'fee': found the number 2",
            ),
            ({"amount": 1, "to": "x"}, "tool 'wire' argument 'amount': found the number 1"),
        ],
    )
    def test_what_cannot_be_passed_is_refused(self, arguments: Any, expected: str) -> None:
        """An unknown key, or a value of the wrong JSON kind, is refused before anything runs."""
        with pytest.raises(SerializationError, match=f"^{expected}"):
            rebuild_arguments(wire, arguments, tool_name="wire")

    def test_positional_arguments_are_refused(self) -> None:
        """A non-empty *rest cannot be passed by name."""
        with pytest.raises(SerializationError, match=r"^tool 'a' argument 'rest': found an array"):
            rebuild_arguments(anything, {"payload": 1, "rest": [1]}, tool_name="a")
