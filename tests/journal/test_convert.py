"""`to_json`: the one documented conversion of Python values, and what it refuses."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import pathlib
import uuid
from typing import Any

import pydantic
import pytest
from hypothesis import given

from sagacity import (
    CompensationContext,
    Phase,
    Sagacity,
    SagaOutcome,
    SerializationError,
    compensable,
    compensation,
    to_json,
)
from sagacity.journal import canonical_bytes
from tests.journal.strategies import float_free_values, json_values


class Colour(enum.Enum):
    RED = "red"
    BLUE = 2


class Size(enum.IntEnum):
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


class Customer(pydantic.BaseModel):
    name: str
    since: datetime.datetime
    credit: decimal.Decimal


class Opaque:
    """Has no JSON form."""


class TestConversionTable:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (None, None),
            (True, True),
            ("text é 😀", "text é 😀"),
            (2**53 - 1, 2**53 - 1),
            (-(2**53) + 1, -(2**53) + 1),
            (2**53, "9007199254740992"),
            (-(2**64), "-18446744073709551616"),
            (1.5, 1.5),
            (decimal.Decimal("12.30"), "12.30"),
            (decimal.Decimal("1E+3"), "1E+3"),
            (
                datetime.datetime(2026, 3, 2, 9, 15, 27, 104233, tzinfo=datetime.UTC),
                "2026-03-02T09:15:27.104233+00:00",
            ),
            (datetime.datetime(2026, 3, 2, 9, 15), "2026-03-02T09:15:00"),
            (datetime.date(2026, 3, 2), "2026-03-02"),
            (datetime.time(9, 15, 27), "09:15:27"),
            (datetime.timedelta(minutes=1, milliseconds=500), 60.5),
            (
                uuid.UUID("12345678-1234-5678-1234-567812345678"),
                "12345678-1234-5678-1234-567812345678",
            ),
            (pathlib.PurePosixPath("/srv/data/report.csv"), "/srv/data/report.csv"),
            (Colour.RED, "red"),
            (Colour.BLUE, 2),
            (Size.LARGE, 3),
            (b"\x00\xffsagacity", "AP9zYWdhY2l0eQ=="),
            (bytearray(b"ab"), "YWI="),
            (memoryview(b"ab"), "YWI="),
            ((1, "two", [3]), [1, "two", [3]]),
            ({3, 1, 2}, [1, 2, 3]),
            (frozenset({"b", "a", 10}), ["a", "b", 10]),  # "\"a\"" sorts before "10"
            ({1: "one", Colour.RED: "r", "k": "v"}, {"1": "one", "red": "r", "k": "v"}),
        ],
    )
    def test_each_row_of_the_table(self, value: Any, expected: Any) -> None:
        """Each documented conversion gives exactly the documented JSON."""
        converted = to_json(value)
        assert converted == expected
        assert type(converted) is type(expected)

    def test_dataclasses_are_objects_of_their_fields(self) -> None:
        """A dataclass becomes an object of its fields, each converted in turn."""
        order = Order(
            sku="SKU-1",
            placed=datetime.date(2026, 1, 31),
            ship_to=Address(street="Main St", number=5),
            tags=frozenset({"gift"}),
        )
        assert to_json(order) == {
            "sku": "SKU-1",
            "placed": "2026-01-31",
            "ship_to": {"street": "Main St", "number": 5},
            "tags": ["gift"],
        }

    def test_pydantic_models_use_their_json_dump(self) -> None:
        """A pydantic model is what `model_dump(mode="json")` gives."""
        customer = Customer(
            name="Ada",
            since=datetime.datetime(2020, 5, 1, tzinfo=datetime.UTC),
            credit=decimal.Decimal("10.50"),
        )
        assert to_json(customer) == {
            "name": "Ada",
            "since": "2020-05-01T00:00:00Z",
            "credit": "10.50",
        }

    def test_sets_sort_by_canonical_json_whatever_the_iteration_order(self) -> None:
        """Equal sets give equal arrays, so their hash does not depend on hashing seeds."""
        assert to_json({"x", "y", "z"}) == to_json({"z", "y", "x"}) == ["x", "y", "z"]

    @given(json_values())
    def test_json_values_convert_to_equal_values(self, value: Any) -> None:
        """A value that is already JSON converts to an equal value with the same encoding."""
        assert canonical_bytes(to_json(value)) == canonical_bytes(value)

    @given(float_free_values)
    def test_conversion_copies_containers(self, value: Any) -> None:
        """The result shares no list or dict with the input: later changes do not leak in."""
        converted = to_json(value)
        if isinstance(value, list | dict):
            assert converted is not value


class TestRefusals:
    @pytest.mark.parametrize(
        ("value", "where"),
        [
            (Opaque(), "value: cannot convert a Opaque"),
            (float("nan"), "value: nan has no JSON form"),
            ({"a": [1, float("inf")]}, "value['a'][1]: inf has no JSON form"),
            (decimal.Decimal("NaN"), "value: Decimal('NaN') has no JSON form"),
            ({"x": {"y": "\ud800"}}, "value['x']['y']: the string '\\ud800' holds a lone"),
            ({"\udfff": 1}, "value: the string '\\udfff' holds a lone surrogate"),
            ({1: "a", "1": "b"}, "value: two keys become the JSON key '1'"),
            ({(1, 2): "tuple key"}, "value: object key (1, 2) is not a string"),
            ({True: "bool key"}, "value: object key True is not a string"),
            ([Address(street="x", number=1), {"o": Opaque()}], "value[1]['o']: cannot convert"),
        ],
    )
    def test_refusals_name_where(self, value: Any, where: str) -> None:
        """What has no JSON form raises SerializationError saying where it was found."""
        with pytest.raises(SerializationError) as raised:
            to_json(value)
        assert str(raised.value).startswith(where)

    def test_a_value_holding_itself(self) -> None:
        """A cycle is refused, not followed until the interpreter gives up."""
        loop: list[Any] = [1]
        loop.append(loop)
        with pytest.raises(SerializationError, match="holds itself"):
            to_json(loop, where="tool 't' argument 'items'")


class Shop:
    def __init__(self) -> None:
        self.charged: list[Any] = []

    @compensable(by="refund")
    def charge(self, amount: Any, note: str = "") -> str:
        self.charged.append(amount)
        return "charge-1"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        pass

    @compensable(by="refund_receipt")
    def receipt(self, amount: int) -> Any:
        return Opaque()

    @compensation
    def refund_receipt(self, ctx: CompensationContext) -> None:
        pass


class TestWrappedTool:
    def test_an_unconvertible_argument_stops_the_call_before_it_runs(self, store_url: str) -> None:
        """SerializationError names tool and argument; the tool did not run, nothing journaled."""
        sagacity = Sagacity.from_url(store_url)
        shop = Shop()
        tools = {tool.name: tool for tool in sagacity.wrap(shop)}
        errors: list[SerializationError] = []

        def work() -> None:
            try:
                tools["charge"](Opaque(), note="gift")
            except SerializationError as error:
                errors.append(error)
                raise

        result = sagacity.saga("order-1", work)
        assert shop.charged == []
        assert str(errors[0]).startswith("tool 'charge' argument 'amount': cannot convert")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert [e.phase for e in sagacity.history("order-1")] == [Phase.REFUSED, Phase.ENDED]
        sagacity.close()

    def test_a_nested_bad_value_is_named_by_its_path(self, store_url: str) -> None:
        """The error points inside the argument: `argument 'amount'['lines'][0]`."""
        sagacity = Sagacity.from_url(store_url)
        shop = Shop()
        charge = next(tool for tool in sagacity.wrap(shop) if tool.name == "charge")

        def work() -> None:
            charge({"lines": ["\ud800"]})

        result = sagacity.saga("order-2", work)
        assert isinstance(result.error, SerializationError)
        assert str(result.error).startswith("tool 'charge' argument 'amount'['lines'][0]")
        assert shop.charged == []
        assert [e.phase for e in sagacity.history("order-2")] == [Phase.REFUSED, Phase.ENDED]
        sagacity.close()

    def test_converted_arguments_are_journaled_as_the_table_says(self, store_url: str) -> None:
        """The INTENT holds the converted input, with defaults applied."""
        sagacity = Sagacity.from_url(store_url)
        charge = next(tool for tool in sagacity.wrap(Shop()) if tool.name == "charge")
        sagacity.saga("order-3", lambda: charge(decimal.Decimal("9.99")))
        intent = sagacity.history("order-3")[0]
        assert intent.phase is Phase.INTENT
        assert intent.payload == {
            "input": {"amount": "9.99", "note": ""},
            "reversibility": "COMPENSATABLE",
        }
        sagacity.close()

    def test_an_unconvertible_result_is_still_recorded(self, store_url: str) -> None:
        """The effect happened: EXECUTED is journaled with a description of the result."""
        sagacity = Sagacity.from_url(store_url)
        receipt = next(tool for tool in sagacity.wrap(Shop()) if tool.name == "receipt")
        sagacity.saga("order-4", lambda: receipt(5))
        executed = sagacity.history("order-4")[1]
        assert executed.phase is Phase.EXECUTED
        assert isinstance(executed.payload, dict)
        assert executed.payload["result"] is None
        assert "cannot convert a Opaque" in str(executed.payload["unserializable_result"])
        sagacity.close()
