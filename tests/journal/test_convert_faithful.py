"""Two inputs a tool treats differently never convert, hash and get approved as one.

What has no faithful JSON form is refused with `SerializationError` naming where it
is, rather than projected onto a value another input shares: a secret (dumped masked),
a pydantic field left out of the dump, a `str`/`int`/`float` subclass whose conversion
says otherwise than its value, a `timedelta` a double cannot hold to the microsecond.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sagacity import (
    Reversibility,
    Sagacity,
    SagaOutcome,
    SerializationError,
    compensable,
)
from sagacity.journal import sha256_hex, to_json
from sagacity.journal._rebuild import from_json

WHERE = "tool 'wire' argument 'order'"


class Login(pydantic.BaseModel):
    user: str
    password: pydantic.SecretStr


class Keyed(pydantic.BaseModel):
    name: str
    key: pydantic.SecretBytes


class Audited(pydantic.BaseModel):
    amount: int
    approved_by: str = pydantic.Field(exclude=True)


class Batch(pydantic.BaseModel):
    logins: list[Login]


class Envelope(pydantic.BaseModel):
    inner: Audited


@dataclasses.dataclass
class Credentials:
    login: Login


class Masked(str):
    """Shows a mask: str() of two different values is the same."""

    __slots__ = ()

    def __str__(self) -> str:
        return "****"


class Honest(str):
    """Overrides str() and says the same thing as its characters."""

    __slots__ = ()

    def __str__(self) -> str:
        return str.__str__(self)


class Sku(str):
    """A plain subclass: converts as its characters."""

    __slots__ = ()


class Cents(int):
    """int() gives another number than the value."""

    def __int__(self) -> int:
        return int.__int__(self) // 100


class Ratio(float):
    def __float__(self) -> float:
        return 0.0


def refused(value: Any, at: str, reason: str) -> None:
    with pytest.raises(SerializationError) as error:
        to_json(value, where=WHERE)
    assert str(error.value).startswith(f"{at}: "), str(error.value)
    assert reason in str(error.value)


class TestSecrets:
    def test_two_logins_differing_only_in_their_secret_are_refused(self) -> None:
        """Dumped masked, they would hash the same: refused, naming the field."""
        for secret in ("hunter2", "correct horse"):
            refused(Login(user="ada", password=secret), f"{WHERE}.password", "dumped masked")

    def test_secret_bytes_and_a_bare_secret_are_refused(self) -> None:
        refused(Keyed(name="k", key=b"\x00\x01"), f"{WHERE}.key", "SecretBytes is dumped masked")
        refused(pydantic.SecretStr("x"), WHERE, "SecretStr is dumped masked")

    def test_a_secret_anywhere_inside_is_found(self) -> None:
        """In a list of models, in a dict, in a dataclass holding a model."""
        login = Login(user="ada", password="x")
        refused(Batch(logins=[login]), f"{WHERE}.logins[0].password", "dumped masked")
        refused({"who": login}, f"{WHERE}['who'].password", "dumped masked")
        refused(Credentials(login=login), f"{WHERE}.login.password", "dumped masked")


class TestExcludedFields:
    def test_a_field_left_out_of_the_dump_is_refused(self) -> None:
        """Two inputs differing only in an `exclude=True` field would hash the same."""
        for approver in ("ada", "mallory"):
            refused(Audited(amount=5, approved_by=approver), f"{WHERE}.approved_by", "exclude")

    def test_in_a_nested_model_too(self) -> None:
        refused(
            Envelope(inner=Audited(amount=5, approved_by="ada")),
            f"{WHERE}.inner.approved_by",
            "left out of its dump",
        )

    def test_a_model_dumping_every_field_converts_as_before(self) -> None:
        class Plain(pydantic.BaseModel):
            amount: int
            note: str = pydantic.Field(repr=False)

        assert to_json(Plain(amount=5, note="n")) == {"amount": 5, "note": "n"}


class TestSubclasses:
    def test_a_str_whose_str_shows_another_text_is_refused(self) -> None:
        """Masked('abc') and Masked('xyz') both str() to '****': refused, not hashed as one."""
        for text in ("abc", "xyz"):
            refused(Masked(text), WHERE, "whose str() gives '****'")
            refused({"ref": Masked(text)}, f"{WHERE}['ref']", "whose str() gives")
            refused({Masked(text): 1}, WHERE, "whose str() gives")

    def test_a_str_subclass_converts_as_its_characters(self) -> None:
        """A plain subclass, or one whose str() agrees, is its characters, as a str."""
        for value in (Sku("SKU-1"), Honest("SKU-1")):
            converted = to_json(value, where=WHERE)
            assert (converted, type(converted)) == ("SKU-1", str)
        assert to_json({Sku("k"): 1}) == {"k": 1}

    def test_an_int_or_float_whose_conversion_differs_is_refused(self) -> None:
        refused(Cents(1250), WHERE, "whose int() gives '12' but whose value is '1250'")
        refused({Cents(1250): "x"}, WHERE, "whose int() gives")
        refused(Ratio(0.5), WHERE, "whose float() gives '0.0'")


class TestTimedelta:
    def test_one_a_double_cannot_hold_is_refused(self) -> None:
        """From ~270 years on the microseconds are lost: two values would give one number."""
        first = datetime.timedelta(days=999_999_999, microseconds=1)
        second = datetime.timedelta(days=999_999_999, microseconds=2)
        assert first.total_seconds() == second.total_seconds()
        for value in (first, second, datetime.timedelta.max):
            refused(value, WHERE, "has no exact number of seconds in JSON")

    def test_whole_days_of_any_size_are_kept(self) -> None:
        """timedelta.min is whole days: exact, and read back as itself."""
        for value in (datetime.timedelta.min, datetime.timedelta(days=999_999_999)):
            assert from_json(to_json(value), datetime.timedelta, where="v") == value

    @given(st.timedeltas())
    def test_every_timedelta_converted_reads_back_as_itself(
        self, value: datetime.timedelta
    ) -> None:
        """Converted, it is the only timedelta with that JSON (it reads back as itself)."""
        try:
            converted = to_json(value)
        except SerializationError:
            return
        assert from_json(converted, datetime.timedelta, where="v") == value


class TestThroughATool:
    def test_an_irreversible_call_with_a_secret_is_refused_before_it_asks(
        self, store_url: str
    ) -> None:
        """No approval request is made for an input whose hash would not bind its secret."""
        sagacity = Sagacity.from_url(store_url)
        sent: list[Login] = []

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(order: Login) -> str:
            sent.append(order)
            return "sent"

        (tool,) = sagacity.wrap(wire)
        result = sagacity.saga("order-1", lambda: tool(Login(user="ada", password="x")))
        assert isinstance(result.error, SerializationError)
        assert str(result.error).startswith(f"{WHERE}.password: a SecretStr is dumped masked")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert sent == []
        assert sagacity.pending() == []
        sagacity.close()

    def test_distinct_subclass_values_never_share_an_approval_hash(self) -> None:
        """What converts gives distinct hashes for distinct values; the rest is refused."""
        assert sha256_hex(to_json(Sku("a"))) != sha256_hex(to_json(Sku("b")))
        with pytest.raises(SerializationError):
            to_json(Masked("a"))
